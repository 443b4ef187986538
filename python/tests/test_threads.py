"""Layers called from several Python threads: the GIL is released while a layer computes, two
layers run at once on the shared runtime (a second caller computes on its own thread), and
every result has the bits of the same call made alone. (How much faster two threads are is
measured in bench/python/concurrency.py, never asserted here.)"""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest


def _run_threads(targets):
    errors = []

    def guard(fn):
        def run():
            try:
                fn()
            except BaseException as e:  # noqa: BLE001 (reported to the test below)
                errors.append(e)
        return run

    threads = [threading.Thread(target=guard(t)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


@pytest.mark.parametrize("same_layer", [False, True])
def test_concurrent_calls_give_the_bits_of_calls_alone(models, same_layer):
    a = models["gpt-oss-20b"].layer(0, activation="bf16")
    b = a if same_layer else models["deepseek-v3"].layer(1, activation="f32")
    rng = np.random.default_rng(42)
    xs = {name: [rng.standard_normal((int(rng.integers(1, 40)), layer.hidden), dtype=np.float32)
                 for _ in range(12)] for name, layer in (("a", a), ("b", b))}
    expected = {"a": [a(x) for x in xs["a"]], "b": [b(x) for x in xs["b"]]}
    got = {"a": [None] * 12, "b": [None] * 12}

    def work(name, layer):
        def run():
            for _ in range(5):
                for i, x in enumerate(xs[name]):
                    got[name][i] = layer(x)
        return run

    _run_threads([work("a", a), work("b", b)])
    for name in ("a", "b"):
        for y, e in zip(got[name], expected[name]):
            np.testing.assert_array_equal(y, e)


def test_the_gil_is_released_while_a_layer_computes(models):
    """With a switch interval of an hour, the main thread can run while a worker is inside
    layer(x) only if the call released the GIL: the worker holds it otherwise from before the
    call until it ends. The main thread checks that the call has not returned when it gets to
    run (the call is made long enough to be caught; a held GIL fails every attempt)."""
    layer = models["mixtral-8x7b"].layer(0, activation="f32", threads=1)
    previous = sys.getswitchinterval()
    caught = False
    tokens = 256
    try:
        sys.setswitchinterval(3600.0)
        for _ in range(4):  # up to 16384 tokens
            x = np.random.default_rng(tokens).standard_normal((tokens, layer.hidden),
                                                              dtype=np.float32)
            started, finished = threading.Event(), threading.Event()

            def worker():
                started.set()
                layer(x)
                finished.set()

            t = threading.Thread(target=worker)
            t.start()
            started.wait()
            caught = not finished.is_set()
            t.join()
            if caught:
                break
            tokens *= 4  # a longer call, in case this one ended before the main thread woke
    finally:
        sys.setswitchinterval(previous)
    assert caught, "the main thread never ran while layer(x) computed: the GIL was held"


def test_model_layer_from_many_threads_binds_once(checkpoints):
    import mxmoe  # noqa: PLC0415

    model = mxmoe.Model(checkpoints["qwen3-30b-a3b"])
    layers = []
    _run_threads([lambda: layers.append(model.layer(1, activation="bf16")) for _ in range(8)])
    assert len(layers) == 8 and all(layer is layers[0] for layer in layers)
