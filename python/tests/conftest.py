"""Fixtures of the Python tests: small checkpoints of every family, written once per session
with mxmoe.generate (the library's writer); the tests read them back independently
(reference.py)."""

from __future__ import annotations

import os
import shutil

import pytest

import mxmoe

# Every family (gpt-oss, Mixtral, Qwen3-MoE, DeepSeek-V3, DeepSeek-V4) at a small size:
# 16 experts (DeepSeek-V3's 8 groups of 2), top-4, H=128, I=64; two layers each.
PRESETS = ["gpt-oss-20b", "mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3", "deepseek-v4-flash"]
SIZES = dict(experts=16, top_k=4, hidden=128, intermediate=64)


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory):
    """preset -> directory of a 2-layer checkpoint of that preset at SIZES."""
    root = tmp_path_factory.mktemp("checkpoints")
    out = {}
    for i, preset in enumerate(PRESETS):
        out[preset] = mxmoe.generate(str(root / preset), preset, layers=2, seed=100 * i + 1,
                                     **SIZES)
    return out


@pytest.fixture(scope="session")
def models(checkpoints):
    """preset -> mxmoe.Model of its checkpoint."""
    return {preset: mxmoe.Model(path) for preset, path in checkpoints.items()}


@pytest.fixture(scope="session")
def cli():
    """The mxmoe command (ctest passes MXMOE_CLI); tests that compare with it skip without."""
    path = os.environ.get("MXMOE_CLI") or shutil.which("mxmoe")
    if not path:
        pytest.skip("the mxmoe command is not built here (set MXMOE_CLI)")
    return path


def tiny_gpt_oss(path, seed):
    """A whole gpt-oss of 2 layers, 4 experts, H=I=64, a vocabulary of 1000 and the stand-in
    byte-level BPE tokenizer (mxmoe.generate full=True): what the text and server tests run."""
    return mxmoe.generate(str(path), "gpt-oss-20b", full=True, layers=2, experts=4, hidden=64,
                          intermediate=64, attention_heads=4, kv_heads=2, head_dim=16,
                          vocab=1000, seed=seed)
