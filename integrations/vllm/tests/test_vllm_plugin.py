"""The vLLM plugin (mxmoe_vllm) in vLLM's CPU build, offline, on a tiny random gpt-oss in the
published MXFP4 layout made here (python/tests/hf_families.py: transformers' own classes).

Each engine runs in a child process (run_llm.py) with the environment of its case. The
reference is transformers' own model in float32 on the same MXFP4-rounded weights, generating
greedily. vLLM's gpt-oss runs in bfloat16 only, so the comparison is stated in bf16's terms:
greedy tokens equal the reference's wherever the reference's choice leads by more than bf16
can move the logits, and every logprob of the reference's own sequences (teacher-forced
through vLLM's prompt logprobs) is within 0.15 nats of the reference's (vLLM's own bf16 path: 0.071).

Runs in build/venv-vllm (scripts/vllm_env.sh), mxmoe from the build tree; scripts/test.sh
registers it with CTest, so it runs in CI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

import mxmoe

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(SOURCE, "python", "tests"))
from hf_families import write_checkpoint  # noqa: E402

NEW_TOKENS = 8
# bf16 moves a position's logits by up to ~2% of the largest (measured: mxmoe.transformers in
# bf16 against float32 on this model, 2.0e-2; transformers alone in bf16, 2.3e-2). A logprob
# (logit - logsumexp) moves by at most twice that.
BF16_LOGIT_ERROR = 0.025
# Teacher-forced logprobs, in nats: vLLM's own bf16 path (its AMX MXFP4 kernel) was measured
# up to 0.071 from the float32 reference on these sequences; twice that is allowed to either.
LOGPROB_TOLERANCE = 0.15


def _reference(model, prompt):
    """The float32 reference's greedy continuation of PROMPT, the number of its steps that
    bf16 cannot overturn (each leads its runner-up by more than 2 * BF16_LOGIT_ERROR of the
    largest logit, up to the first that does not), and for prompt + continuation the
    logprob of each next token with the largest |logit| at that position."""
    out = model.generate(torch.tensor([prompt]), max_new_tokens=NEW_TOKENS,
                         min_new_tokens=NEW_TOKENS, do_sample=False, output_logits=True,
                         return_dict_in_generate=True)
    robust = 0
    for scores in out.logits:  # raw logits (scores carry min_new_tokens' -inf)
        top = scores[0].topk(2).values
        if (top[0] - top[1]).item() <= 2 * BF16_LOGIT_ERROR * scores[0].abs().max().item():
            break
        robust += 1
    sequence = out.sequences[0].tolist()
    logits = model(torch.tensor([sequence])).logits[0]
    logprobs = torch.log_softmax(logits, -1)
    teacher = [(logprobs[i - 1, sequence[i]].item(), logits[i - 1].abs().max().item())
               for i in range(1, len(sequence))]
    return sequence[len(prompt):], robust, sequence, teacher


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """The checkpoint directory and, for three prompts (of 24 random ones, those whose greedy
    steps stay out of bf16's reach longest), the reference of _reference."""
    work = str(tmp_path_factory.mktemp("vllm"))
    torch.set_num_threads(2)
    model, directory = write_checkpoint("gpt_oss", seed=3, work=work, cli=os.environ["MXMOE_CLI"])
    g = torch.Generator().manual_seed(5)
    candidates = []
    with torch.no_grad():
        for _ in range(24):
            length = int(torch.randint(3, 12, (1,), generator=g))
            prompt = torch.randint(3, 512, (length,), generator=g).tolist()
            candidates.append((prompt, *_reference(model, prompt)))
    candidates.sort(key=lambda c: -c[2])
    chosen = candidates[:3]
    assert sum(c[2] for c in chosen) >= NEW_TOKENS, "too few greedy steps out of bf16's reach"
    return SimpleNamespace(directory=directory, prompts=[c[0] for c in chosen],
                           tokens=[c[1] for c in chosen], robust=[c[2] for c in chosen],
                           sequences=[c[3] for c in chosen], teacher=[c[4] for c in chosen])


def _engine(directory, calls, env=None, expect_failure=False):
    job = {"model": directory, "calls": calls}
    environment = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", **(env or {})}
    result = subprocess.run([sys.executable, os.path.join(HERE, "run_llm.py"), json.dumps(job)],
                            capture_output=True, text=True, env=environment, timeout=900)
    if expect_failure:
        assert result.returncode != 0, result.stdout[-2000:]
        return result.stdout + result.stderr
    assert result.returncode == 0, result.stderr[-4000:]
    line = [x for x in result.stdout.splitlines() if x.startswith("MXMOE_RESULT ")][-1]
    # vLLM's logger writes to stdout; the workers' lines come on either stream.
    return json.loads(line[len("MXMOE_RESULT "):])["calls"], result.stdout + result.stderr


def _calls(c):
    """Greedy generation of the prompts, and the reference's sequences teacher-forced."""
    return [{"prompts": c.prompts, "max_tokens": NEW_TOKENS},
            {"prompts": c.sequences, "max_tokens": 1, "prompt_logprobs": True}]


def _check_against_reference(c, calls):
    generated, forced = calls
    for i, tokens in enumerate(generated["tokens"]):
        n = c.robust[i]
        assert tokens[:n] == c.tokens[i][:n], f"prompt {i}: {tokens} vs {c.tokens[i]}"
    for i, steps in enumerate(forced["prompt_logprobs"]):
        for (got, _), (want, _scale) in zip(steps, c.teacher[i]):
            assert abs(got - want) <= LOGPROB_TOLERANCE, (i, got, want)


def _timers(directory):
    """The plugin's timers on (bench/python/vllm_generate.py's): run_llm.py reports what they
    counted during each call."""
    return {"MXMOE_VLLM_MOE_TIMES": os.path.join(str(directory), "moe"),
            "MXMOE_VLLM_DENSE_TIMES": os.path.join(str(directory), "dense")}


def _check_timers(c, call):
    """CALL generated from c.prompts: every token that went through the model (each prompt
    token and each new token but the last) is a row of each layer's three linear layers
    (gpt-oss's QKV and output projections and router) and of its experts, and each new token
    a row of the LM head; the timers counted exactly those rows, in calls that took time."""
    with open(os.path.join(c.directory, "config.json"), encoding="utf-8") as f:
        layers = json.load(f)["num_hidden_layers"]
    new = sum(len(t) for t in call["tokens"])
    forward = sum(len(p) for p in c.prompts) + new - len(c.prompts)
    dense, moe = call["times"]["dense"], call["times"]["moe"]
    assert dense["calls"] > 0 and dense["seconds"] > 0, dense
    assert dense["tokens"] == 3 * layers * forward + new, (dense, layers, forward, new)
    assert moe["calls"] > 0 and moe["seconds"] > 0, moe
    assert moe["tokens"] == layers * forward, (moe, layers, forward)
    assert dense["seconds"] + moe["seconds"] < call["seconds"]


@pytest.fixture(scope="module")
def with_plugin(checkpoint, tmp_path_factory):
    return _engine(checkpoint.directory, _calls(checkpoint),
                   _timers(tmp_path_factory.mktemp("times")))


def test_plugin_follows_the_float32_reference(checkpoint, with_plugin):
    """Greedy tokens equal the reference's wherever bf16 cannot overturn the reference's
    choice, and every logprob of the reference's sequences within LOGPROB_TOLERANCE of it."""
    calls, log = with_plugin
    _check_against_reference(checkpoint, calls)
    assert "mxmoe-vllm: MoE layers" in log  # the oracle's choice, logged once per shape


def test_timers_count_the_dense_and_expert_rows(checkpoint, with_plugin):
    """MXMOE_VLLM_DENSE_TIMES and MXMOE_VLLM_MOE_TIMES (on in with_plugin's engine, which
    still follows the reference above) count every row of vLLM's own linear layers and LM
    head and of mxmoe's experts (with VLLM_BATCH_INVARIANT=1, the plugin's linear layers:
    the batch-invariant test below)."""
    calls, log = with_plugin
    _check_timers(checkpoint, calls[0])
    assert "these times are no longer kept" not in log


def test_plugin_agrees_with_vllms_own_path_on_amx(checkpoint, with_plugin):
    """With AMX, vLLM's own CPU MXFP4 kernel follows the same reference in the same terms, and
    the two engines' logprobs of the reference's sequences agree within the bf16 tolerance
    (their greedy tokens may part at a near-tie: measured, one step in 24)."""
    if not torch.cpu._is_amx_tile_supported():
        pytest.skip("vLLM's own CPU MXFP4 path needs AMX")
    own, log = _engine(checkpoint.directory, _calls(checkpoint), {"MXMOE_VLLM": "0"})
    assert "mxmoe-vllm" not in log
    _check_against_reference(checkpoint, own)
    for i, (a, b) in enumerate(zip(own[1]["prompt_logprobs"],
                                   with_plugin[0][1]["prompt_logprobs"])):
        for x, y in zip(a, b):
            assert abs(x[0] - y[0]) <= LOGPROB_TOLERANCE, (i, x, y)


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
    log = _engine(checkpoint.directory, _calls(checkpoint)[:1], {**no_amx, "MXMOE_VLLM": "0"},
                  expect_failure=True)
    assert "No MXFP4 MoE backend supports the deployment configuration" in log


def test_without_amx_the_plugin_follows_the_reference(checkpoint, no_amx):
    calls, log = _engine(checkpoint.directory, _calls(checkpoint), no_amx)
    _check_against_reference(checkpoint, calls)
    assert "run on mxmoe's avx2" in log  # an AVX2 backend of mxmoe's ran it


def test_no_backend_fails_at_load_naming_every_candidate_and_reason(checkpoint):
    names = mxmoe.backends()
    log = _engine(checkpoint.directory, _calls(checkpoint)[:1],
                  {"MXMOE_EXCLUDE_BACKENDS": ",".join(names)}, expect_failure=True)
    assert "NoBackendError" in log or "no backend" in log.lower()
    for name in names:
        assert name in log
    assert "excluded" in log  # the reason, not only the names


def _alone_and_in_a_batch(c):
    """Each of the three prompts alone, then the three among three others (lengths 5, 30 and
    60: past the sliding window of 16) in one batch of six: greedy tokens with their logprobs,
    and the prompt logprobs."""
    g = torch.Generator().manual_seed(11)
    extra = [torch.randint(3, 512, (n,), generator=g).tolist() for n in (5, 30, 60)]
    batch = [extra[0], c.prompts[0], extra[1], c.prompts[1], c.prompts[2], extra[2]]
    one = {"max_tokens": NEW_TOKENS, "logprobs": True, "prompt_logprobs": True}
    return [{**one, "prompts": [p]} for p in c.prompts] + [{**one, "prompts": batch}], [1, 3, 4]


def test_batch_invariant_engine_gives_a_prompt_the_same_bits_alone_and_in_a_batch(checkpoint,
                                                                                  tmp_path):
    """VLLM_BATCH_INVARIANT=1 with the plugin: the MoE layers bound batch invariant, the ops vLLM
    would give to Triton and the linear layers computed row by row by mxmoe
    (mxmoe_vllm.invariance); each prompt alone and inside a batch of six gives the same tokens,
    the same logprob bits and the same prompt logprobs; the engine still follows the
    float32 reference as the plugin does without the request; and the timers count the
    plugin's linear layers as they count vLLM's (_check_timers)."""
    invariant, where = _alone_and_in_a_batch(checkpoint)
    calls, log = _engine(checkpoint.directory, _calls(checkpoint) + invariant,
                         {"VLLM_BATCH_INVARIANT": "1", **_timers(tmp_path)})
    _check_timers(checkpoint, calls[0])  # the plugin's linear layers, timed as vLLM's are
    assert "these times are no longer kept" not in log
    assert "batch invariant)" in log  # mxmoe-vllm's line for the bound MoE layers
    assert "mxmoe-vllm: VLLM_BATCH_INVARIANT=1 on the CPU" in log  # the ops, row by row
    assert "mxmoe-vllm: linear layers run on mxmoe's" in log  # and the linear layers
    _check_against_reference(checkpoint, calls[:2])
    batch = calls[-1]
    for i, position in enumerate(where):
        alone = calls[2 + i]
        assert len(alone["tokens"][0]) == NEW_TOKENS
        assert alone["tokens"][0] == batch["tokens"][position], i
        assert alone["logprobs"][0] == batch["logprobs"][position], i  # float.hex: the bits
        assert ([x[0].hex() for x in alone["prompt_logprobs"][0]]
                == [x[0].hex() for x in batch["prompt_logprobs"][position]]), i


def test_batch_invariant_with_the_plugin_off_is_vllms_own_failure(checkpoint):
    """MXMOE_VLLM=0: vLLM alone, as without the plugin: on a CPU with AMX it stops in its
    Triton-only batch-invariant mean; without AMX it has no MXFP4 MoE backend at all."""
    log = _engine(checkpoint.directory, [{"prompts": checkpoint.prompts[:1], "max_tokens": 2}],
                  {"VLLM_BATCH_INVARIANT": "1", "MXMOE_VLLM": "0"}, expect_failure=True)
    assert "mxmoe-vllm" not in log
    if torch.cpu._is_amx_tile_supported():
        assert "batch_invariant.py" in log and "mean_kernel" in log  # vLLM's own Triton op
    else:
        assert "No MXFP4 MoE backend supports the deployment configuration" in log
