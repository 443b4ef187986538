#!/usr/bin/env bash
# One command from a fresh clone to a passing test suite: installs what is missing,
# builds (warnings are errors) with the Python extension, and runs every test with CTest: the
# C++ suites, the Python package's pytest files (in a virtual environment made here,
# build/venv, with the pinned packages of python/requirements-test.txt: numpy, torch,
# transformers) and the vLLM plugin's (in build/venv-vllm: python/requirements-vllm.txt).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/deps.sh"
python=$("$root/scripts/python_env.sh" "$root/build/venv")
vllm_python=$("$root/scripts/vllm_env.sh" "$root/build/venv-vllm")
"$root/scripts/build.sh" "$root/build" -DMXMOE_BUILD_PYTHON=ON -DPython_EXECUTABLE="$python" \
  -DMXMOE_VLLM_PYTHON="$vllm_python"
# The integration tests (torch, transformers) run, never skip: their packages are pinned in
# the venv above.
MXMOE_REQUIRE_INTEGRATIONS=1 ctest --test-dir "$root/build" --output-on-failure -j "$(nproc)"
