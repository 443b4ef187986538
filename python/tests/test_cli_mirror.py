"""mxmoe.explain() and `python -m mxmoe` give what the mxmoe command gives: the same JSON
(one judgement, one JSON builder in the library), the same text, the same exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import mxmoe


def run(argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, **kw)


def python_m(*args):
    return run([sys.executable, "-m", "mxmoe", *args])


@pytest.fixture(scope="module")
def haswell(tmp_path_factory, cli):
    """A replayed probe: this machine's, capped at AVX2, so both sides judge the same data."""
    path = tmp_path_factory.mktemp("hw") / "avx2.json"
    probe = run([cli, "info", "--hardware", "--json"], env={**os.environ, "MXMOE_MAX_ISA": "avx2"})
    assert probe.returncode == 0, probe.stderr
    path.write_text(probe.stdout)
    return str(path)


CASES = [
    [],
    ["--preset", "deepseek-v3", "--activation", "int8", "--batch-invariant"],
    ["--preset", "qwen3-30b-a3b", "--backend", "amx_int8", "--tokens", "64"],
    ["--preset", "mixtral-8x7b", "--exclude", "avx2,reference", "--threads", "3"],
]


@pytest.mark.parametrize("args", CASES)
def test_explain_json_is_the_commands(cli, haswell, args):
    argv = ["explain", "--json", "--hardware", haswell, *args]
    command, module = run([cli, *argv]), python_m(*argv)
    assert module.returncode == command.returncode, module.stderr
    assert json.loads(module.stdout) == json.loads(command.stdout)
    assert module.stdout == command.stdout


@pytest.mark.parametrize("args", CASES)
def test_explain_table_is_the_commands(cli, haswell, args):
    argv = ["explain", "--hardware", haswell, *args]
    command, module = run([cli, *argv]), python_m(*argv)
    assert (module.returncode, module.stdout) == (command.returncode, command.stdout)
    assert module.stderr == command.stderr


def test_explain_function_is_the_commands_json(cli, haswell):
    command = run([cli, "explain", "--json", "--hardware", haswell, "--preset", "deepseek-v3",
                   "--activation", "mxfp8", "--batch-invariant", "--exclude", "reference"])
    assert command.returncode == 3  # nothing fits: the report still comes back
    report = mxmoe.explain(preset="deepseek-v3", activation="mxfp8", batch_invariant=True,
                           exclude=["reference"], hardware=haswell)
    assert report == json.loads(command.stdout)
    assert report["selected"] is None and report["error"].startswith("No MXFP4 MoE backend")
    assert list(report) == ["selected", "why", "preferences", "deployment", "candidates",
                            "error", "suggestions"]
    with open(haswell, encoding="utf-8") as f:
        as_dict = mxmoe.explain(preset="deepseek-v3", activation="mxfp8", batch_invariant=True,
                                exclude="reference", hardware=json.load(f))
    assert as_dict["candidates"] == report["candidates"]


def test_explain_of_a_checkpoint_layer(cli, checkpoints, haswell):
    path = checkpoints["deepseek-v4-flash"]
    command = run([cli, "explain", "--json", "--hardware", haswell, "--model", path,
                   "--layer", "1"])
    assert mxmoe.explain(model=path, layer=1, hardware=haswell) == json.loads(command.stdout)


def test_info_hardware_is_the_commands(cli):
    for flags in (["--hardware", "--json"], ["--hardware"]):
        command, module = run([cli, "info", *flags]), python_m("info", *flags)
        assert module.returncode == command.returncode == 0
        assert module.stdout == command.stdout
    assert json.loads(python_m("info", "--hardware", "--json").stdout) == mxmoe.hardware()


def test_a_broken_checkpoint_is_exit_1(cli, tmp_path):
    (tmp_path / "config.json").write_text("{}")
    for argv in (["info", "--model", str(tmp_path)], ["explain", "--model", str(tmp_path)]):
        module = python_m(*argv)
        assert module.returncode == run([cli, *argv]).returncode == 1, module.stderr
        assert "config.json" in module.stderr


def test_info_model(checkpoints):
    out = python_m("info", "--model", checkpoints["mixtral-8x7b"], "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["model_type"] == "mixtral" and report["layers"] == 2
    assert [entry["status"] for entry in report["per_layer"]] == ["ok", "ok"]


def test_synth_mirrors_the_commands(cli, tmp_path):
    args = ["--preset", "qwen3-30b-a3b", "--experts", "8", "--top-k", "2", "--hidden", "64",
            "--intermediate", "32", "--layers", "2", "--seed", "5"]
    assert run([cli, "synth", "--out", str(tmp_path / "c"), *args]).returncode == 0
    assert python_m("synth", "--out", str(tmp_path / "p"), *args).returncode == 0
    # The old name is an alias that says so, and writes the same bytes.
    old = run([cli, "generate", "--out", str(tmp_path / "g"), *args])
    assert old.returncode == 0 and "`mxmoe synth`" in old.stderr
    for name in sorted(os.listdir(tmp_path / "c")):
        for other in ("p", "g"):
            with open(tmp_path / "c" / name, "rb") as a, open(tmp_path / other / name, "rb") as b:
                assert a.read() == b.read(), (other, name)


@pytest.mark.parametrize("argv, code", [
    (["explain", "--activation", "fp7"], 2),
    (["explain", "--backend", "nope"], 2),
    (["explain", "--bogus-flag"], 2),
    (["explain", "--tokens", "0x10"], 2),  # decimal only, as for MXMOE_* variables
    (["explain", "--tokens", "+1"], 2),
    (["explain", "--threads", "1_0"], 2),
    (["generate", "--out", "/nonexistent/g", "--seed", "-1"], 2),
    (["generate", "--out", "/nonexistent/g", "--seed", str(2**64)], 2),
    (["info", "--model", "/nonexistent/checkpoint"], 1),  # a file's problem, as in the C API
    (["explain", "--hardware", "/nonexistent/probe.json"], 1),
    (["explain", "--hardware", "/dev/zero"], 1),
    (["explain", "--exclude", "amx_int8,amx_bf16,avx512_vnni,avx512_bf16,avx2_int16,avx2,reference"], 3),
])
def test_exit_codes_are_the_commands(cli, argv, code):
    module = python_m(*argv)
    assert module.returncode == run([cli, *argv]).returncode == code, module.stderr
    assert module.stderr
