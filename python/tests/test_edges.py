"""One contract at the edges (docs/RELIABILITY.md), the Python side: NaN/Inf in x, bad routing,
non-finite outputs, outputs overlapping any input, and arguments out of range are each the
error the C API and the command line give for the same failure, naming the argument or the
tokens."""

from __future__ import annotations

import os

import numpy as np
import pytest

import mxmoe

NON_FINITE_X = "x: 1 non-finite value (NaN/Inf) in 1 of 4 tokens: token 2 (1)"


@pytest.fixture(scope="module")
def layer(models):
    return models["qwen3-30b-a3b"].layer(0, activation="f32")


@pytest.fixture()
def x(layer):
    return np.random.default_rng(3).standard_normal((4, layer.hidden), dtype=np.float32)


def routing(layer, tokens):
    ids = np.array([np.arange(layer.top_k) + t for t in range(tokens)], np.int32)
    return ids, np.full((tokens, layer.top_k), 1.0 / layer.top_k, np.float32)


def test_nan_in_x_is_refused_by_every_forward_naming_the_token(layer, x):
    x[2, 5] = np.nan
    ids, weights = routing(layer, 4)
    for call in (lambda: layer(x), lambda: layer.forward(x),
                 lambda: layer.forward_routed(x, ids, weights),
                 lambda: layer.forward_routed(x, ids.astype(np.int64), weights)):
        with pytest.raises(ValueError, match=r"x: 1 non-finite value \(NaN/Inf\) in 1 of 4 "
                                             r"tokens: token 2 \(1\)"):
            call()


def test_nan_in_bf16_x_is_refused(layer, x):
    x[2, 0] = np.inf
    bits = (x.view(np.uint32) >> 16).astype(np.uint16)
    ids, weights = routing(layer, 4)
    with pytest.raises(ValueError, match="token 2"):
        layer(bits, bf16_bits=True)
    with pytest.raises(ValueError, match="token 2"):
        layer.forward_routed(bits, ids, weights, bf16_bits=True)


def test_bad_routing_is_refused(layer, x):
    ids, weights = routing(layer, 4)
    bad = ids.copy()
    bad[1, 0] = layer.num_experts
    with pytest.raises(ValueError, match="out of range"):
        layer.forward_routed(x, bad, weights)
    w = weights.copy()
    w[3, 1] = -0.5
    with pytest.raises(ValueError, match="token 3, slot 1 is negative"):
        layer.forward_routed(x, ids, w)
    w[3, 1] = np.nan
    with pytest.raises(ValueError, match="token 3, slot 1 is not finite"):
        layer.forward_routed(x, ids, w)


def test_non_finite_output_is_a_numeric_error_naming_the_tokens(layer, x):
    assert issubclass(mxmoe.NumericError, ValueError)
    ids, weights = routing(layer, 4)
    weights[1, :] = 3e38  # legal weights; their weighted sum overflows float32 in token 1
    with pytest.raises(mxmoe.NumericError) as e:
        layer.forward_routed(x, ids, weights)
    assert str(e.value).startswith("the output holds ")
    assert "(NaN/Inf) in 1 of 4 tokens: token 1 (" in str(e.value)
    out = np.zeros_like(x)
    with pytest.raises(mxmoe.NumericError):
        layer.forward_routed(x, ids, weights, out=out)


@pytest.mark.parametrize("argument", ["topk_ids", "topk_weights"])
def test_out_overlapping_the_routing_is_refused(layer, x, argument):
    ids, weights = routing(layer, 4)
    buffer = np.zeros((5, layer.hidden), np.float32)
    out = buffer[:4]
    inside = buffer[4, :ids.size].reshape(ids.shape)
    if argument == "topk_ids":
        inside.view(np.int32)[:] = ids
        ids = inside.view(np.int32)
        out = buffer[1:]
    else:
        inside[:] = weights
        weights = inside
        out = buffer[1:]
    with pytest.raises(ValueError, match=f"out: overlaps {argument}"):
        layer.forward_routed(x, ids, weights, out=out)


def test_out_overlapping_the_token_ids_is_refused(layer, x):
    buffer = np.zeros((5, layer.hidden), np.float32)
    token_ids = buffer[4, :4].view(np.int32)
    token_ids[:] = 1
    with pytest.raises(ValueError, match="out: overlaps token_ids"):
        layer(x, out=buffer[1:], token_ids=token_ids)


def test_too_many_rows_name_the_bound(layer):
    huge = np.broadcast_to(np.zeros((1, layer.hidden), np.float32), (2**40, layer.hidden))
    with pytest.raises(ValueError, match="x: 1099511627776 tokens; a call carries 0.."):
        layer(huge)


@pytest.mark.parametrize("call, words", [
    (lambda m: m.layer(0, threads=2**31), "threads: expected 0 (every logical CPU) or 1..1024"),
    (lambda m: m.layer(0, threads=-1), "threads: expected"),
    (lambda m: m.layer(0, tokens=2**62), "tokens: expected 1..1048576, got 4611686018427387904"),
    (lambda m: m.layer(0, tokens=2**21), "tokens: expected 1..1048576"),
    (lambda m: m.layer(2**40), "index: expected an int in"),
    (lambda m: mxmoe.explain(tokens=2**62), "tokens: expected"),
    (lambda m: mxmoe.explain(threads=2**31), "threads: expected"),
    (lambda m: mxmoe.generate("/tmp/never", seed=2**64), "seed: expected an int in 0..18446744073709551615"),
    (lambda m: mxmoe.generate("/tmp/never", seed=-1), "seed: expected"),
    (lambda m: mxmoe.generate("/tmp/never", experts=2**40), "experts: expected"),
    (lambda m: mxmoe.Model(b"/tmp/\xff\xfe"), "path: the path"),
    (lambda m: mxmoe.Model("/tmp/\udcff"), "path: the path"),
    (lambda m: mxmoe.generate("/tmp/\udcff", layers=1), "out: the path"),
    (lambda m: mxmoe.explain(model=b"/tmp/\xff"), "model: the path"),
])
def test_arguments_out_of_range_are_value_errors_naming_them(models, call, words):
    with pytest.raises(ValueError) as e:
        call(models["qwen3-30b-a3b"])
    assert words in str(e.value)
    assert "incompatible function arguments" not in str(e.value)


def test_bytes_paths_that_are_utf8_work(checkpoints):
    model = mxmoe.Model(os.fsencode(checkpoints["qwen3-30b-a3b"]))
    assert model.num_layers == 2
