"""Layers in a forked child (issue 38): once a pool of two or more threads had run, any layer
call in a child made by fork() waited forever (the child has none of the parent's worker
threads). multiprocessing's "fork" start method, DataLoader workers and pre-forking servers all
do this. The child must compute the parent's bits, on the parent's layers and on new ones."""

from __future__ import annotations

import os
import pickle
import select
import signal
import time

import numpy as np
import pytest

import mxmoe


def _in_child(fn, timeout=60.0):
    """fn() in a forked child; returns its (pickled) result, or fails naming a hang."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        status = 0
        try:
            payload = pickle.dumps(("ok", fn()))
        except BaseException as e:  # noqa: BLE001 (sent to the parent)
            payload = pickle.dumps(("error", repr(e)))
            status = 1
        with os.fdopen(write, "wb") as w:
            w.write(payload)
        os._exit(status)
    os.close(write)
    chunks = []
    deadline = time.monotonic() + timeout
    with os.fdopen(read, "rb") as r:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([r], [], [], left)[0]:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                pytest.fail(f"the forked child did not answer in {timeout} s (a hang)")
            chunk = os.read(r.fileno(), 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    os.waitpid(pid, 0)
    kind, value = pickle.loads(b"".join(chunks))
    assert kind == "ok", value
    return value


@pytest.mark.parametrize("threads", [0, 2, 3])
def test_a_forked_child_computes_the_parents_bits(checkpoints, threads):
    path = checkpoints["gpt-oss-20b"]
    layer = mxmoe.Model(path).layer(0, threads=threads)
    x = np.random.default_rng(3).standard_normal((33, layer.hidden), dtype=np.float32)
    expected = layer(x)  # the pool's workers have run

    # The parent's layer, and a new layer of a new Model (the same cached runtime), in a child.
    np.testing.assert_array_equal(_in_child(lambda: layer(x)), expected)
    np.testing.assert_array_equal(
        _in_child(lambda: mxmoe.Model(path).layer(0, threads=threads)(x)), expected)
    # A grandchild, and the parent afterwards.
    np.testing.assert_array_equal(_in_child(lambda: _in_child(lambda: layer(x))), expected)
    np.testing.assert_array_equal(layer(x), expected)


_LAYER = None  # the layer the multiprocessing workers inherit (a Layer is not picklable)


def _call_inherited_layer(x):
    return _LAYER(x)


def test_multiprocessing_fork_workers_compute(checkpoints):
    import multiprocessing

    global _LAYER
    path = checkpoints["mixtral-8x7b"]
    layer = _LAYER = mxmoe.Model(path).layer(1, threads=2)
    xs = [np.random.default_rng(i).standard_normal((5 + i, layer.hidden), dtype=np.float32)
          for i in range(4)]
    expected = [layer(x) for x in xs]
    with multiprocessing.get_context("fork").Pool(2) as pool:
        got = pool.map_async(_call_inherited_layer, xs).get(timeout=60)
    for y, e in zip(got, expected):
        np.testing.assert_array_equal(y, e)
