"""mxmoe.transformers on whole models of the five families: a tiny model built with
transformers' own classes (hf_families.py), written as a checkpoint mxmoe reads, loaded with
mxmoe.transformers.from_pretrained, against transformers' own model on the same MXFP4-rounded
weights.

Tolerance: with float32 activations in both, the two differ only in the order of float32 sums
(over H = 128 or I = 64 terms, ~1e-7 relative each) and in mxmoe's router, whose logits are
accumulated in double and rounded once; through 2-3 layers and the LM head the logits agree
to ~1e-6 of their largest value (measured 3e-7..2e-6). 1e-4 leaves room and still catches
any real difference: a wrong weight, bias, scale, routing or layout moves logits by 1e-2 or
more (test_the_comparison_sees_a_wrong_expert).

Run where torch and transformers are installed; scripts/test.sh installs them (the pins of
python/requirements-test.txt) and sets MXMOE_REQUIRE_INTEGRATIONS=1, so there they never skip.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

if os.environ.get("MXMOE_REQUIRE_INTEGRATIONS") != "1":
    pytest.importorskip("torch")
    pytest.importorskip("transformers")

import torch  # noqa: E402

import mxmoe  # noqa: E402
import mxmoe.transformers as mt  # noqa: E402
from hf_families import FAMILIES, write_checkpoint  # noqa: E402

LOGIT_TOLERANCE = 1e-4
NEW_TOKENS = 16
THREADS = 2


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return str(tmp_path_factory.mktemp("hf"))


@pytest.fixture(scope="module")
def built(work, cli):
    """family -> (reference model, checkpoint directory, model from mxmoe.transformers in
    float32 with float32 activations)."""
    cache = {}

    def get(family):
        if family not in cache:
            torch.set_num_threads(THREADS)
            reference, directory = write_checkpoint(family, seed=FAMILIES.index(family) + 7,
                                                    work=work, cli=cli)
            model = mt.from_pretrained(directory, dtype=torch.float32, activation="f32",
                                       threads=THREADS)
            cache[family] = (reference, directory, model)
        return cache[family]

    return get


def _prompt(batch=2, length=12, seed=1):
    return torch.randint(3, 512, (batch, length), generator=torch.Generator().manual_seed(seed))


def _relative(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


@pytest.mark.parametrize("family", FAMILIES)
def test_logits_match_transformers(built, family):
    reference, _, model = built(family)
    prompt = _prompt()
    with torch.no_grad():
        want = reference(prompt).logits
        got = model(prompt).logits
    assert got.dtype == torch.float32 and got.shape == want.shape
    assert torch.isfinite(got).all()
    assert _relative(got, want) <= LOGIT_TOLERANCE


@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_tokens_match_transformers(built, family):
    reference, _, model = built(family)
    prompt = _prompt(seed=2)
    # min_new_tokens: an end-of-sequence token does not end the comparison early.
    want = reference.generate(prompt, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                              do_sample=False)
    got = model.generate(prompt, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                         do_sample=False)
    assert got.shape == (2, 12 + NEW_TOKENS)
    assert torch.equal(got, want)


@pytest.mark.parametrize("family", FAMILIES)
def test_padded_batch_gives_each_prompt_its_tokens_alone(built, family):
    """Three prompts of different lengths, left-padded into one batch (KV cache, attention
    mask): each gets the greedy tokens it gets alone."""
    _, _, model = built(family)
    prompts = [_prompt(1, n, seed=20 + n)[0] for n in (5, 9, 12)]
    width = max(len(p) for p in prompts)
    ids = torch.zeros((3, width), dtype=torch.long)
    mask = torch.zeros((3, width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = p
        mask[i, width - len(p):] = 1
    batch = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=NEW_TOKENS,
                           min_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0)
    for i, p in enumerate(prompts):
        alone = model.generate(p[None], max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                               do_sample=False)
        assert torch.equal(batch[i, width:], alone[0, len(p):]), f"prompt {i}"


def test_sampled_decoding_is_reproducible(built):
    _, _, model = built("gpt_oss")
    prompt = _prompt(seed=3)
    runs = []
    for _ in range(2):
        torch.manual_seed(11)
        runs.append(model.generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=True,
                                   temperature=1.0, top_k=50))
    assert torch.equal(runs[0], runs[1])
    new = runs[0][:, 12:]
    assert ((new >= 0) & (new < 512)).all()


def test_the_comparison_sees_a_wrong_expert(built, work, cli):
    """One MXFP4 scale byte doubled in mxmoe's copy of a layer: the logits must part from the
    reference's by far more than the tolerance."""
    reference, directory, _ = built("gpt_oss")
    from safetensors.numpy import load_file, save_file  # noqa: PLC0415

    corrupt = os.path.join(work, "gpt_oss-corrupt")
    subprocess.run(["cp", "-r", directory, corrupt], check=True)
    path = os.path.join(corrupt, "model.safetensors")
    tensors = load_file(path)
    tensors["model.layers.0.mlp.experts.down_proj_scales"][:, :, 0] += 1
    save_file(tensors, path, metadata={"format": "pt"})
    model = mt.from_pretrained(corrupt, dtype=torch.float32, activation="f32", threads=THREADS)
    prompt = _prompt()
    with torch.no_grad():
        assert _relative(model(prompt).logits, reference(prompt).logits) > 100 * LOGIT_TOLERANCE


def test_bf16_model_with_bf16_activations(built):
    """The default: a bfloat16 model, mxmoe's bf16 activations. Its logits follow the float32
    reference to bf16's rounding of the activations through two layers (~1e-2 of the largest
    logit; 5e-2 allows it), and generate() runs."""
    reference, directory, _ = built("gpt_oss")
    model = mt.from_pretrained(directory, threads=THREADS)
    assert model.dtype == torch.bfloat16
    assert all(layer.activation == "bf16" for layer in mt.layers(model).values())
    prompt = _prompt()
    with torch.no_grad():
        got = model(prompt).logits.float()
        want = reference(prompt).logits
    assert _relative(got, want) <= 5e-2
    out = model.generate(prompt, max_new_tokens=4, do_sample=False)
    assert out.shape == (2, 16)


def test_each_layer_says_what_runs_it_and_why(built):
    _, _, model = built("deepseek_v3")
    rows = mt.selections(model)
    assert [row["layer"] for row in rows] == [1, 2]  # layer 0 is dense (first_k_dense_replace)
    for row in rows:
        assert row["backend"] in mxmoe.backends()
        assert row["why"]
        names = {c["name"] for c in row["selection"]["candidates"]}
        assert set(mxmoe.backends()) <= names  # every backend judged, with its reasons
    block = model.model.layers[1].mlp
    assert isinstance(block, mt.MxmoeMoeBlock) and "backend=" in repr(block)
    assert not list(block.parameters())  # the experts are mxmoe's: no torch parameter


def test_no_expert_tensor_is_a_torch_parameter(built):
    _, directory, model = built("qwen3_moe")
    names = [name for name, _ in model.named_parameters()]
    assert names and not [n for n in names if ".experts." in n or ".gate." in n]
    assert "model.layers.0.mlp.gate_proj.weight" in names  # the dense layer stays torch's


def _child(code: str, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=600)


def test_no_backend_raises_at_load_with_every_reason(built):
    _, directory, _ = built("gpt_oss")
    code = (
        "import mxmoe, mxmoe.transformers as mt\n"
        "try:\n"
        f"    mt.from_pretrained({directory!r})\n"
        "except mxmoe.NoBackendError as e:\n"
        "    print('NoBackendError'); print(e)\n")
    result = _child(code, {"MXMOE_EXCLUDE_BACKENDS": ",".join(mxmoe.backends())})
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("NoBackendError")
    for name in mxmoe.backends():
        assert name in result.stdout


def test_verbose_dispatch_is_honoured(built):
    _, directory, _ = built("mixtral")
    code = f"import mxmoe.transformers as mt\nmt.from_pretrained({directory!r})\n"
    result = _child(code, {"MXMOE_VERBOSE": "dispatch"})
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if "mxmoe" in line.lower()]
    assert len(lines) >= len(mxmoe.backends()), result.stderr  # one per candidate and layer


def test_arguments_mxmoe_owns_are_refused(built):
    _, directory, _ = built("gpt_oss")
    with pytest.raises(ValueError, match="quantization_config"):
        mt.from_pretrained(directory, quantization_config={})
    with pytest.raises(ValueError, match="dtype"):
        mt.from_pretrained(directory, dtype=torch.float16)
    with pytest.raises(ValueError, match="threads"):
        mt.from_pretrained(directory, threads=-1)
    with pytest.raises(ValueError, match="CPU"):
        mt.from_pretrained(directory, device_map="cuda")


def test_a_checkpoint_mxmoe_refuses_fails_before_transformers_loads(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt_oss"}))
    with pytest.raises(mxmoe.LoadError):
        mt.from_pretrained(tmp_path)


def test_import_without_torch_says_what_to_install():
    code = ("import sys\nsys.modules['torch'] = None\n"
            "try:\n    import mxmoe.transformers\n"
            "except ImportError as e:\n    print(e)\n")
    result = _child(code)
    assert "pip install" in result.stdout and "transformers" in result.stdout, result


# ---- Memory: the experts are never dequantized, never copied into torch ----

MEMORY_CHILD = r"""
import sys, json
def status():
    d = dict(l.split(":", 1) for l in open("/proc/self/status"))
    return {k: int(d[k].split()[0]) * 1024 for k in ("VmRSS", "VmHWM")}
import torch, transformers, mxmoe, mxmoe.transformers
from transformers import GptOssForCausalLM
torch.set_num_threads(2)
base = status()["VmRSS"]
if sys.argv[2] == "mxmoe":
    model = mxmoe.transformers.from_pretrained(sys.argv[1], threads=2)
else:
    model = transformers.AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.bfloat16)
with torch.no_grad():
    model(torch.tensor([[3, 4, 5]]))
print(json.dumps({"base": base, **status()}))
"""


def _memory_checkpoint(directory: str) -> int:
    """A gpt-oss checkpoint whose experts are 99% of its bytes (16 layers of 32 experts,
    H = I = 1024: 0.86 GB of MXFP4), every tensor transformers' GptOssForCausalLM has, written
    with numpy (random MXFP4 codes, E8M0 scales near 2^-4). Returns its tensor bytes."""
    from safetensors.torch import save_file  # noqa: PLC0415
    import transformers  # noqa: PLC0415

    config = transformers.GptOssConfig(
        vocab_size=1024, hidden_size=1024, intermediate_size=1024, num_hidden_layers=16,
        num_local_experts=32, num_experts_per_tok=4, num_attention_heads=8,
        num_key_value_heads=2, head_dim=64, sliding_window=64, max_position_embeddings=256,
        rope_parameters={"rope_type": "default", "rope_theta": 150000.0},
        pad_token_id=0, eos_token_id=1, bos_token_id=2)
    with torch.device("meta"):
        skeleton = transformers.GptOssForCausalLM(config)
    rng = np.random.default_rng(5)
    tensors = {}
    for name, p in skeleton.state_dict().items():
        if name.endswith(("experts.gate_up_proj", "experts.down_proj")):
            experts, fan_in, out = p.shape  # transformers' [E, in, out]
            tensors[name + "_blocks"] = rng.integers(0, 256, (experts, out, fan_in // 32, 16),
                                                     dtype=np.uint8)
            tensors[name + "_scales"] = rng.integers(120, 124, (experts, out, fan_in // 32),
                                                     dtype=np.uint8)
        else:
            scale = 1.0 if name.endswith(("norm.weight", "layernorm.weight")) else 0.02
            values = rng.standard_normal(tuple(p.shape), dtype=np.float32) * scale
            tensors[name] = torch.from_numpy(values).to(torch.bfloat16)
    os.makedirs(directory)
    save_file({k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v
               for k, v in tensors.items()}, os.path.join(directory, "model.safetensors"))
    with open(os.path.join(directory, "config.json"), "w", encoding="utf-8") as f:
        c = config.to_dict()
        c["quantization_config"] = {"quant_method": "mxfp4"}
        json.dump(c, f)
    return sum(t.nbytes for t in tensors.values())


def test_peak_memory_proves_no_dequantized_copy(tmp_path):
    """Peak resident memory of a child process that loads the model and runs a forward,
    above what importing torch and transformers costs (0.7 GB, not the model's), stays below
    1.2x the checkpoint's bytes: the packed experts (1.0x) plus one layer's mapped pages at a
    time and the non-expert tensors. A dequantized copy would be 4x the experts' bytes; the
    same child with transformers' own loading (which dequantizes MXFP4 on a CPU) shows it."""
    directory = str(tmp_path / "experts-heavy")
    nbytes = _memory_checkpoint(directory)
    assert nbytes > 0.8e9
    result = subprocess.run([sys.executable, "-c", MEMORY_CHILD, directory, "mxmoe"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    m = json.loads(result.stdout.strip().splitlines()[-1])
    ratio = (m["VmHWM"] - m["base"]) / nbytes
    print(f"mxmoe: peak {m['VmHWM'] / 1e9:.2f} GB, after imports {m['base'] / 1e9:.2f} GB, "
          f"checkpoint {nbytes / 1e9:.2f} GB: {ratio:.3f}x")
    assert ratio < 1.2

    hf = subprocess.run([sys.executable, "-c", MEMORY_CHILD, directory, "transformers"],
                        capture_output=True, text=True, timeout=600)
    assert hf.returncode == 0, hf.stderr[-2000:]
    h = json.loads(hf.stdout.strip().splitlines()[-1])
    hf_ratio = (h["VmHWM"] - h["base"]) / nbytes
    print(f"transformers alone: peak {h['VmHWM'] / 1e9:.2f} GB: {hf_ratio:.3f}x")
    assert hf_ratio > 2.0  # the measurement sees a dequantized copy


def test_a_checkpoint_missing_a_non_expert_tensor_is_refused(built, work):
    """transformers fills what a checkpoint lacks with random values; mxmoe.transformers
    refuses, naming the tensor."""
    _, directory, _ = built("gpt_oss")
    from safetensors.numpy import load_file, save_file  # noqa: PLC0415

    partial = os.path.join(work, "gpt_oss-partial")
    subprocess.run(["cp", "-r", directory, partial], check=True)
    path = os.path.join(partial, "model.safetensors")
    tensors = load_file(path)
    del tensors["model.layers.1.self_attn.o_proj.weight"]
    save_file(tensors, path, metadata={"format": "pt"})
    with pytest.raises(mxmoe.LoadError, match="self_attn.o_proj.weight"):
        mt.from_pretrained(partial, threads=THREADS)


def test_deepseek_v4_hash_layer_routes_by_the_models_input_ids(built):
    """Layer 0 is hash-routed (tid2eid): it takes the ids the model's forward received. Changing
    one id changes that token's experts and so its output (not only through the embedding:
    the same embedding with other ids would route elsewhere); without ids it is refused."""
    reference, _, model = built("deepseek_v4")
    hash_layer = mt.layers(model)[0]
    assert hash_layer.vocab == 512
    block = model.model.layers[0].mlp
    x = torch.randn(1, 4, 128)
    ids = torch.tensor([[3, 4, 5, 6]])
    other = torch.tensor([[3, 4, 5, 7]])
    with torch.no_grad():
        a, b = block(x, input_ids=ids), block(x, input_ids=other)
    assert torch.equal(a[0, :3], b[0, :3]) and not torch.equal(a[0, 3], b[0, 3])
    with pytest.raises(ValueError):
        block(x)


def test_other_threads_see_transformers_unchanged_while_a_model_is_built(built):
    """Issue 38: from_pretrained replaced the family's MoE block in transformers for the whole
    process while it built; a plain transformers load on another thread at that moment got
    mxmoe's parameterless block (a confusing failure, or a save_pretrained without MoE
    tensors). Only the building thread sees the replacement now."""
    import importlib
    import threading

    import transformers

    _, directory, _ = built("gpt_oss")
    config = transformers.AutoConfig.from_pretrained(directory)
    family = mt._family(config.model_type)
    module = importlib.import_module(family.module)
    original = getattr(module, family.block)
    seen = {}

    def plain_load():
        block = getattr(module, family.block)(config)
        seen["type"] = type(block)
        seen["isinstance"] = isinstance(block, getattr(module, family.block))
        seen["parameters"] = sum(p.numel() for p in block.parameters())

    with mt._blocks_replaced(family):
        here = getattr(module, family.block)(config)
        other = threading.Thread(target=plain_load)
        other.start()
        other.join()
    assert isinstance(here, mt.MxmoeMoeBlock)
    assert seen["type"] is original
    assert seen["isinstance"]
    assert seen["parameters"] > 0  # the experts and router a plain load must have
    assert getattr(module, family.block) is original


def test_a_bytes_path_is_refused_before_any_work(built):
    """Issue 38: from_pretrained(b"path") was accepted by mxmoe, then refused by transformers
    after the layers were bound."""
    _, directory, _ = built("gpt_oss")
    with pytest.raises(TypeError, match="path: expected a str or an os.PathLike of str, got bytes"):
        mt.from_pretrained(os.fsencode(directory))
