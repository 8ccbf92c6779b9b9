"""Does the openai backend measure the same server as the native one?

Starts one embedded llama-server (4 slots) and, for K rounds, runs one native cell (llamacpp
backend, ``POST /completion``) and one openai cell (``POST /v1/completions``) back to back,
alternating which goes first. A cell is ``concurrency`` requests all in flight at once, with
``ignore_eos`` so that both produce exactly ``num_predict`` tokens per request, distinct nonce
prompts of equal token length, and the same sampling seeds. Each cell's aggregate throughput is
tokens / wall (first request sent → last request done, as in docs/method.md#metrics); each
round gives one ratio openai / native, and the median ratio across rounds is the answer.
Interleaving makes the comparison robust to drift: on 2 CPU cores run-to-run noise is up to
±15%, but two cells that follow each other within seconds see the same machine.

    .venv/bin/python benchmarks/openai_vs_native.py --rounds 10 --num-predict 128
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

from slotbench.measure.backends.llamacpp import LlamaCppBackend  # noqa: E402
from slotbench.measure.backends.openai import OpenAIBackend  # noqa: E402
from slotbench.measure.plan import make_rep_plan, run_plan  # noqa: E402
from slotbench.measure.servers.llamacpp import ManagedLlamaServer  # noqa: E402
from slotbench.workflow.config import resolve  # noqa: E402

SERVER = {"parallel": 4, "ctx_size": 4096, "threads": 2, "startup_timeout_s": 120}
MODEL = "gemma-3-270m-q4_k_m"


class PromptCachingOpenAI(OpenAIBackend):
    """The openai backend without its ``cache_prompt: false``: llama-server's default caching,
    to show what that switch is for (--prompt-cache)."""

    def payload(self, *args):
        body = super().payload(*args)
        body.pop("cache_prompt", None)
        return body


def backends(url: str, prompt_cache: bool = False) -> dict:
    openai_cls = PromptCachingOpenAI if prompt_cache else OpenAIBackend
    return {
        "native": LlamaCppBackend(url, {"backend": "llamacpp", "ignore_eos": True}),
        "openai": openai_cls(url + "/v1", {"backend": "openai", "model": MODEL,
                                           "endpoint": "completions", "ignore_eos": True}),
    }


def run_cell(backend, prompts: list[str], seeds: list[int], num_predict: int,
             temperature: float) -> dict:
    """All requests in flight at once; tokens over the wall clock that produced them."""
    with ThreadPoolExecutor(max_workers=len(prompts)) as pool:
        futures = [pool.submit(backend.generate, p, num_predict, temperature, s)
                   for p, s in zip(prompts, seeds, strict=True)]
        recs = [f.result() for f in futures]
    tokens = sum(r.output_tokens for r in recs)
    wall = max(r.t_done for r in recs) - min(r.t_sent for r in recs)
    return {
        "tokens": tokens,
        "wall_s": wall,
        "agg_tps": tokens / wall,
        "per_request_tokens": [r.output_tokens for r in recs],
        "done_reasons": sorted({r.done_reason for r in recs}),
        "timing_sources": sorted({r.timing_source for r in recs}),
        # prompt tokens the server evaluated vs took from its cache, per request
        "prompt_n": [r.server.get("prompt_n") for r in recs],
        "cache_n": [r.server.get("cache_n") for r in recs],
    }


def compare(url: str, rounds: int, num_predict: int = 128, concurrency: int = 4,
            temperature: float = 0.7, seed: int = 20260429, log=sys.stderr,
            prompt_cache: bool = False, same_prompts: bool = False) -> list[dict]:
    """K interleaved rounds of (native, openai) cells; one ratio openai/native per round.

    ``same_prompts`` gives both cells of a round the same prompts (a prompt the server has
    just seen), which with ``prompt_cache`` shows what llama-server's prompt cache does.
    """
    pair = backends(url, prompt_cache)
    template = resolve({})["prompt"]["template"]
    # one fresh nonce per request of every cell (warm-up included): no two prompts alike, all
    # of one token length, as the pipeline's plan makes them
    needed = (rounds + 1) * 3 * concurrency
    count = pair["native"].count_tokens
    plan = run_plan("bench", "run1", [1], needed, seed, template, 6, count, nonces=True,
                    control_arm=False)
    # the warm-up's prompt, then the cell's: all distinct
    rep = make_rep_plan(plan, 1, count, client_processes=1)
    texts = iter(r["prompt"] for r in rep["warmup"] + rep["cells"][0]["requests"])
    seeds = [seed + i for i in range(concurrency)]  # the same seeds in every cell

    for name in ("native", "openai"):  # warm-up, not measured
        run_cell(pair[name], [next(texts) for _ in range(concurrency)], seeds,
                 min(num_predict, 16), temperature)

    results = []
    for k in range(rounds):
        order = ("native", "openai") if k % 2 == 0 else ("openai", "native")
        cells = {}
        shared = [next(texts) for _ in range(concurrency)]
        for name in order:
            prompts = shared if same_prompts else [next(texts) for _ in range(concurrency)]
            cells[name] = run_cell(pair[name], prompts, seeds, num_predict, temperature)
        ratio = cells["openai"]["agg_tps"] / cells["native"]["agg_tps"]
        results.append({"round": k + 1, "order": list(order), "ratio": ratio,
                        "native": cells["native"], "openai": cells["openai"]})
        print(f"round {k + 1:2d} ({order[0]} first): native {cells['native']['agg_tps']:6.1f}"
              f" tok/s, openai {cells['openai']['agg_tps']:6.1f} tok/s, ratio {ratio:.3f}; "
              f"cached prompt tokens native {sum(cells['native']['cache_n'])}, "
              f"openai {sum(cells['openai']['cache_n'])}", file=log, flush=True)
    return results


def summarise(results: list[dict]) -> dict:
    ratios = sorted(r["ratio"] for r in results)
    if len(ratios) >= 2:
        q = statistics.quantiles(ratios, n=4, method="inclusive")
    else:
        q = [ratios[0]] * 3
    return {
        "rounds": len(ratios),
        "median_ratio": statistics.median(ratios),
        "min_ratio": ratios[0],
        "max_ratio": ratios[-1],
        "iqr": [q[0], q[2]],
        "native_median_tps": statistics.median(r["native"]["agg_tps"] for r in results),
        "openai_median_tps": statistics.median(r["openai"]["agg_tps"] for r in results),
        "tokens_per_cell": sorted({r[n]["tokens"] for r in results for n in ("native", "openai")}),
        "cached_prompt_tokens": {n: sum(sum(r[n]["cache_n"]) for r in results)
                                 for n in ("native", "openai")},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--num-predict", type=int, default=128)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--tolerance", type=float, default=0.10)
    ap.add_argument("--json", type=Path, help="write every round and the summary here")
    ap.add_argument("--prompt-cache", action="store_true",
                    help="let llama-server cache /v1 prompts (its default) to see the effect")
    ap.add_argument("--same-prompts", action="store_true",
                    help="both cells of a round get the same prompts (default: all distinct)")
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        with ManagedLlamaServer(SERVER, Path(tmp) / "server.log") as server:
            results = compare(server.url, args.rounds, args.num_predict, args.concurrency,
                              prompt_cache=args.prompt_cache, same_prompts=args.same_prompts)
    summary = summarise(results)
    print(json.dumps(summary, indent=2))
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "rounds": results}, indent=2))
    within = abs(summary["median_ratio"] - 1) <= args.tolerance
    print(f"median openai/native = {summary['median_ratio']:.3f} "
          f"({'within' if within else 'OUTSIDE'} ±{args.tolerance:.0%})")
    return 0 if within else 1


if __name__ == "__main__":
    sys.exit(main())
