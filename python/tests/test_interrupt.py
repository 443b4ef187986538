"""Ctrl-C during a long layer call: SIGINT raises KeyboardInterrupt within a moment, not when the
call would have ended, and the layer still gives the bits of an uninterrupted call afterwards.
The call runs in a child interpreter (a signal to this one would end pytest), sized there to take
about 30 s (so an interrupt that waits for the call to end cannot pass), on two threads so that
the pool's workers are stopped too, not only the caller."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

CHILD = r"""
import signal, sys, time
import numpy as np
import mxmoe

# Python's own Ctrl-C handler, even when this test runs where SIGINT is ignored (a background job).
signal.signal(signal.SIGINT, signal.default_int_handler)

path = mxmoe.generate(sys.argv[1], "mixtral-8x7b", layers=1, experts=4, top_k=2, hidden=256,
                      intermediate=1024, seed=5)
layer = mxmoe.Model(path).layer(0, activation="f32", threads=2, backend="reference")
rng = np.random.default_rng(6)
small = rng.standard_normal((64, layer.hidden), dtype=np.float32)
expected = layer(small)  # warm-up: the workspace, the first touch of the packed weights
t0 = time.perf_counter()
layer(small)
probe = time.perf_counter() - t0
tokens = int(min(65536, max(256, 64 * 30.0 / probe)))
x = rng.standard_normal((tokens, layer.hidden), dtype=np.float32)
print(f"started {tokens} {probe * tokens / 64:.1f}", flush=True)
t0 = time.perf_counter()
try:
    layer(x)
except KeyboardInterrupt:
    print(f"interrupted {time.perf_counter() - t0:.3f}", flush=True)
    np.testing.assert_array_equal(layer(small), expected)
    print("usable", flush=True)
    sys.exit(0)
print(f"finished {time.perf_counter() - t0:.3f}", flush=True)
sys.exit(1)
"""


def test_ctrl_c_ends_a_long_layer_call_soon(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path / "ckpt")],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=dict(os.environ, MXMOE_VERBOSE=""))
    try:
        started = child.stdout.readline().split()
        assert started and started[0] == "started", child.stderr.read()
        expected_seconds = float(started[2])
        # Without the interrupt the call would run this long: far more than the bound below.
        assert expected_seconds > 10, f"the call was sized to {expected_seconds} s only"
        time.sleep(1.0)  # well inside the call
        signalled = time.perf_counter()
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=expected_seconds + 60)
        after_signal = time.perf_counter() - signalled
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0, f"{out}\n{err}"
    assert "interrupted" in out and "usable" in out, f"{out}\n{err}"
    # The child also checked the layer once more (64 tokens) before exiting.
    assert after_signal < 5.0, (f"KeyboardInterrupt came {after_signal:.1f} s after SIGINT in a "
                                f"call sized to {expected_seconds:.0f} s")
