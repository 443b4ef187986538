"""Tiny models of the five MoE families built with transformers' own config and model classes
(random weights, no download), written as checkpoints mxmoe reads, and the transformers model
that is the reference on the same MXFP4-rounded weights.

- gpt-oss is written in its published MXFP4 layout (save_pretrained, then the experts replaced
  by ``*_blocks``/``*_scales`` from mxmoe's quantizer), as a gpt-oss checkpoint stores them.
- Qwen3-MoE, Mixtral, DeepSeek-V3 and DeepSeek-V4 are saved by ``save_pretrained`` in float32
  and converted by ``mxmoe quantize``, as a user converts a published BF16 checkpoint.

Either way the reference model then gets the MXFP4-rounded expert weights read back from the
written checkpoint (decoded by numpy here, not by mxmoe: ``reference.py``), so it computes on
exactly the bytes mxmoe reads.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from typing import Dict, Tuple

import numpy as np
import torch
import transformers
from safetensors import safe_open
from safetensors.torch import load_file, save_file

import mxmoe
from reference import decode_mxfp4, decode_v4_fp4

FAMILIES = ["gpt_oss", "qwen3_moe", "mixtral", "deepseek_v3", "deepseek_v4"]

_COMMON = dict(vocab_size=512, hidden_size=128, num_attention_heads=4, pad_token_id=0,
               eos_token_id=1, bos_token_id=2, max_position_embeddings=256)


def tiny_config(family: str) -> transformers.PretrainedConfig:
    """A small config of FAMILY: H=128, I=64 (multiples of 32, mxmoe's block), 8-16 experts."""
    if family == "gpt_oss":
        # The published model's YaRN rope (vLLM's gpt-oss reads its factor).
        common = {**_COMMON, "max_position_embeddings": 131072}
        return transformers.GptOssConfig(
            **common, intermediate_size=64, num_hidden_layers=2, num_local_experts=8,
            num_experts_per_tok=2, num_key_value_heads=2, head_dim=32, sliding_window=16,
            rope_parameters={"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0,
                             "beta_slow": 1.0, "truncate": False,
                             "original_max_position_embeddings": 4096,
                             "rope_theta": 150000.0})
    if family == "qwen3_moe":
        # Layer 0 a dense MLP (mlp_only_layers): its tensors are copied, not quantized.
        return transformers.Qwen3MoeConfig(
            **_COMMON, intermediate_size=256, moe_intermediate_size=64, num_hidden_layers=3,
            num_key_value_heads=2, head_dim=32, num_experts=8, num_experts_per_tok=2,
            norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[0])
    if family == "mixtral":
        return transformers.MixtralConfig(
            **_COMMON, intermediate_size=64, num_hidden_layers=2, num_key_value_heads=2,
            head_dim=32, num_local_experts=8, num_experts_per_tok=2)
    if family == "deepseek_v3":
        return transformers.DeepseekV3Config(
            **_COMMON, intermediate_size=256, moe_intermediate_size=64, num_hidden_layers=3,
            first_k_dense_replace=1, num_key_value_heads=4, n_routed_experts=16, n_group=4,
            topk_group=2, num_experts_per_tok=4, n_shared_experts=1, routed_scaling_factor=2.5,
            norm_topk_prob=True, q_lora_rank=64, kv_lora_rank=32, qk_rope_head_dim=16,
            qk_nope_head_dim=16, v_head_dim=32)
    if family == "deepseek_v4":
        return deepseek_v4_config()
    raise ValueError(family)


def deepseek_v4_config() -> transformers.PretrainedConfig:
    config_class = transformers.AutoConfig.for_model("deepseek_v4").__class__
    return config_class(**_COMMON, moe_intermediate_size=64, num_hidden_layers=3,
                        n_routed_experts=16, num_experts_per_tok=4, n_shared_experts=1,
                        num_hash_layers=1)


def _experts(model) -> Dict[int, torch.nn.Module]:
    return {n: layer.mlp.experts for n, layer in enumerate(model.model.layers)
            if hasattr(getattr(layer, "mlp", None), "experts")}


def build(family: str, seed: int) -> transformers.PreTrainedModel:
    """FAMILY's tiny model in float32 with random weights at the scale of real layers (experts
    ~N(0, 1/fan_in)), random router and expert biases where the family has them."""
    torch.manual_seed(seed)
    config = tiny_config(family)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    hidden = config.hidden_size
    with torch.no_grad():
        for n, experts in _experts(model).items():
            block = model.model.layers[n].mlp
            transposed = family == "gpt_oss"  # gpt-oss stores [E, in, out]
            for name in ("gate_up_proj", "down_proj"):
                w = getattr(experts, name)
                fan_in = w.shape[1] if transposed else w.shape[2]
                w.normal_(0.0, 1.0 / np.sqrt(fan_in))
                bias = getattr(experts, name + "_bias", None)
                if bias is not None:
                    bias.normal_(0.0, 0.1)
            router = getattr(block, "router", None) or block.gate
            router.weight.normal_(0.0, 1.0 / np.sqrt(hidden))
            for bias_name in ("bias", "e_score_correction_bias"):
                bias = getattr(router, bias_name, None)
                if isinstance(bias, torch.Tensor) and bias.dtype.is_floating_point:
                    bias.normal_(0.0, 0.1 if bias_name == "e_score_correction_bias" else 0.5)
            tid2eid = getattr(router, "tid2eid", None)
            if tid2eid is not None:  # DeepSeek-V4 hash layer: k distinct experts per token id
                experts_count, k = config.n_routed_experts, tid2eid.shape[1]
                rows = torch.stack([torch.randperm(experts_count)[:k]
                                    for _ in range(tid2eid.shape[0])])
                tid2eid.copy_(rows)
    return model


def _quantize_gpt_oss(model, directory: str) -> None:
    """save_pretrained, then the experts in gpt-oss's published MXFP4 layout."""
    model.save_pretrained(directory)
    path = os.path.join(directory, "model.safetensors")
    tensors = load_file(path)
    for key in list(tensors):
        if key.endswith(("experts.gate_up_proj", "experts.down_proj")):
            w = tensors.pop(key)  # [E, in, out]
            blocks, scales = mxmoe.quantize_mxfp4(w.transpose(1, 2).contiguous().numpy())
            tensors[key + "_blocks"] = torch.from_numpy(blocks)
            tensors[key + "_scales"] = torch.from_numpy(scales)
    save_file(tensors, path, metadata={"format": "pt"})
    with open(os.path.join(directory, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    config["quantization_config"] = {"quant_method": "mxfp4",
                                     "modules_to_not_convert": ["router", "self_attn",
                                                                "embed_tokens", "lm_head"]}
    with open(os.path.join(directory, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)


def _tensors(directory: str) -> Dict[str, Tuple[str, str]]:
    """name -> (file, name) of every tensor of a checkpoint directory."""
    out = {}
    for file in sorted(os.listdir(directory)):
        if file.endswith(".safetensors"):
            with safe_open(os.path.join(directory, file), "pt") as f:
                for key in f.keys():
                    out[key] = (os.path.join(directory, file), key)
    return out


def _read(where: Tuple[str, str]) -> np.ndarray:
    """A tensor's values as numpy; 8-bit float codes (F8_E8M0 scales) as their bytes."""
    with safe_open(where[0], "pt") as f:
        t = f.get_tensor(where[1])
    if t.dtype.itemsize == 1 and t.dtype.is_floating_point:
        t = t.view(torch.uint8)
    return t.numpy()


_MXFP4_EXPERTS = re.compile(r"layers\.(\d+)\.(?:mlp|ffn)\.(experts|shared_experts)\."
                            r"(gate_up_proj|down_proj)_blocks$")


def round_reference(model, family: str, directory: str) -> None:
    """Puts the MXFP4 expert weights of the checkpoint DIRECTORY, decoded, into MODEL."""
    tensors = _tensors(directory)
    found = 0
    with torch.no_grad():
        for key, where in tensors.items():
            match = _MXFP4_EXPERTS.search(key)
            if match is None:
                continue
            n, which, name = int(match.group(1)), match.group(2), match.group(3)
            values = decode_mxfp4(_read(where), _read(tensors[key[:-len("_blocks")] + "_scales"]))
            block = model.model.layers[n].mlp
            if which == "shared_experts":  # mxmoe's fused shared expert: [1, rows, cols]
                _set_shared(block.shared_experts, name, values[0])
            elif family == "gpt_oss":
                getattr(block.experts, name).copy_(torch.from_numpy(values).transpose(1, 2))
            else:
                getattr(block.experts, name).copy_(torch.from_numpy(values))
            found += 1
        found += _round_v4_release(model, tensors)
    if found == 0:
        raise AssertionError(f"{directory}: no MXFP4 expert tensor found")


def _set_shared(shared, name: str, values: np.ndarray) -> None:
    if name == "gate_up_proj":  # gate rows, then up rows (gate/up layout "halves")
        half = values.shape[0] // 2
        shared.gate_proj.weight.copy_(torch.from_numpy(values[:half]))
        shared.up_proj.weight.copy_(torch.from_numpy(values[half:]))
    else:
        shared.down_proj.weight.copy_(torch.from_numpy(values))


_V4_EXPERT = re.compile(r"layers\.(\d+)\.ffn\.experts\.(\d+)\.(w1|w2|w3)\.weight$")


def _round_v4_release(model, tensors) -> int:
    """DeepSeek-V4 in its release naming: per-expert w1 (gate), w3 (up), w2 (down) as I8 E2M1
    pairs with F8_E8M0 / U8 scales."""
    found = 0
    for key, where in tensors.items():
        match = _V4_EXPERT.search(key)
        if match is None:
            continue
        n, e, w = int(match.group(1)), int(match.group(2)), match.group(3)
        values = decode_v4_fp4(_read(where), _read(tensors[key[:-len("weight")] + "scale"]))
        experts = model.model.layers[n].mlp.experts
        intermediate = experts.down_proj.shape[2]
        if w == "w1":
            experts.gate_up_proj[e, :intermediate].copy_(torch.from_numpy(values))
        elif w == "w3":
            experts.gate_up_proj[e, intermediate:].copy_(torch.from_numpy(values))
        else:
            experts.down_proj[e].copy_(torch.from_numpy(values))
        found += 1
    return found


def write_checkpoint(family: str, seed: int, work: str, cli: str):
    """(the reference transformers model on the MXFP4-rounded weights, the checkpoint
    directory mxmoe loads)."""
    model = build(family, seed)
    if family == "gpt_oss":
        directory = os.path.join(work, "gpt_oss-mxfp4")
        _quantize_gpt_oss(model, directory)
    else:
        source = os.path.join(work, f"{family}-f32")
        model.save_pretrained(source)
        directory = os.path.join(work, f"{family}-mxfp4")
        subprocess.run([cli, "quantize", "--model", source, "--out", directory], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    round_reference(model, family, directory)
    return model, directory
