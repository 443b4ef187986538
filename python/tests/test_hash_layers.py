"""DeepSeek-V4's hash-routed layers through Python: forward(x, token_ids=...) against the float64
numpy evaluation of reference.py, which reads the release naming (FP4 experts, FP8 shared
expert, gate.tid2eid) itself. Budgets as test_numerics.py: 1e-5 relative L2 for f32
activations, 1e-4 for bf16 (float32 accumulation over K <= 128 terms is ~1e-7; a routing or
table bug moves whole experts, 1e-1 or more).
"""

from __future__ import annotations

import numpy as np
import pytest

import mxmoe
from reference import evaluate, load_layer, relative_error

VOCAB = 50


@pytest.fixture(scope="module")
def v4(tmp_path_factory):
    """A 2-layer DeepSeek-V4 checkpoint in the release naming: layer 0 hash-routed, 1 routed."""
    path = tmp_path_factory.mktemp("v4") / "v4"
    mxmoe.generate(str(path), "deepseek-v4-flash", layers=2, hash_layers=1, vocab=VOCAB,
                   experts=16, top_k=4, hidden=128, intermediate=64, seed=9)
    return str(path)


def tokens(seed: int, count: int = 11):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((count, 128), dtype=np.float32)
    ids = rng.integers(0, VOCAB, count)
    ids[3] = ids[7]  # two tokens with one id: the same experts, different x
    return x, ids


@pytest.mark.parametrize("activation", ["f32", "bf16"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_hash_layer_matches_float64(v4, activation, dtype):
    layer = mxmoe.Model(v4).layer(0, activation=activation)
    assert layer.vocab == VOCAB
    x, ids = tokens(seed=1)
    y = layer(x, token_ids=ids.astype(dtype))
    expected = evaluate(load_layer(v4, 0), x, activation, token_ids=ids)
    budget = {"f32": 1e-5, "bf16": 1e-4}[activation]
    assert relative_error(y, expected) <= budget


def test_the_ids_decide_the_experts(v4):
    """Other ids for the same x: other experts (the table is not ignored), each still matching
    the float64 evaluation."""
    layer = mxmoe.Model(v4).layer(0, activation="f32")
    x, ids = tokens(seed=2)
    other = (ids + 1) % VOCAB
    reference = load_layer(v4, 0)
    y, y_other = layer(x, token_ids=ids), layer(x, token_ids=other)
    assert relative_error(y_other, evaluate(reference, x, "f32", token_ids=other)) <= 1e-5
    assert relative_error(y, y_other.astype(np.float64)) > 1e-2


def test_routed_layer_matches_float64_and_ignores_ids(v4):
    layer = mxmoe.Model(v4).layer(1, activation="f32")
    assert layer.vocab == 0
    x, ids = tokens(seed=3)
    y = layer(x)
    assert relative_error(y, evaluate(load_layer(v4, 1), x, "f32")) <= 1e-5
    np.testing.assert_array_equal(layer(x, token_ids=ids), y)


def test_bad_token_ids_are_named(v4):
    layer = mxmoe.Model(v4).layer(0, activation="f32")
    x, ids = tokens(seed=4)
    with pytest.raises(ValueError, match="hash-routed"):
        layer(x)  # a hash layer needs them
    bad = ids.copy()
    bad[5] = VOCAB
    with pytest.raises(ValueError, match="token id 50 of token 5"):
        layer(x, token_ids=bad)
    with pytest.raises(ValueError, match=r"token_ids\[2\] = -1"):
        layer(x, token_ids=np.where(np.arange(len(ids)) == 2, -1, ids).astype(np.int64))
    with pytest.raises(ValueError, match=r"token_ids: expected shape \[11\]"):
        layer(x, token_ids=ids[:4])
    with pytest.raises(ValueError, match="1-D"):
        layer(x, token_ids=ids.reshape(-1, 1))
    with pytest.raises(TypeError, match="token_ids"):
        layer(x, token_ids=ids.astype(np.float32))


def test_token_ids_of_a_wrong_type_name_the_dtypes(v4):
    # A float array of ids was reported as "shape [4, 0]": the vector's shape and both dtypes.
    layer = mxmoe.Model(v4).layer(0, activation="f32")
    x, ids = tokens(seed=5)
    with pytest.raises(TypeError, match=r"token_ids: expected a int32 or int64 array of shape "
                                        r"\[11\], got float64"):
        layer(x, token_ids=ids.astype(np.float64))
