"""Every family, both forward paths, float32 and bfloat16 arrays, against a float64 numpy
evaluation of the same checkpoint (reference.py).

Budgets (docs/ACCURACY.md derives them): against a float64 evaluation that rounds the GEMM
inputs the same way, 1e-5 relative L2 for f32 activations (float32 accumulation over K <= 128
terms is ~1e-7; any real bug is 1e-2 or more) and 1e-4 for bf16 (an element of the
activation within float32 noise of a bf16 rounding boundary may round the other way). A
bfloat16 output adds its own rounding: each element is within half a bf16 ulp, i.e. 2^-9 of
its magnitude, so the relative L2 error grows by at most 2^-9. int8 activations are compared
with the unquantized layer at their format budget (2.5e-2).
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

import mxmoe
from conftest import PRESETS
from reference import (bf16_bits_to_f64, evaluate, load_layer, relative_error, round_bf16,
                       to_bf16_bits)

TOKENS = 9
SAME_ROUNDING_BUDGET = {"f32": 1e-5, "bf16": 1e-4}
BF16_OUTPUT = 2.0 ** -9


def inputs(layer: mxmoe.Layer, seed: int):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((TOKENS, layer.hidden), dtype=np.float32)
    ids = np.stack([rng.permutation(layer.num_experts)[:layer.top_k] for _ in range(TOKENS)])
    weights = rng.uniform(0.1, 1.0, (TOKENS, layer.top_k)).astype(np.float32)
    return x, ids.astype(np.int32), weights


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("activation", ["f32", "bf16"])
@pytest.mark.parametrize("path", ["forward", "forward_routed"])
@pytest.mark.parametrize("io", ["float32", "bfloat16"])
def test_layer_matches_float64(checkpoints, models, preset, activation, path, io):
    index = 1  # the second layer: its own tensors and seed
    layer = models[preset].layer(index, activation=activation)
    assert layer.activation == activation
    reference = load_layer(checkpoints[preset], index)
    x, ids, weights = inputs(layer, seed=zlib.crc32(f"{preset} {activation} {path} {io}".encode()))
    routing = (ids.astype(np.int64), weights.astype(np.float64)) if path == "forward_routed" \
        else None

    if io == "float32":
        y = layer(x) if path == "forward" else layer.forward_routed(x, ids, weights)
        assert y.dtype == np.float32 and y.shape == x.shape
        budget = SAME_ROUNDING_BUDGET[activation]
    else:
        bits = to_bf16_bits(x)
        x = bf16_bits_to_f64(bits).astype(np.float32)  # what the layer sees
        y_bits = layer(bits, bf16_bits=True) if path == "forward" else \
            layer.forward_routed(bits, ids, weights, bf16_bits=True)
        assert y_bits.dtype == np.uint16 and y_bits.shape == x.shape
        y = bf16_bits_to_f64(y_bits)
        budget = SAME_ROUNDING_BUDGET[activation] + BF16_OUTPUT

    expected = evaluate(reference, x, activation, routing)
    error = relative_error(y, expected)
    assert error <= budget, f"{preset} {activation} {path} {io}: relative error {error:.3g}"


@pytest.mark.parametrize("preset", PRESETS)
def test_int8_activations_within_their_budget(checkpoints, models, preset):
    try:
        layer = models[preset].layer(0, activation="int8")
    except mxmoe.NoBackendError as e:
        pytest.skip(f"no int8 backend on this machine: {e.selection['suggestions']}")
    # 64 tokens: the error's estimate over 64 x 128 outputs settles within a few percent.
    x = np.random.default_rng(7).standard_normal((64, layer.hidden), dtype=np.float32)
    error = relative_error(layer(x), evaluate(load_layer(checkpoints[preset], 0), x, "none"))
    assert error <= 2.5e-2, f"{preset} int8: relative error {error:.3g}"


def test_int64_ids_give_the_bits_of_int32(models):
    layer = models["qwen3-30b-a3b"].layer(0, activation="f32")
    x, ids, weights = inputs(layer, seed=3)
    np.testing.assert_array_equal(layer.forward_routed(x, ids, weights),
                                  layer.forward_routed(x, ids.astype(np.int64), weights))


def test_forward_routed_with_the_layers_own_routing_is_forward(checkpoints, models):
    """The two paths meet: routing computed by the reference, passed in, gives forward's bits
    (DeepSeek-V3: grouped routing with a selection bias, and a shared expert)."""
    layer = models["deepseek-v3"].layer(0, activation="f32")
    reference = load_layer(checkpoints["deepseek-v3"], 0)
    x, _, _ = inputs(layer, seed=11)
    from reference import route  # noqa: PLC0415
    logits = x.astype(np.float64) @ reference.router.T
    ids, weights = route(reference, logits.astype(np.float32).astype(np.float64))
    y_routed = layer.forward_routed(x, ids, weights.astype(np.float32))
    assert relative_error(y_routed, layer(x).astype(np.float64)) <= 1e-6


def test_batch_invariant_layer_gives_each_token_the_same_bits_alone(models):
    layer = models["gpt-oss-20b"].layer(0, activation="bf16", batch_invariant=True)
    assert layer.batch_invariant
    x, _, _ = inputs(layer, seed=5)
    batch = layer(x)
    for t in range(x.shape[0]):
        np.testing.assert_array_equal(layer(x[t:t + 1]), batch[t:t + 1])


def test_round_bf16_is_round_to_nearest_even():
    """The test's own bf16 rounding, on the tie cases it must get right."""
    one = np.float32(1.0)
    ulp = np.float32(2.0 ** -7)
    assert round_bf16(np.array([one + ulp / 2]))[0] == 1.0  # tie to even (down)
    assert round_bf16(np.array([one + ulp + ulp / 2]))[0] == 1.0 + 2 * ulp  # tie to even (up)
    assert round_bf16(np.array([one + ulp * 0.75]))[0] == 1.0 + ulp
