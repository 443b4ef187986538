"""The package's surface: stubs that name what the extension defines, docstrings on every
public name, pins that agree, the version of the library it links."""

from __future__ import annotations

import ast
import inspect
import os
import re

import pytest

import mxmoe
from mxmoe import _mxmoe

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("MXMOE_SOURCE_DIR", os.path.normpath(os.path.join(HERE, "..", "..")))


def stub_names():
    """{name: set of member names} of mxmoe/_mxmoe.pyi (module level under "")."""
    with open(os.path.join(SOURCE, "python", "mxmoe", "_mxmoe.pyi"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    out = {"": set()}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out[""].add(node.name)
        if isinstance(node, ast.AnnAssign):
            out[""].add(node.target.id)
        if isinstance(node, ast.ClassDef):
            out[node.name] = {n.name if not isinstance(n, ast.AnnAssign) else n.target.id
                              for n in node.body
                              if isinstance(n, (ast.FunctionDef, ast.AnnAssign))}
    return out


def test_stubs_name_what_the_extension_defines():
    stubs = stub_names()
    defined = {n for n in dir(_mxmoe) if not n.startswith("__") or n == "__version__"}
    assert stubs[""] - {"ArrayLike", "Out"} == defined
    for cls in ("Layer", "_Model"):
        members = {n for n, _ in inspect.getmembers(getattr(_mxmoe, cls))
                   if not n.startswith("__") or n in ("__call__", "__init__")}
        members -= {"__init__"} if cls == "Layer" else set()
        assert stubs[cls] - {"__init__"} == members - {"__init__"}, cls


def test_public_names_have_docstrings():
    for name in mxmoe.__all__:
        obj = getattr(mxmoe, name)
        if name == "__version__":
            continue
        assert inspect.getdoc(obj), name
    for name in ("forward", "forward_routed", "selection", "spec", "backend"):
        assert inspect.getdoc(getattr(mxmoe.Layer, name)), name
    for name in ("layer", "config", "moe_layers"):
        assert inspect.getdoc(getattr(mxmoe.Model, name)), name


def test_version_is_the_librarys_and_the_projects():
    with open(os.path.join(SOURCE, "CMakeLists.txt"), encoding="utf-8") as f:
        version = re.search(r"project\(mxmoe VERSION ([0-9.]+)", f.read()).group(1)
    assert mxmoe.__version__ == version


def test_pins_agree():
    """scripts/test.sh's environment builds with the nanobind that pip's build uses."""
    with open(os.path.join(SOURCE, "pyproject.toml"), encoding="utf-8") as f:
        pyproject = f.read()
    with open(os.path.join(SOURCE, "python", "requirements-test.txt"), encoding="utf-8") as f:
        requirements = dict(re.findall(r"^([a-z_-]+)==(\S+)", f.read(), re.M))
    build = dict(re.findall(r'"([a-z_-]+)==([^"]+)"', pyproject))
    assert requirements["nanobind"] == build["nanobind"]
    assert requirements["numpy"] == build["numpy"] and requirements["pytest"] == build["pytest"]
    for name in ("torch", "transformers", "accelerate"):  # the "transformers" extra
        assert requirements[name] == build[name], name


def test_errors_are_the_documented_classes():
    assert issubclass(mxmoe.LoadError, OSError)
    assert issubclass(mxmoe.NoBackendError, Exception)
    assert mxmoe.NoBackendError.__module__ == mxmoe.LoadError.__module__ == "mxmoe"


@pytest.mark.parametrize("name", ["gpt-oss-20b", "deepseek-v4-flash"])
def test_presets_and_hardware(name):
    assert name in mxmoe.presets()
    hw = mxmoe.hardware()
    assert hw["logical_cpus"] >= 1 and "isa" in hw


@pytest.mark.parametrize("document, heading", [("README.md", "## Python"),
                                               ("docs/PYTHON.md", "## A first layer"),
                                               ("docs/PYTHON.md", "## Whole models")])
def test_documented_examples_run_as_written(document, heading, tmp_path, capsys):
    """The first Python block after HEADING, run as a user would paste it (its /tmp paths
    moved into this test's folder)."""
    with open(os.path.join(SOURCE, document), encoding="utf-8") as f:
        text = f.read()
    section = text[text.index(heading):]
    code = section[section.index("```python\n") + 10:]
    code = code[:code.index("```")]
    exec(compile(code.replace('"/tmp/', f'"{tmp_path}/'), document, "exec"), {})  # noqa: S102
    assert capsys.readouterr().out
