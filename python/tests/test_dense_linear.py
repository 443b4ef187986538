"""mxmoe's dense kernels for an engine's own layers (mxmoe._mxmoe._DenseLinear, _row_softmax;
include/mxmoe/dense.hpp): the products and softmaxes they compute, and batch invariance, as
mxmoe proves its experts': every row alone, and at each position in a batch of six (and of
forty), under one thread and two, gives the same bits."""

from __future__ import annotations

import numpy as np
import pytest

from mxmoe import _mxmoe

SHAPES = [(1, 7), (33, 100), (300, 2880), (64, 4096)]  # (out, in): tails of 16 and of none


def _rows_alone_and_in_batches(f, x):
    """f's output for each row of x alone equals its row in f(x) (bit for bit)."""
    whole = f(x)
    for i in range(x.shape[0]):
        alone = f(np.ascontiguousarray(x[i:i + 1]))
        assert np.array_equal(alone[0].view(np.uint32), whole[i].view(np.uint32)), i
    return whole


@pytest.mark.parametrize("out,inner", SHAPES)
def test_dense_linear_is_the_product_and_batch_invariant(out, inner):
    rng = np.random.default_rng(out * 7 + inner)
    w = (rng.standard_normal((out, inner), dtype=np.float32) / np.sqrt(inner)).astype(np.float32)
    bias = rng.standard_normal(out, dtype=np.float32)
    x = rng.standard_normal((40, inner), dtype=np.float32)
    one, two = _mxmoe._DenseLinear(w, bias, 1), _mxmoe._DenseLinear(w, bias, 2)
    assert (one.in_features, one.out_features) == (inner, out)
    assert one.kernel.endswith("_fp32")
    y = _rows_alone_and_in_batches(two.forward, x)
    assert np.array_equal(y.view(np.uint32), one.forward(x).view(np.uint32))  # threads
    _rows_alone_and_in_batches(two.forward, np.ascontiguousarray(x[:6]))
    reference = x.astype(np.float64) @ w.T.astype(np.float64) + bias
    assert np.abs(y - reference).max() <= 1e-5 * max(1.0, np.abs(reference).max())
    no_bias = _mxmoe._DenseLinear(w, None, 0).forward(x)
    assert np.array_equal((no_bias + bias).view(np.uint32), y.view(np.uint32))


def test_dense_linear_refuses_what_it_cannot_read():
    w = np.ones((4, 8), dtype=np.float32)
    with pytest.raises(ValueError, match="weight: expected a 2-D"):
        _mxmoe._DenseLinear(np.ones(8, dtype=np.float32), None, 1)
    with pytest.raises(ValueError, match="weight: expected a C-contiguous"):
        _mxmoe._DenseLinear(np.ones((8, 4), dtype=np.float32).T, None, 1)
    with pytest.raises(TypeError, match="weight: expected a float32 or bfloat16"):
        _mxmoe._DenseLinear(np.ones((4, 8), dtype=np.float64), None, 1)
    with pytest.raises(ValueError, match="bias: expected a 1-D array of 4"):
        _mxmoe._DenseLinear(w, np.ones(5, dtype=np.float32), 1)
    layer = _mxmoe._DenseLinear(w, None, 1)
    with pytest.raises(ValueError, match="x: expected shape"):
        layer.forward(np.ones((2, 9), dtype=np.float32))
    assert layer.forward(np.ones((0, 8), dtype=np.float32)).shape == (0, 4)


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("n", [1, 5, 512, 201088])
def test_row_softmax_is_the_softmax_and_batch_invariant(log, n):
    rng = np.random.default_rng(n)
    x = rng.standard_normal((6, n), dtype=np.float32) * 4
    x[1, : n // 2] = -np.inf  # masked entries
    y = _rows_alone_and_in_batches(lambda a: _mxmoe._row_softmax(a, log), x)
    shifted = x.astype(np.float64) - x.max(axis=1, keepdims=True)
    total = np.exp(shifted).sum(axis=1, keepdims=True)
    reference = shifted - np.log(total) if log else np.exp(shifted) / total
    finite = np.isfinite(reference)
    assert np.array_equal(np.isfinite(y), finite)
    assert np.abs(y[finite] - reference[finite]).max() <= 4e-7 * max(1.0, np.abs(reference[finite]).max())
