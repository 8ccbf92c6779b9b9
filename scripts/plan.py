"""Rule plan: rotated arm order per rep, nonces and equal-token-length prompts."""

from slotbench.backends import BackendError
from slotbench.entry import fail, progress_log
from slotbench.plan import make_plan
from slotbench.rawfiles import write_json_atomic
from slotbench.server import ServerError
from slotbench.targets import connect


def main(sm) -> None:
    target, run = sm.wildcards.target, sm.wildcards.run
    p = sm.params
    with progress_log(sm.log.progress) as log:
        try:
            with connect(p.target, sm.log.server, 30) as conn:
                plan = make_plan(
                    target, run, list(p.arms), p.reps, p.requests_per_cell, p.seed,
                    p.prompt["template"], p.prompt["nonce_digits"],
                    count_tokens=conn.backend.tokenizer(),
                    nonces=p.prompt["nonces"], control_arm=p.control_arm,
                )
        except (ServerError, BackendError) as exc:
            fail(f"target {target}, run {run}, plan: {exc}", log)
        write_json_atomic(sm.output[0], plan)
        orders = " ".join("-".join(map(str, r["order"])) for r in plan["reps"])
        print(f"[{target} {run}] plan: {len(plan['reps'])} reps, orders {orders}; "
              f"every prompt is {plan['prompt_tokens']} tokens", file=log)


main(snakemake)  # noqa: F821 - provided by Snakemake
