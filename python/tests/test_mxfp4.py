"""mxmoe.quantize_mxfp4 / dequantize_mxfp4 (the library's codecs, for writing checkpoints from
Python) against a quantizer and a decoder written here from the OCP MX spec: round-up scale
ceil(log2(amax / 6)), elements to the nearest E2M1 value with ties to the even code."""

from __future__ import annotations

import numpy as np
import pytest

import mxmoe
from reference import E2M1, decode_mxfp4

GRID = E2M1[:8]  # 0, 0.5, 1, 1.5, 2, 3, 4, 6 (codes 0..7)


def quantize_block(block: np.ndarray, rule: str) -> np.ndarray:
    """Values (float64) of one block after MXFP4 quantization."""
    amax = np.abs(block).max()
    if amax == 0:
        return np.zeros_like(block, dtype=np.float64)
    e = int(np.ceil(np.log2(amax / 6.0))) if rule == "round_up" else int(np.floor(np.log2(amax))) - 2
    e = max(e, -127)
    scaled = np.abs(block.astype(np.float64)) / 2.0 ** e
    out = np.empty_like(scaled)
    for i, v in enumerate(scaled):
        distance = np.abs(GRID - min(v, 6.0))
        best = np.flatnonzero(distance == distance.min())
        out[i] = GRID[best[0] if len(best) == 1 else best[best % 2 == 0][0]]
    return np.copysign(out, block) * 2.0 ** e


@pytest.mark.parametrize("rule", ["round_up", "floor"])
def test_quantize_matches_the_spec(rule):
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((3, 5, 64)) * np.exp2(rng.integers(-20, 20, (3, 5, 1)))).astype(np.float32)
    w[0, 0, :32] = 0.0  # an all-zero block
    w[0, 1, :32] = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0] * 4, np.float32)  # ties
    blocks, scales = mxmoe.quantize_mxfp4(w, scale_rule=rule)
    assert blocks.shape == (3, 5, 2, 16) and scales.shape == (3, 5, 2)
    assert blocks.dtype == scales.dtype == np.uint8
    got = decode_mxfp4(blocks.reshape(15, 1, 2, 16), scales.reshape(15, 1, 2)).reshape(w.shape)
    expected = np.stack([quantize_block(b, rule) for b in w.reshape(-1, 32)]).reshape(w.shape)
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(mxmoe.dequantize_mxfp4(blocks, scales), got.astype(np.float32))


def test_dequantize_matches_the_reference_decoder():
    rng = np.random.default_rng(1)
    blocks = rng.integers(0, 256, (4, 7, 3, 16), dtype=np.uint8)
    scales = rng.integers(100, 150, (4, 7, 3), dtype=np.uint8)
    np.testing.assert_array_equal(mxmoe.dequantize_mxfp4(blocks, scales),
                                  decode_mxfp4(blocks, scales).astype(np.float32))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_and_inf_are_refused(bad):
    # Encoded, they would be the scale 0xFF that every loader refuses.
    w = np.ones((2, 32), np.float32)
    w[1, 31] = bad
    with pytest.raises(ValueError, match=r"non-finite values \(NaN/Inf\), the first at \(1, 31\)"):
        mxmoe.quantize_mxfp4(w)


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int8, np.uint16])
def test_blocks_and_scales_must_be_bytes(dtype):
    blocks, scales = np.zeros((2, 3, 16), np.uint8), np.full((2, 3), 127, np.uint8)
    with pytest.raises(TypeError, match="blocks: expected a uint8 array"):
        mxmoe.dequantize_mxfp4(blocks.astype(dtype), scales)
    with pytest.raises(TypeError, match="scales: expected a uint8 array"):
        mxmoe.dequantize_mxfp4(blocks, scales.astype(dtype))


def test_bad_arguments():
    with pytest.raises(ValueError, match="multiple of 32"):
        mxmoe.quantize_mxfp4(np.ones((2, 33), np.float32))
    with pytest.raises(ValueError, match="scale_rule"):
        mxmoe.quantize_mxfp4(np.ones(32, np.float32), scale_rule="ceil")
    with pytest.raises(ValueError, match=r"blocks \[..., n, 16\]"):
        mxmoe.dequantize_mxfp4(np.zeros((2, 3, 16), np.uint8), np.zeros((2, 4), np.uint8))
    with pytest.raises(ValueError, match=r"blocks \[..., n, 16\]"):
        mxmoe.dequantize_mxfp4(np.zeros((2, 3, 8), np.uint8), np.zeros((2, 3), np.uint8))
