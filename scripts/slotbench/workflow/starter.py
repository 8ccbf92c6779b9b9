"""`slotbench init`: a commented starter config for the user's own server, one per backend."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import yaml

from slotbench.core import urls
from slotbench.core.cli import CommandError, Parser
from slotbench.core.defaults import default
from slotbench.measure.backends import BACKENDS
from slotbench.workflow import experiment as exp
from slotbench.workflow.config import ConfigError

# where each backend's server listens unless told otherwise, and a model it could serve
# (Gemma 3 270M, the embedded default's model, so the reports compare)
SERVERS = {
    "llamacpp": ("http://127.0.0.1:8080", None,
                 "a llama-server you started, e.g. `llama-server -m model.gguf -np 4 --port 8080`"),
    "ollama": ("http://127.0.0.1:11434", "gemma3:270m",
               "your Ollama (`ollama pull gemma3:270m`, then "
               "`OLLAMA_NUM_PARALLEL=4 ollama serve`)"),
    "openai": ("http://127.0.0.1:8000", "google/gemma-3-270m",
               "an OpenAI-compatible server (vLLM, SGLang, LM Studio, any /v1)"),
}
# the keys a starter shows, commented, with the schema's defaults
SHOWN = ("arms", "requests_per_cell", "reps", "runs", "num_predict")


def _backend_keys(backend: str) -> list[str]:
    if backend == "llamacpp":
        return ["    # model: my-model          # optional: the server reports the model it serves",
                "    # ignore_eos: true         # pin every output to num_predict tokens"]
    if backend == "ollama":
        return [f"    # num_ctx: {default('targets[].num_ctx', 'ollama', False)}"
                "              # sent with every request and with the warm-up load",
                "    # OLLAMA_* settings are not visible over HTTP: state your server's here,",
                "    # so the fingerprint records them",
                '    # ollama_env: {OLLAMA_NUM_PARALLEL: "4"}']
    return ["    # endpoint: chat           # /v1/chat/completions instead of /v1/completions",
            "    # api_key_env: MY_KEY      # the NAME of the variable that holds the API key",
            "    # ignore_eos: true         # pins output length where the server honours it"]


def _scalar(value: str) -> str:
    """A YAML scalar: plain where that reads the same, else quoted."""
    return value if re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_./:@+-]*", value) else json.dumps(value)


def starter_text(backend: str, url: str | None, model: str | None, experiment: str) -> str:
    """The starter config's text: the target, its backend's optional keys commented out, and
    the size of the experiment with the schema's defaults, commented out."""
    where, example_model, what = SERVERS[backend]
    model = model or example_model
    lines = [
        f"# slotbench: {what}.",
        "# Run it: .venv/bin/slotbench run THIS-FILE   (or .venv/bin/snakemake --cores 1 "
        "--configfile THIS-FILE)",
        "# Every key, with its default: config/README.md; every backend's: docs/targets.md.",
        f"experiment: {experiment}            # results go to results/{experiment}/",
        "targets:",
        f"  - name: {backend}",
        f"    backend: {backend}",
        "    managed: false             # your server: slotbench never starts or stops it",
        f"    url: {_scalar(url or where)}",
    ]
    if model:
        lines.append(f"    model: {_scalar(model)}" + ("          # the id GET /v1/models lists"
                                              if backend == "openai" else ""))
    lines += _backend_keys(backend)
    lines += ["", "# The size of the experiment (the defaults shown; the smoke size: "
              "slotbench run --smoke THIS-FILE):"]
    lines += [f"# {key}: {default(key)}" for key in SHOWN]
    return "\n".join(lines) + "\n"


def init_parser() -> Parser:
    parser = Parser(
        prog="slotbench init",
        description=(
            "Write a commented starter config for your own server (Ollama, llama-server or an\n"
            "OpenAI-compatible one), ready to measure with slotbench run. An existing file is\n"
            "never overwritten."),
        examples=[".venv/bin/slotbench init --backend ollama --output mybox.yaml",
                  ".venv/bin/slotbench run mybox.yaml"],
    )
    parser.add_argument("--backend", required=True, choices=sorted(BACKENDS),
                        help="the server's wire protocol")
    parser.add_argument("--url", help="the server's URL (default: the backend's usual local port)")
    parser.add_argument("--model", help="the model, as the server names it")
    parser.add_argument("--output", default="mybox.yaml", metavar="PATH",
                        help="the file to write (default: mybox.yaml)")
    return parser


def command_name() -> str:
    """How the user types slotbench here: the venv's launcher, else python -m slotbench."""
    launcher = Path(sys.executable).parent / "slotbench"
    return str(launcher) if launcher.is_file() else f"{sys.executable} -m slotbench"


def main_init(argv: list[str]) -> int:
    args = init_parser().parse_args(argv)
    if args.url:
        try:
            urls.endpoint(args.url)
        except ValueError as exc:
            raise CommandError(f"--url {args.url!r} {exc}") from None
    out = Path(args.output)
    stem = re.sub(r"[^A-Za-z0-9_-]+", "-", out.stem).strip("-")[:64] or "mybox"
    text = starter_text(args.backend, args.url, args.model, stem)
    try:  # the file as the user will run it: config/config.yaml with it merged over
        exp.validate(exp.build([], yaml.safe_load(text)))
    except ConfigError as exc:
        raise CommandError(str(exc)) from None
    try:
        with open(out, "x", encoding="utf-8") as fh:
            fh.write(text.replace("THIS-FILE", str(out)))
    except FileExistsError:
        raise CommandError(f"{out} exists; it is left as it is (give another --output)") from None
    except OSError as exc:
        raise CommandError(f"cannot write {out}: {exc.strerror or exc}") from None
    print(f"wrote {out}; measure your server with it:\n  {command_name()} run {out}")
    return 0
