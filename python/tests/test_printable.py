"""`python -m mxmoe` prints through one path (issue 38): a directory's name, a config's
architecture, a hardware probe's model string and argparse's echo of a flag reached the
terminal raw. Every output of every command is grepped for a raw control byte."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

HOSTILE = "\x1b]0;owned\x07\x1b[2J"
RAW = re.compile(r"[\x00-\x09\x0b-\x1f\x7f]")


def _mxmoe(*args):
    env = dict(os.environ)
    return subprocess.run([sys.executable, "-m", "mxmoe", *args], capture_output=True,
                          text=True, errors="surrogateescape", env=env, timeout=300)


def test_no_command_prints_a_raw_control_byte(tmp_path):
    ck = tmp_path / ("ck" + HOSTILE)
    made = _mxmoe("synth", "--out", str(ck), "--preset", "gpt-oss-20b", "--experts", "8",
                  "--top-k", "2", "--hidden", "64", "--intermediate", "96")
    assert made.returncode == 0, made.stderr
    assert "\\x1b]0;owned\\x07" in made.stderr  # shown, escaped
    config = json.loads((ck / "config.json").read_text())
    config["architectures"] = ["GptOss" + HOSTILE]
    (ck / "config.json").write_text(json.dumps(config))
    probe = _mxmoe("info", "--hardware", "--json")
    assert probe.returncode == 0, probe.stderr
    hw = json.loads(probe.stdout)
    hw["model"] = "cpu" + HOSTILE
    hw_file = tmp_path / "hw.json"
    hw_file.write_text(json.dumps(hw))
    results = [made]
    for args in (["info", "--model", str(ck)], ["info", "--model", str(ck), "--json"],
                 ["explain", "--model", str(ck), "--hardware", str(hw_file)],
                 ["explain", "--preset", "tiny", "--hardware", str(hw_file)],
                 ["explain", "--preset", "tiny" + HOSTILE],
                 ["synth", "--out", str(ck), "--preset", "tiny" + HOSTILE]):
        results.append(_mxmoe(*args))
    for r in results:
        for name, text in (("stdout", r.stdout), ("stderr", r.stderr)):
            raw = RAW.search(text)
            assert raw is None, f"{r.args[3:]}: raw byte {ord(raw.group())} in {name}: {text!r}"
