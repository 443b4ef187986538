"""examples/python/transformers_gpt_oss.py, run where torch and transformers are installed
(skipped elsewhere; scripts/test.sh installs them): a tiny random gpt-oss whose experts mxmoe runs gives transformers' own
logits and greedy tokens on the same MXFP4-rounded weights, with transformers' routing and
with mxmoe's."""

from __future__ import annotations

import importlib.util
import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("MXMOE_SOURCE_DIR", os.path.normpath(os.path.join(HERE, "..", "..")))


@pytest.fixture(scope="module")
def example():
    if os.environ.get("MXMOE_REQUIRE_INTEGRATIONS") != "1":  # scripts/test.sh: never skip
        pytest.importorskip("torch")
        pytest.importorskip("transformers")
    path = os.path.join(SOURCE, "examples", "python", "transformers_gpt_oss.py")
    spec = importlib.util.spec_from_file_location("transformers_gpt_oss", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("routing", ["transformers", "mxmoe"])
def test_logits_and_greedy_tokens_match_transformers(example, routing):
    result = example.run(routing=routing, threads=2, verbose=False)
    assert result["logit_error"] <= example.LOGIT_TOLERANCE, result
    assert result["tokens_equal"], result


def test_the_check_can_fail(example, monkeypatch):
    """The comparison sees a wrong expert: perturb one MXFP4 scale byte of the checkpoint after
    transformers took its copy of the weights, and the logits must part."""
    real = example.write_mxfp4_checkpoint

    def corrupt(model, directory):
        real(model, directory)
        from safetensors.numpy import load_file, save_file  # noqa: PLC0415
        path = os.path.join(directory, "model.safetensors")
        tensors = load_file(path)
        tensors["model.layers.0.mlp.experts.down_proj_scales"][:, :, 0] += 1  # x2 on a block
        save_file(tensors, path)

    monkeypatch.setattr(example, "write_mxfp4_checkpoint", corrupt)
    result = example.run(routing="transformers", threads=1, verbose=False)
    assert result["logit_error"] > example.LOGIT_TOLERANCE, result
