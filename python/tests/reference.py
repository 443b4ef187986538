"""A float64 numpy evaluation of a MoE layer, written from the formats and the model math
(shared/spec/FORMATS.md, docs/MODELS.md), independently of mxmoe's code: it reads the
checkpoint's files itself (config.json, safetensors), decodes MXFP4 itself, and computes
routing, experts and the combine in float64.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from typing import Dict, Optional, Tuple

import numpy as np

# E2M1 code -> value (sign bit 3, exponent bits 2..1 with bias 1, mantissa bit 0).
E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                 -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0], dtype=np.float64)

_DTYPES = {"F32": np.float32, "U8": np.uint8, "BF16": np.uint16, "I32": np.int32,
           "I64": np.int64, "F16": np.float16, "U16": np.uint16}


def read_safetensors(path: str) -> Dict[str, Tuple[str, np.ndarray]]:
    """name -> (dtype name, array) of one safetensors file (BF16 as its uint16 bits)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    base = 8 + n
    out = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        array = np.frombuffer(data[base + begin:base + end], dtype=_DTYPES[info["dtype"]])
        out[name] = (info["dtype"], array.reshape(info["shape"]))
    return out


def read_checkpoint(directory: str) -> Tuple[dict, Dict[str, Tuple[str, np.ndarray]]]:
    """(config.json, every tensor of the directory's safetensors files)."""
    with open(os.path.join(directory, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    single = os.path.join(directory, "model.safetensors")
    if os.path.exists(single):
        return config, read_safetensors(single)
    with open(os.path.join(directory, "model.safetensors.index.json"), encoding="utf-8") as f:
        files = sorted(set(json.load(f)["weight_map"].values()))
    tensors = {}
    for name in files:
        tensors.update(read_safetensors(os.path.join(directory, name)))
    return config, tensors


def bf16_bits_to_f64(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def round_bf16(x: np.ndarray) -> np.ndarray:
    """Round to nearest even bfloat16 (through float32, as a float32 engine does); finite x."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32).astype(np.float64)


def to_bf16_bits(x: np.ndarray) -> np.ndarray:
    return (round_bf16(x).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


def dense(entry: Tuple[str, np.ndarray]) -> np.ndarray:
    dtype, array = entry
    return bf16_bits_to_f64(array) if dtype == "BF16" else array.astype(np.float64)


def decode_mxfp4(blocks: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """[E, R, C/32, 16] u8 + [E, R, C/32] u8 -> [E, R, C] float64. Byte j of a block holds
    element 2j in its low nibble and 2j+1 in its high nibble; a block's value is
    E2M1[code] * 2^(scale - 127)."""
    low = E2M1[blocks & 0x0F]
    high = E2M1[blocks >> 4]
    values = np.stack([low, high], axis=-1).reshape(*blocks.shape[:-1], 32)
    values = values * np.exp2(scales.astype(np.float64) - 127.0)[..., None]
    return values.reshape(blocks.shape[0], blocks.shape[1], -1)


@dataclass
class Layer:
    family: str
    top_k: int
    router: np.ndarray
    router_bias: Optional[np.ndarray]
    selection_bias: Optional[np.ndarray]
    w1: np.ndarray
    b1: Optional[np.ndarray]
    w2: np.ndarray
    b2: Optional[np.ndarray]
    shared_w1: Optional[np.ndarray]
    shared_w2: Optional[np.ndarray]
    interleaved: bool
    limit: float
    scaling: float
    renormalize: bool
    n_group: int
    topk_group: int


def load_layer(directory: str, index: int) -> Layer:
    config, t = read_checkpoint(directory)
    c = config.get("text_config", config)
    family = c["model_type"]
    p = f"model.layers.{index}.mlp."

    def opt(name):
        return dense(t[p + name]) if p + name in t else None

    def mx(stem):
        if p + stem + "_blocks" not in t:
            return None
        return decode_mxfp4(t[p + stem + "_blocks"][1], t[p + stem + "_scales"][1])

    layout = c.get("quantization_config", {}).get("mxmoe_gate_up_layout")
    interleaved = layout == "interleaved" if layout else family == "gpt_oss"
    return Layer(
        family=family,
        top_k=int(c.get("num_experts_per_tok", c.get("experts_per_token", 0))),
        router=dense(t[p + "router.weight"]),
        router_bias=opt("router.bias"),
        selection_bias=opt("router.e_score_correction_bias"),
        w1=mx("experts.gate_up_proj"),
        b1=opt("experts.gate_up_proj_bias"),
        w2=mx("experts.down_proj"),
        b2=opt("experts.down_proj_bias"),
        shared_w1=mx("shared_experts.gate_up_proj"),
        shared_w2=mx("shared_experts.down_proj"),
        interleaved=interleaved,
        limit=float(c.get("swiglu_limit", 7.0)),
        scaling=float(c.get("routed_scaling_factor", 1.0)),
        renormalize=bool(c.get("norm_topk_prob", True)),
        n_group=int(c.get("n_group", 1)),
        topk_group=int(c.get("topk_group", 1)),
    )


def _top(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest, ties toward the lower index, largest first."""
    return np.argsort(-scores, kind="stable")[:k]


def route(layer: Layer, logits: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(ids [T, k], weights [T, k]) from router logits [T, E], per the family."""
    t_count, e_count = logits.shape
    k = layer.top_k
    ids = np.zeros((t_count, k), dtype=np.int64)
    weights = np.zeros((t_count, k), dtype=np.float64)
    for t in range(t_count):
        l = logits[t]
        if layer.family == "gpt_oss":
            chosen = _top(l, k)
            w = np.exp(l[chosen] - l[chosen].max())
            w /= w.sum()
        elif layer.family in ("mixtral", "qwen3_moe"):
            p = np.exp(l - l.max())
            p /= p.sum()
            chosen = _top(p, k)
            w = p[chosen] / p[chosen].sum() if layer.renormalize else p[chosen]
        else:
            if layer.family == "deepseek_v3":
                s = 1.0 / (1.0 + np.exp(-l))
            else:  # deepseek_v4: sqrt(softplus)
                s = np.sqrt(np.logaddexp(0.0, l))
            selection = s + layer.selection_bias
            if layer.family == "deepseek_v3" and layer.n_group > 1:
                groups = selection.reshape(layer.n_group, -1)
                group_score = np.sort(groups, axis=1)[:, ::-1][:, :2].sum(axis=1)
                kept = _top(group_score, layer.topk_group)
                mask = np.full(layer.n_group, False)
                mask[kept] = True
                selection = np.where(np.repeat(mask, e_count // layer.n_group), selection,
                                     -np.inf)
            chosen = _top(selection, k)
            w = s[chosen] / (s[chosen].sum() + 1e-20) * layer.scaling
        ids[t], weights[t] = chosen, w
    return ids, weights


def _expert(w1, b1, w2, b2, x_q, layer: Layer, quantize) -> np.ndarray:
    h = w1 @ x_q + (b1 if b1 is not None else 0.0)
    h = h.astype(np.float32).astype(np.float64)  # engines hold h in float32
    if layer.interleaved:
        gate, up = h[0::2], h[1::2]
    else:
        half = h.shape[0] // 2
        gate, up = h[:half], h[half:]
    if layer.family == "gpt_oss":
        gate = np.minimum(gate, layer.limit)
        up = np.clip(up, -layer.limit, layer.limit)
        a = gate / (1.0 + np.exp(-1.702 * gate)) * (up + 1.0)
    else:
        if layer.family == "deepseek_v4":
            gate = np.minimum(gate, layer.limit)
            up = np.clip(up, -layer.limit, layer.limit)
        a = gate / (1.0 + np.exp(-gate)) * up
    return w2 @ quantize(a) + (b2 if b2 is not None else 0.0)


def evaluate(layer: Layer, x: np.ndarray, activation: str,
             routing: Optional[Tuple[np.ndarray, np.ndarray]] = None) -> np.ndarray:
    """y [T, H] in float64 for x [T, H] (float32 values). activation: "f32" (no rounding),
    "bf16" (both GEMM inputs rounded to bf16, as the engine does) or "none" (no rounding, for
    formats compared against the unquantized layer). routing: (ids, weights) or None to
    route with the layer's router."""
    quantize = round_bf16 if activation == "bf16" else (lambda v: v)
    x = x.astype(np.float64)
    if routing is None:
        logits = x @ layer.router.T + (layer.router_bias if layer.router_bias is not None else 0)
        routing = route(layer, logits.astype(np.float32).astype(np.float64))
    ids, weights = routing
    y = np.zeros_like(x)
    for t in range(x.shape[0]):
        x_q = quantize(x[t])
        for j in range(ids.shape[1]):
            e = int(ids[t, j])
            out = _expert(layer.w1[e], None if layer.b1 is None else layer.b1[e], layer.w2[e],
                          None if layer.b2 is None else layer.b2[e], x_q, layer, quantize)
            y[t] += weights[t, j] * out
        if layer.shared_w1 is not None:
            y[t] += _expert(layer.shared_w1[0], None, layer.shared_w2[0], None, x_q, layer,
                            quantize)
    return y


def relative_error(y, reference) -> float:
    y = np.asarray(y, dtype=np.float64)
    return float(np.linalg.norm(y - reference) / np.linalg.norm(reference))
