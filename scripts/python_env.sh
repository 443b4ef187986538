#!/usr/bin/env bash
# Creates (or reuses) the virtual environment the Python tests run in, with the pinned
# packages of python/requirements-test.txt (nanobind to build the extension, numpy and pytest
# for the tests), and prints its interpreter. Idempotent: an environment that already holds
# the pins is left as it is, without asking the network.
#   scripts/python_env.sh VENV_DIR
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${1:?usage: python_env.sh VENV_DIR}
venv=$(mkdir -p "$venv" && cd "$venv" && pwd)  # absolute: pip's TMPDIR lies inside it
requirements=$root/python/requirements-test.txt
stamp=$venv/.mxmoe-requirements

source "$root/scripts/pip_install.sh"
rm -rf "$venv/.pip-tmp"  # left by a run killed mid-install: not counted as used space

if ! cmp -s "$requirements" "$stamp"; then
  # Measured: 5.6 GiB installed, torch with its CUDA libraries (PyPI's only Linux build) most
  # of it, plus the wheels while they unpack.
  require_free_space "$venv" "$(venv_room "$venv" 8)" "the test venv ($venv: numpy, torch, transformers)"
fi
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" >&2
fi
if ! cmp -s "$requirements" "$stamp"; then
  pip_install "$venv" -r "$requirements"
  cp "$requirements" "$stamp"
fi
echo "$venv/bin/python"
