"""No lost data through the package: generate(force=True) replaces only a checkpoint mxmoe
wrote (or an empty directory), never the current directory; Ctrl-C in generate leaves the old
output as it was; the seed takes exactly the CLI's range."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

import mxmoe

TINY = dict(experts=4, top_k=2, hidden=64, intermediate=32)


def snapshot(root):
    out = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, root)] = f.read()
    return out


def test_force_replaces_only_what_mxmoe_wrote(tmp_path, monkeypatch):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text("secret")
    before = snapshot(home)
    with pytest.raises(mxmoe.LoadError, match=r"not a checkpoint mxmoe wrote.*\.ssh/"):
        mxmoe.generate(home, "mixtral-8x7b", force=True, **TINY)
    assert snapshot(home) == before

    empty = tmp_path / "empty"
    empty.mkdir()
    mxmoe.generate(empty, "mixtral-8x7b", force=True, **TINY)
    assert (empty / ".mxmoe-checkpoint").is_file()
    mxmoe.generate(empty, "mixtral-8x7b", force=True, seed=3, **TINY)

    # The current directory, even through "..", is never replaced.
    (empty / "sub").mkdir()
    monkeypatch.chdir(empty)
    with pytest.raises(mxmoe.LoadError, match="the current directory"):
        mxmoe.generate(os.path.join("sub", "..", "..", "empty"), "mixtral-8x7b", force=True,
                       **TINY)
    assert (empty / "config.json").is_file()


def test_seed_takes_the_range_of_the_cli(tmp_path):
    for seed in (-1, 2**64, 2**65):
        with pytest.raises(ValueError, match=r"seed: expected an int in 0\.\.18446744073709551615"):
            mxmoe.generate(tmp_path / "g", "mixtral-8x7b", seed=seed, **TINY)
    assert not (tmp_path / "g").exists()
    mxmoe.generate(tmp_path / "g", "mixtral-8x7b", seed=2**64 - 1, **TINY)


CHILD = """
import sys
import mxmoe
try:
    mxmoe.generate(sys.argv[1], "gpt-oss-20b", seed=9, force=True)
except KeyboardInterrupt:
    sys.exit(130)
sys.exit(0)
"""


def test_ctrl_c_in_generate_keeps_the_old_output(tmp_path):
    out = tmp_path / "out"
    mxmoe.generate(out, "mixtral-8x7b", **TINY)
    before = snapshot(out)
    # A gpt-oss-20b layer, 425 MB: seconds of making weights before the first byte is written.
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(out)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not any(n.startswith(".out.mxmoe-tmp-") for n in os.listdir(tmp_path)):
        assert child.poll() is None, "the child ended before writing"
        assert time.monotonic() < deadline, "no temporary directory appeared"
        time.sleep(0.002)
    signalled = time.monotonic()
    child.send_signal(signal.SIGINT)
    assert child.wait(timeout=120) == 130
    assert time.monotonic() - signalled < 3, "Ctrl-C waited for the layer's weights"
    assert snapshot(out) == before
    assert not [n for n in os.listdir(tmp_path) if ".mxmoe-tmp-" in n]
