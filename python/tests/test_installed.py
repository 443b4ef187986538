"""The package as a wheel installs it: CMake's "python" component (what scikit-build-core puts
in the wheel for `pip install .`) installed into a scratch folder, imported from there by a
fresh interpreter, with the libmxmoe beside it found through the extension's $ORIGIN rpath
and nothing read from the build tree. Runs under ctest (which knows the build folder)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

SCRIPT = r"""
import os, sys, numpy as np, mxmoe
here = os.path.dirname(mxmoe.__file__)
maps = open("/proc/self/maps").read()
libs = {line.split()[-1] for line in maps.splitlines() if "libmxmoe" in line or "_mxmoe" in line}
assert libs and all(os.path.dirname(p) == here for p in libs), libs
layer = mxmoe.Model(sys.argv[1]).layer(0)
y = layer(np.ones((2, layer.hidden), np.float32))
assert y.shape == (2, layer.hidden) and np.isfinite(y).all()
print(sorted(os.listdir(here)))
"""


def test_installed_component_imports_alone(tmp_path, checkpoints):
    build, cmake = os.environ.get("MXMOE_BUILD_DIR"), os.environ.get("MXMOE_CMAKE")
    if not build or not cmake:
        pytest.skip("needs the CMake build folder (run through ctest)")
    prefix = tmp_path / "site"
    subprocess.run([cmake, "--install", build, "--component", "python", "--prefix", str(prefix)],
                   check=True, capture_output=True, timeout=300)
    assert sorted(os.listdir(prefix)) == ["mxmoe"]  # nothing else: no headers, no command
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LD_LIBRARY_PATH")}
    env["PYTHONPATH"] = str(prefix)
    out = subprocess.run([sys.executable, "-c", SCRIPT, checkpoints["gpt-oss-20b"]],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stderr
    files = eval(out.stdout)  # noqa: S307 (our own script's list)
    import mxmoe  # noqa: PLC0415
    soname = "libmxmoe.so." + ".".join(mxmoe.__version__.split(".")[:2])
    for name in ("__init__.py", "__main__.py", "_mxmoe.pyi", "py.typed", soname):
        assert name in files
    assert any(f.startswith("_mxmoe.") and f.endswith(".so") for f in files)
