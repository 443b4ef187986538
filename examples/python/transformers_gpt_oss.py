"""A tiny random gpt-oss built with Hugging Face transformers, its experts run by mxmoe.

1. Build a gpt-oss model from a small GptOssConfig with random weights (no download).
2. Round its expert weights to MXFP4 with mxmoe's quantizer and write them, with the routers,
   in the gpt-oss MXFP4 checkpoint layout (config.json + model.safetensors), as a real
   gpt-oss checkpoint stores them.
3. Put the MXFP4-rounded weights back into the transformers model: its own forward is now
   the reference, on exactly the weights mxmoe reads.
4. Replace each layer's experts with an mxmoe layer, called the way vLLM and SGLang call
   fused-experts kernels: transformers' router gives (topk_ids, topk_weights), mxmoe computes
   every expert and the weighted sum (Layer.forward_routed), on the same torch tensors, without
   a copy. (--routing mxmoe replaces the whole MoE block: mxmoe routes with the checkpoint's
   router itself.)
5. Compare logits and greedy tokens with transformers' own forward.

  pip install .                      # the mxmoe package, from the repository root
  pip install torch transformers     # any versions with gpt-oss (tried: 2.15.0, 5.24.0)
  python examples/python/transformers_gpt_oss.py [--routing transformers|mxmoe] [--threads N]
      [--activation f32|bf16|int8|mxfp8] [--keep]

Exits 0 when the logits agree within the tolerance and the greedy tokens are the same (with
the default float32 activations; other formats are shown, not judged).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from typing import Dict

import numpy as np
import torch
from safetensors.numpy import save_file
from transformers import GptOssConfig, GptOssForCausalLM

import mxmoe

# float32 activations in mxmoe and float32 in transformers: the two differ only in the order
# of float32 sums (over H = 128 or I = 64 terms, relative ~1e-7 each); through 2 layers and
# the LM head the logits agree to ~1e-6 of their scale (measured: 8e-7). 1e-4 leaves room and
# still catches any real difference (a wrong weight, bias, clamp or routing is 1e-2 or more).
LOGIT_TOLERANCE = 1e-4


def tiny_config(layers: int = 2) -> GptOssConfig:
    return GptOssConfig(
        vocab_size=512, hidden_size=128, intermediate_size=64, num_hidden_layers=layers,
        num_local_experts=8, num_experts_per_tok=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=32, sliding_window=16, max_position_embeddings=256,
        rope_parameters={"rope_type": "default", "rope_theta": 150000.0},
        pad_token_id=0, eos_token_id=1, bos_token_id=2)


def build_model(seed: int, layers: int) -> GptOssForCausalLM:
    torch.manual_seed(seed)
    model = GptOssForCausalLM(tiny_config(layers)).eval()
    with torch.no_grad():
        for layer in model.model.layers:
            # transformers initialises the biases at zero; random ones exercise them too.
            layer.mlp.router.bias.normal_(0.0, 0.5)
            layer.mlp.experts.gate_up_proj_bias.normal_(0.0, 0.1)
            layer.mlp.experts.down_proj_bias.normal_(0.0, 0.1)
            # Weights of the size real gpt-oss layers have relative to their inputs.
            layer.mlp.experts.gate_up_proj.normal_(0.0, 1.0 / np.sqrt(model.config.hidden_size))
            layer.mlp.experts.down_proj.normal_(0.0, 1.0 / np.sqrt(model.config.intermediate_size))
            layer.mlp.router.weight.normal_(0.0, 1.0 / np.sqrt(model.config.hidden_size))
    return model


def write_mxfp4_checkpoint(model: GptOssForCausalLM, directory: str) -> None:
    """The MoE tensors in the gpt-oss MXFP4 layout (weights stored [out, in], blocks along the
    input dimension), and puts the MXFP4-rounded weights back into the model."""
    tensors: Dict[str, np.ndarray] = {}
    with torch.no_grad():
        for n, layer in enumerate(model.model.layers):
            p = f"model.layers.{n}.mlp."
            experts, router = layer.mlp.experts, layer.mlp.router
            tensors[p + "router.weight"] = router.weight.numpy().copy()
            tensors[p + "router.bias"] = router.bias.numpy().copy()
            for name in ("gate_up_proj", "down_proj"):
                weight = getattr(experts, name)  # transformers: [E, in, out]
                blocks, scales = mxmoe.quantize_mxfp4(weight.transpose(1, 2).numpy())
                tensors[p + f"experts.{name}_blocks"] = blocks
                tensors[p + f"experts.{name}_scales"] = scales
                tensors[p + f"experts.{name}_bias"] = getattr(experts, name + "_bias").numpy().copy()
                rounded = mxmoe.dequantize_mxfp4(blocks, scales)  # [E, out, in]
                weight.copy_(torch.from_numpy(rounded).transpose(1, 2))
    os.makedirs(directory, exist_ok=True)
    save_file(tensors, os.path.join(directory, "model.safetensors"), metadata={"format": "pt"})
    config = model.config.to_dict()
    config["quantization_config"] = {"quant_method": "mxfp4"}
    with open(os.path.join(directory, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)


class MxmoeExperts(torch.nn.Module):
    """transformers' GptOssExperts interface (hidden_states [T, H], router_indices [T, k],
    routing_weights [T, k]) on an mxmoe layer: vLLM's fused-experts convention."""

    def __init__(self, layer: mxmoe.Layer):
        super().__init__()
        self.layer = layer

    def forward(self, hidden_states, router_indices=None, routing_weights=None):
        return self.layer.forward_routed(hidden_states, router_indices, routing_weights)


class MxmoeMLP(torch.nn.Module):
    """transformers' GptOssMLP interface on an mxmoe layer that routes with the checkpoint's
    router itself."""

    def __init__(self, layer: mxmoe.Layer):
        super().__init__()
        self.layer = layer

    def forward(self, hidden_states):
        shape = hidden_states.shape
        y = self.layer(hidden_states.reshape(-1, shape[-1]))
        return y.reshape(shape), None


def run(routing: str = "transformers", threads: int = 0, seed: int = 0, layers: int = 2,
        activation: str = "f32", verbose: bool = True, keep: bool = False) -> dict:
    work = tempfile.mkdtemp(prefix="mxmoe_gpt_oss_")
    try:
        return _run(os.path.join(work, "tiny-gpt-oss-mxfp4"), routing, threads, seed, layers,
                    activation, verbose)
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


def _run(path, routing, threads, seed, layers, activation, verbose) -> dict:
    model = build_model(seed, layers)
    write_mxfp4_checkpoint(model, path)

    generator = torch.Generator().manual_seed(seed + 1)
    prompt = torch.randint(3, model.config.vocab_size, (2, 12), generator=generator)
    with torch.no_grad():
        expected_logits = model(prompt).logits
        expected_tokens = model.generate(prompt, max_new_tokens=8, do_sample=False)

    checkpoint = mxmoe.Model(path)
    for n, layer in enumerate(model.model.layers):
        moe = checkpoint.layer(n, activation=activation, threads=threads)
        if routing == "transformers":
            layer.mlp.experts = MxmoeExperts(moe)
        else:
            layer.mlp = MxmoeMLP(moe)
    with torch.no_grad():
        logits = model(prompt).logits
        tokens = model.generate(prompt, max_new_tokens=8, do_sample=False)

    scale = expected_logits.abs().max().item()
    error = (logits - expected_logits).abs().max().item() / scale
    backend = checkpoint.layer(0, activation=activation, threads=threads).backend
    result = dict(checkpoint=path, routing=routing, backend=backend,
                  logit_error=error, tokens_equal=bool(torch.equal(tokens, expected_tokens)),
                  tokens=tokens[:, prompt.shape[1]:].tolist(),
                  expected_tokens=expected_tokens[:, prompt.shape[1]:].tolist())
    if verbose:
        print(f"checkpoint:     {path} ({layers} MoE layers, MXFP4, gpt-oss layout)")
        print(f"mxmoe:          {result['backend']} backend, {activation} activations, routing "
              f"by {routing}")
        judged = f"tolerance {LOGIT_TOLERANCE:g}" if activation == "f32" else \
            f"{activation} activations: their rounding, not judged"
        print(f"logits:         max |difference| / max |logit| = {error:.2e} ({judged})")
        print(f"greedy tokens:  transformers {result['expected_tokens']}")
        print(f"                with mxmoe   {result['tokens']}")
        print("same tokens" if result["tokens_equal"] else "TOKENS DIFFER")
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--routing", choices=["transformers", "mxmoe"], default="transformers",
                    help="who routes: transformers' router feeding forward_routed (default), "
                         "or mxmoe's own router")
    ap.add_argument("--threads", type=int, default=0, help="mxmoe threads (0 = every CPU)")
    ap.add_argument("--activation", default="f32",
                    help="mxmoe's activation format: f32 (default; the comparison is exact to "
                         "float32 sums), or bf16 / int8 / mxfp8 to see what rounding the "
                         "activations costs (the tolerance then does not apply)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep", action="store_true", help="keep the MXFP4 checkpoint written")
    args = ap.parse_args()
    result = run(args.routing, args.threads, args.seed, activation=args.activation,
                 keep=args.keep)
    if args.activation != "f32":
        return 0
    ok = result["logit_error"] <= LOGIT_TOLERANCE and result["tokens_equal"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
