"""The vLLM plugin (mxmoe_vllm) in vLLM's CPU build, offline, on a tiny random gpt-oss in the
published MXFP4 layout made here (python/tests/hf_families.py: transformers' own classes).

Each engine runs in a child process (run_llm.py) with the environment of its case. The
reference is transformers' own model in float32 on the same MXFP4-rounded weights, generating
greedily. vLLM's gpt-oss runs in bfloat16 only; its greedy tokens still equal the float32
reference's for these prompts, since the tiny model's top-1 logits lead by far more than
bf16's rounding moves them (the margins are checked, not assumed:
test_reference_margins_exceed_bf16_rounding).

Runs in build/venv-vllm (scripts/vllm_env.sh), mxmoe from the build tree; scripts/test.sh
registers it with CTest, so it runs in CI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

import mxmoe

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(SOURCE, "python", "tests"))
from hf_families import write_checkpoint  # noqa: E402

PROMPTS = [[5, 6, 7, 8, 9, 10], [100, 200, 300], [42] * 9]
NEW_TOKENS = 8


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """(directory, reference greedy tokens per prompt, the reference's smallest top-1 margin)."""
    work = str(tmp_path_factory.mktemp("vllm"))
    torch.set_num_threads(2)
    model, directory = write_checkpoint("gpt_oss", seed=3, work=work, cli=os.environ["MXMOE_CLI"])
    tokens, margin = [], float("inf")
    with torch.no_grad():
        for prompt in PROMPTS:
            ids = torch.tensor([prompt])
            out = model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False,
                                 output_scores=True, return_dict_in_generate=True)
            tokens.append(out.sequences[0, len(prompt):].tolist())
            for scores in out.scores:
                top = scores[0].float().topk(2).values
                margin = min(margin, (top[0] - top[1]).item() / scores[0].abs().max().item())
    return directory, tokens, margin


def _engine(directory, env=None, prompts=PROMPTS, logprobs=False, expect_failure=False):
    job = {"model": directory, "prompts": prompts, "max_tokens": NEW_TOKENS,
           "logprobs": logprobs}
    environment = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", **(env or {})}
    result = subprocess.run([sys.executable, os.path.join(HERE, "run_llm.py"), json.dumps(job)],
                            capture_output=True, text=True, env=environment, timeout=900)
    if expect_failure:
        assert result.returncode != 0, result.stdout[-2000:]
        return result.stdout + result.stderr
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1]), result.stderr


@pytest.fixture(scope="module")
def with_plugin(checkpoint):
    return _engine(checkpoint[0])


def test_reference_margins_exceed_bf16_rounding(checkpoint):
    """bf16 rounds a value by at most 2^-8 of it; through two layers the logits move ~1e-2 of
    the largest (measured with mxmoe.transformers in test_bf16_model_with_bf16_activations).
    Every greedy step of the reference leads its runner-up by more than that, so bf16 cannot
    flip a token and equality is the right check."""
    assert checkpoint[2] > 2e-2


def test_plugin_tokens_equal_the_reference(checkpoint, with_plugin):
    result, log = with_plugin
    assert result["tokens"] == checkpoint[1]
    assert "mxmoe-vllm: MoE layers" in log  # the oracle's choice, logged once per shape
    assert log.count("mxmoe-vllm: MoE layers") == 1 or "EngineCore" in log


def test_plugin_tokens_equal_vllms_own_path_on_amx(checkpoint, with_plugin):
    if not torch.cpu._is_amx_tile_supported():
        pytest.skip("vLLM's own CPU MXFP4 path needs AMX")
    own, _ = _engine(checkpoint[0], {"MXMOE_VLLM": "0"})
    assert own["tokens"] == with_plugin[0]["tokens"] == checkpoint[1]


@pytest.fixture(scope="module")
def no_amx(tmp_path_factory):
    """A sitecustomize on PYTHONPATH that makes torch report no AMX in every process, as on
    a CPU without it (vLLM's device check asks torch.cpu._is_amx_tile_supported)."""
    directory = tmp_path_factory.mktemp("no-amx")
    (directory / "sitecustomize.py").write_text(
        "import torch\ntorch.cpu._is_amx_tile_supported = lambda: False\n")
    path = os.pathsep.join([str(directory), os.environ.get("PYTHONPATH", "")])
    return {"PYTHONPATH": path, "MXMOE_MAX_ISA": "avx2"}


def test_without_amx_vllm_alone_refuses(checkpoint, no_amx):
    log = _engine(checkpoint[0], {**no_amx, "MXMOE_VLLM": "0"}, expect_failure=True)
    assert "No MXFP4 MoE backend supports the deployment configuration" in log


def test_without_amx_the_plugin_generates_the_same_tokens(checkpoint, no_amx):
    result, log = _engine(checkpoint[0], no_amx)
    assert result["tokens"] == checkpoint[1]
    assert "avx2" in log  # an AVX2 backend of mxmoe's ran it


def test_no_backend_fails_at_load_naming_every_candidate_and_reason(checkpoint):
    names = mxmoe.backends()
    log = _engine(checkpoint[0], {"MXMOE_EXCLUDE_BACKENDS": ",".join(names)},
                  expect_failure=True)
    assert "NoBackendError" in log or "no backend" in log.lower()
    for name in names:
        assert name in log
    assert "excluded" in log  # the reason, not only the names


def test_batch_invariant_prompt_alone_and_in_a_batch(checkpoint):
    """VLLM_BATCH_INVARIANT=1: a prompt alone and among 5 others gives the same tokens and the
    same logprob bits."""
    env = {"VLLM_BATCH_INVARIANT": "1"}
    target = PROMPTS[0]
    others = [[7 + i, 300 - i, 11 * i + 1, 4] for i in range(5)]
    alone, log = _engine(checkpoint[0], env, prompts=[target], logprobs=True)
    batch, _ = _engine(checkpoint[0], env, prompts=others[:2] + [target] + others[2:],
                       logprobs=True)
    assert "batch invariant" in log
    assert batch["tokens"][2] == alone["tokens"][0]
    assert batch["logprobs"][2] == alone["logprobs"][0]
