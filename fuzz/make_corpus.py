#!/usr/bin/env python3
"""Writes the seed corpus: one small file per accepted shape and per rejection class of every
untrusted input's parser: the safetensors reader (fuzz/corpus/safetensors), the index
(index), config.json of the five families (config), .npy (npy), hardware probes (hardware),
and deployments / selections / requests / layer specs (deployment). Files named valid_* must
be accepted (tests/io/fuzz_corpus_test.cpp checks it)."""
import json
import os
import struct
import sys

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def st(header, data=b"", length=None):
    h = header if isinstance(header, bytes) else header.encode()
    n = len(h) if length is None else length
    return struct.pack("<Q", n) + h + data


def t(dtype, shape, begin, end):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


seeds = {
    "valid_two_tensors": st(json.dumps({"a": t("F32", [2], 0, 8), "b": t("U8", [3], 8, 11),
                                        "__metadata__": {"format": "pt"}}), bytes(11)),
    "valid_empty_and_scalar": st(json.dumps({"e": t("BF16", [0, 4], 0, 0),
                                             "s": t("I16", [], 0, 2)}), bytes(2)),
    "valid_f4_f6": st(json.dumps({"f4": t("F4", [4], 0, 2), "f6": t("F6_E2M3", [4], 2, 5)}),
                      bytes(5)),
    "under_8_bytes": b"\x01\x02\x03",
    "header_too_large": struct.pack("<Q", 200_000_000) + b"{}",
    "header_past_end": st("{}", length=64),
    "invalid_json": st('{"a":'),
    "invalid_utf8": st(b'{"\xff":{}}'),
    "non_string_metadata": st('{"__metadata__":{"k":1}}'),
    "tensor_named_metadata": st(json.dumps({"__metadata__": t("U8", [1], 0, 1)}), b"x"),
    "duplicate_names": st('{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
                          '"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}', b"xy"),
    "unknown_dtype": st(json.dumps({"a": t("Q4", [1], 0, 1)}), b"x"),
    "offset_gap": st(json.dumps({"a": t("U8", [1], 0, 1), "b": t("U8", [1], 2, 3)}), b"xyz"),
    "offset_overlap": st(json.dumps({"a": t("U8", [2], 0, 2), "b": t("U8", [2], 1, 3)}), b"xyz"),
    "end_before_begin": st(json.dumps({"a": t("U8", [0], 2, 1)}), b"xy"),
    "size_mismatch": st(json.dumps({"a": t("F32", [2], 0, 4)}), b"abcd"),
    "shape_overflow": st(json.dumps({"a": t("U64", [2**32, 2**32], 0, 0)})),
    "f4_odd_bits": st(json.dumps({"a": t("F4", [3], 0, 2)}), b"xy"),
    "trailing_bytes": st(json.dumps({"a": t("U8", [1], 0, 1)}), b"xy"),
    "data_past_end": st(json.dumps({"a": t("U8", [4], 0, 4)}), b"xy"),
    "deep_nesting": st('{"__metadata__":{"k":[[[[1]]]]}}'),
}

index_seeds = {
    "valid": {"metadata": {"total_size": 8}, "weight_map": {"a": "model-1.safetensors"}},
    "absolute_path": {"weight_map": {"a": "/etc/passwd"}},
    "dot_dot": {"weight_map": {"a": "../x.safetensors"}},
    "separator": {"weight_map": {"a": "sub/x.safetensors"}},
    "backslash": {"weight_map": {"a": "sub\\x.safetensors"}},
    "non_string_shard": {"weight_map": {"a": 3}},
    "nul_and_escape_in_names": {"weight_map": {"t\u001b[2J": "a\u0000b.safetensors"}},
    "missing_weight_map": {"metadata": {}},
    "bad_total_size": {"metadata": {"total_size": -1}, "weight_map": {}},
}


def write(folder, name, data):
    os.makedirs(os.path.join(root, folder), exist_ok=True)
    with open(os.path.join(root, folder, name), "wb") as f:
        f.write(data)


# ---------------------------------------------------------------------------------------
# config.json: the five families as Hugging Face writes them, aliases, and refusals.
gpt_oss = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss",
           "num_hidden_layers": 2, "num_local_experts": 4, "num_experts_per_tok": 2,
           "experts_per_token": 2, "hidden_size": 64, "intermediate_size": 96,
           "hidden_act": "silu", "swiglu_limit": 7.0, "swiglu_alpha": 1.702,
           "router_aux_loss_coef": 0.9, "torch_dtype": "bfloat16",
           "quantization_config": {"quant_method": "mxfp4",
                                   "modules_to_not_convert": ["model.layers.*.self_attn"]}}
mixtral = {"model_type": "mixtral", "num_hidden_layers": 3, "num_local_experts": 8,
           "num_experts_per_tok": 2, "hidden_size": 64, "intermediate_size": 128,
           "hidden_act": "silu", "router_jitter_noise": 0.0,
           "quantization_config": {"quant_method": "mxfp4", "mxmoe_gate_up_layout": "halves"}}
qwen = {"model_type": "qwen3_moe", "num_hidden_layers": 4, "num_experts": 8,
        "num_experts_per_tok": 2, "hidden_size": 64, "moe_intermediate_size": 32,
        "intermediate_size": 256, "norm_topk_prob": True, "decoder_sparse_step": 2,
        "mlp_only_layers": [0], "hidden_act": "silu",
        "quantization_config": {"quant_method": "mxfp4", "mxmoe_gate_up_layout": "halves",
                                "mxmoe_scale_rule": "round_up"}}
v3 = {"model_type": "deepseek_v3", "num_hidden_layers": 4, "n_routed_experts": 16,
      "num_experts_per_tok": 4, "hidden_size": 64, "moe_intermediate_size": 32,
      "n_shared_experts": 1, "n_group": 4, "topk_group": 2, "routed_scaling_factor": 2.5,
      "scoring_func": "sigmoid", "topk_method": "noaux_tc", "norm_topk_prob": True,
      "first_k_dense_replace": 1, "moe_layer_freq": 1, "hidden_act": "silu",
      "quantization_config": {"quant_method": "mxfp4", "mxmoe_gate_up_layout": "halves"}}
v4 = {"model_type": "deepseek_v4", "num_hidden_layers": 4, "n_routed_experts": 16,
      "num_experts_per_tok": 4, "hidden_size": 64, "moe_intermediate_size": 32,
      "n_shared_experts": 1, "routed_scaling_factor": 1.5, "scoring_func": "sqrtsoftplus",
      "swiglu_limit": 10.0, "num_hash_layers": 1, "hidden_act": "silu",
      "quantization_config": {"quant_method": "mxfp4", "mxmoe_gate_up_layout": "halves"}}


def changed(base, **kw):
    out = json.loads(json.dumps(base))
    for k, v in kw.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    return out


qwen_alias = changed(qwen, num_experts=None, num_local_experts=8)  # transformers 5
config_seeds = {
    "valid_gpt_oss": gpt_oss, "valid_mixtral": mixtral, "valid_qwen3_moe": qwen,
    "valid_deepseek_v3": v3, "valid_deepseek_v4": v4,
    "valid_nested_text_config": {"model_type": "wrapper", "text_config": gpt_oss},
    "valid_qwen3_moe_alias_num_local_experts": qwen_alias,
    "valid_gpt_oss_alias_num_experts": changed(gpt_oss, num_local_experts=None, num_experts=4),
    "valid_deepseek_v3_alias": changed(v3, n_routed_experts=None, num_local_experts=16),
    "aliases_disagree": changed(qwen, num_local_experts=16),
    "swiglu_alpha_negative": changed(gpt_oss, swiglu_alpha=-1.0),
    "layers_too_many": changed(gpt_oss, num_hidden_layers=100000000),
    "layers_float": changed(gpt_oss, num_hidden_layers=1e8),
    "experts_too_many": changed(mixtral, num_local_experts=10**9),
    "hidden_not_block": changed(mixtral, hidden_size=100),
    "hidden_huge": changed(mixtral, hidden_size=2**40),
    "top_k_exceeds": changed(mixtral, num_experts_per_tok=9),
    "hidden_act_gelu": changed(mixtral, hidden_act="gelu"),
    "unknown_model_type": changed(mixtral, model_type="llama"),
    "model_type_escape_sequence": changed(mixtral, model_type="gpt\u001b]0;title\u0007\u0000"),
    "quant_unknown": changed(gpt_oss, quantization_config={"quant_method": "gptq"}),
    "quant_extra_key": changed(gpt_oss, quantization_config={"quant_method": "mxfp4", "x": 1}),
    "v3_groups": changed(v3, n_group=3),
    "v3_scoring": changed(v3, scoring_func="softmax"),
    "qwen_mlp_only_out_of_range": changed(qwen, mlp_only_layers=[2**40]),
    "qwen_shared_expert": changed(qwen, shared_expert_intermediate_size=64),
}

# ---------------------------------------------------------------------------------------
# .npy: accepted versions and dtypes, and each refusal.


def npy(descr="<f4", shape=(2, 3), data=None, version=1, fortran=False, header=None):
    if header is None:
        dims = ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "")
        header = "{'descr': '%s', 'fortran_order': %s, 'shape': (%s), }" % (
            descr, "True" if fortran else "False", dims)
    h = header.encode()
    pre = 10 if version == 1 else 12
    h += b" " * ((64 - (pre + len(h) + 1) % 64) % 64) + b"\n"
    lenb = struct.pack("<H", len(h)) if version == 1 else struct.pack("<I", len(h))
    if data is None:
        n = 1
        for d in shape:
            n *= d
        data = bytes(n * (2 if descr in ("<f2", "<u2") else 4))
    return b"\x93NUMPY" + bytes([version, 0]) + lenb + h + data


npy_seeds = {
    "valid_f4": npy(), "valid_f2": npy("<f2"), "valid_bf16_as_u2": npy("<u2"),
    "valid_v2": npy(version=2), "valid_v3": npy(version=3), "valid_scalar": npy(shape=()),
    "valid_vector": npy(shape=(5,)),
    "bad_magic": b"\x93NUMPZ\x01\x00" + bytes(8), "unknown_version": npy(version=9),
    "fortran": npy(fortran=True), "f8": npy("<f8"), "truncated": npy()[:-3],
    "trailing": npy() + b"x", "unknown_key": npy(header="{'descr': '<f4', 'x': 1, "
                                                     "'fortran_order': False, 'shape': (1,), }"),
    "shape_overflow": npy(shape=(2**62, 2**62), data=b""),
    "rank_too_high": npy(shape=tuple([1] * 40)),
    "shape_string": npy(header="{'descr': '<f4', 'fortran_order': False, 'shape': '(2, 3)', }"),
    "fortran_string": npy(header="{'descr': '<f4', 'fortran_order': 'False', 'shape': (2, 3), }"),
    "header_past_end": b"\x93NUMPY\x01\x00\xff\xff{",
}

# ---------------------------------------------------------------------------------------
# Hardware probes (the JSON of `mxmoe info --hardware --json`) and the replayable documents.
features = ["avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni",
            "avx_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_int8", "amx_bf16"]
hardware = {"vendor": "AuthenticAMD", "model": "AMD EPYC", "logical_cpus": 2,
            "l1d_bytes": 32768, "l2_bytes": 1048576, "l3_bytes": 33554432,
            "isa": {f: f in ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq",
                             "avx512_vnni", "avx512_bf16") for f in features},
            "os_denied": [], "isa_cap": "", "cuda_devices": [], "source": "probe"}
hardware_seeds = {
    "valid_zen4": hardware,
    "valid_haswell": changed(hardware, isa={f: f in ("avx2", "fma", "f16c") for f in features},
                             isa_cap="avx2"),
    "valid_cuda": changed(hardware, cuda_devices=[{"name": "H100", "sm": 90,
                                                   "memory_bytes": 80 * 2**30}]),
    "cpus_too_many": changed(hardware, logical_cpus=1000000),
    "cpus_float": changed(hardware, logical_cpus=1e12),
    "cpus_zero": changed(hardware, logical_cpus=0),
    "cache_huge": changed(hardware, l3_bytes=2**62),
    "unknown_feature": changed(hardware, isa=dict(hardware["isa"], avx1024=True)),
    "unknown_cap": changed(hardware, isa_cap="avx9"),
    "denied_unknown": changed(hardware, os_denied=["x"]),
    # Found by the long campaign: a float far past 2^64 was cast to an integer (undefined).
    "cuda_memory_float": changed(hardware, cuda_devices=[{"name": "H100", "sm": 90,
                                                          "memory_bytes": 8.5899e49}]),
    "cuda_memory_negative": changed(hardware, cuda_devices=[{"name": "H100", "sm": 90,
                                                             "memory_bytes": -1}]),
}

layer = {"name": "tiny", "family": "gpt_oss", "num_experts": 8, "top_k": 2, "hidden": 256,
         "intermediate": 256, "routing": "topk_softmax",
         "routing_params": {"renormalize": True, "selection_bias": False, "n_group": 1,
                            "topk_group": 1, "routed_scaling_factor": 1.0,
                            "score_function": "sqrtsoftplus"},
         "activation": "swiglu_oai", "activation_params": {"alpha": 1.702, "limit": 7.0},
         "expert_bias": True, "router_bias": True, "gate_up_layout": "interleaved",
         "shared_experts": 0, "shared_intermediate": 0, "weight_format": "mxfp4",
         "shared_weight_format": "mxfp4", "vocab": 0}
v3_layer = changed(layer, name="v3", family="deepseek_v3", num_experts=16, top_k=4,
                   routing="sigmoid_group_topk",
                   routing_params={"renormalize": True, "selection_bias": True, "n_group": 4,
                                   "topk_group": 2, "routed_scaling_factor": 2.5,
                                   "score_function": "sqrtsoftplus"},
                   activation="silu_glu", expert_bias=False, router_bias=False,
                   gate_up_layout="halves", shared_experts=1, shared_intermediate=256)
request = {"activation": None, "batch_invariant": False, "ep_size": 1, "ep_rank": 0,
           "threads": 0, "tokens_hint": 16, "forced_backend": "", "excluded_backends": [],
           "allow_reference": False}
deployment = {"layer": layer, "hardware": hardware, "request": request}
selection = {"deployment": deployment, "preferences_source": "gpt_oss family",
             "candidates": [{"name": "reference", "supported": False, "estimated_us": 0.0,
                             "reasons": [{"code": "reference_only", "detail": "d", "required": "r",
                                          "actual": "a", "remedy": ""}]}],
             "chosen": "", "why": "", "suggestions": [{"change": "allow_reference=true",
                                                       "backend": "reference", "text": "t"}]}
deployment_seeds = {
    "valid_deployment": deployment,
    "valid_deployment_v3_mxfp8_invariant": changed(
        deployment, layer=v3_layer,
        request=changed(request, activation="mxfp8", batch_invariant=True)),
    "valid_deployment_forced_reference": changed(
        deployment, request=changed(request, forced_backend="reference", ep_size=2, ep_rank=1)),
    "valid_deployment_old_request": changed(deployment,
                                            request=changed(request, allow_reference=None)),
    "valid_selection": selection, "valid_request": request, "valid_layer_spec": layer,
    "unknown_backend": changed(deployment, request=changed(request, forced_backend="cuda")),
    "threads_too_many": changed(deployment, request=changed(request, threads=100000)),
    "tokens_float": changed(deployment, request=changed(request, tokens_hint=1e12)),
    "layer_invalid": changed(deployment, layer=changed(layer, top_k=9)),
    "alpha_huge": changed(deployment, layer=changed(
        layer, activation_params={"alpha": 1e300, "limit": 7.0})),
}

for name, data in seeds.items():
    write("safetensors", name, data)
for name, obj in index_seeds.items():
    write("index", name + ".json", json.dumps(obj).encode())
write("index", "duplicate_key.json", b'{"weight_map":{"a":"x","a":"y"}}')
write("index", "invalid_json.json", b'{"weight_map":')
for name, obj in config_seeds.items():
    write("config", name + ".json", json.dumps(obj, separators=(",", ":")).encode())
write("config", "duplicate_key.json", b'{"model_type":"mixtral","model_type":"gpt_oss"}')
write("config", "deep_nesting.json", b"[" * 100 + b"]" * 100)
for name, data in npy_seeds.items():
    write("npy", name + ".npy", data)
for name, obj in hardware_seeds.items():
    write("hardware", name + ".json", json.dumps(obj, separators=(",", ":")).encode())
for name, obj in deployment_seeds.items():
    write("deployment", name + ".json", json.dumps(obj, separators=(",", ":")).encode())
# The server's request bodies (fuzz_api): the first byte picks the endpoint (0 completions,
# 1 chat), the rest is the body.
api_seeds = {
    "completion_text": (0, {"prompt": "Hello", "max_tokens": 8, "temperature": 0.5, "stop": ["\n"],
                            "stream": True, "stream_options": {"include_usage": True}, "logprobs": 2}),
    "completion_ids": (0, {"prompt": [[1, 2, 3], [4, 5]], "seed": -3, "top_p": 0.9, "top_k": -1,
                           "min_p": 0.1, "n": 1, "echo": False}),
    "completion_wrong_type": (0, {"prompt": "x", "max_tokens": "8"}),
    "chat": (1, {"messages": [{"role": "system", "content": "Be brief."},
                              {"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
                 "max_completion_tokens": 16, "logprobs": True, "top_logprobs": 3, "ignore_eos": True}),
    "chat_empty": (1, {"messages": [], "logit_bias": {}, "presence_penalty": 0}),
}
for name, (endpoint, obj) in api_seeds.items():
    write("api", name, bytes([endpoint]) + json.dumps(obj, separators=(",", ":")).encode())
write("api", "deep_nesting", b"\x00" + b"[" * 100 + b"]" * 100)


# tokenizer.json documents (fuzz_tokenizer): the document, then optionally a 0 byte and a text.
def byte_level_chars():
    """The ByteLevel alphabet: printable Latin-1 bytes stand for themselves, the other bytes
    for code points from 256 up, in byte order (the tokenizers library's mapping)."""
    keep = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return [out[b] for b in range(256)]


chars = byte_level_chars()
byte_vocab = {c: i for i, c in enumerate(chars)}
for i, merged in enumerate(["he", "ll", "llo", "hello", "\u0120w"]):
    byte_vocab[merged.encode().decode("unicode_escape")] = 256 + i
pattern = (r"[^\s\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
           r"|\s+(?!\S)|\s+")
byte_level = {
    "version": "1.0",
    "added_tokens": [{"id": 300, "content": "<|start|>", "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": True}],
    "normalizer": {"type": "NFC"},
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
    "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                "use_regex": True},
    "model": {"type": "BPE", "vocab": byte_vocab, "merges": ["h e", "l l", "ll o", "he llo"],
              "ignore_merges": False},
}
metaspace_vocab = {"<unk>": 0, "a": 1, "b": 2, "ab": 3, "\u2581": 4, "\u2581ab": 5}
for b in range(256):
    metaspace_vocab[f"<0x{b:02X}>"] = 6 + b
metaspace = {
    "version": "1.0",
    "added_tokens": [{"id": 300, "content": "<s>", "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": True}],
    "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first",
                      "split": True},
    "decoder": {"type": "Sequence", "decoders": [
        {"type": "ByteFallback"},
        {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": True}]},
    "model": {"type": "BPE", "byte_fallback": True, "unk_token": "<unk>",
              "vocab": metaspace_vocab, "merges": ["a b", ["\u2581", "ab"]]},
}
text = "hello <|start|>w\u00f6rld 12345 \U0001F600\n\n  ab"
for name, doc in {"byte_level": byte_level, "metaspace": metaspace}.items():
    body = json.dumps(doc, separators=(",", ":")).encode()
    write("tokenizer", name + ".json", body)
    write("tokenizer", name + "_text", body + b"\0" + text.encode())
    write("tokenizer", name + "_bad_utf8", body + b"\0ab\xc3(")
write("tokenizer", "unsupported_model", b'{"model":{"type":"Unigram","vocab":[]}}')
write("tokenizer", "bad_regex", b'{"pre_tokenizer":{"type":"Split","pattern":{"Regex":"("},'
      b'"behavior":"Isolated"},"model":{"type":"BPE","vocab":{"a":0},"merges":[]}}')

# Texts and ids for fixed tokenizers (fuzz_tokenizer_text): byte 0 picks the tokenizer (bits
# 0-1: gpt-oss, Qwen3, Mixtral legacy), parsing (bit 2) and skipping (bit 3) of special tokens,
# and ids (bit 4: little-endian 16-bit values) instead of a text.
def ids16(*values):
    return b"".join(struct.pack("<H", v) for v in values)


text_seeds = {
    "gpt_oss_plain": (0x00, "Hello, world! It's 12345 o'clock.\n\n  indented\tcode(x) {}\r\n"),
    "gpt_oss_harmony": (0x04, "<|start|>user<|message|>Gr\u00fc\u00dfe aus M\u00fcnchen \U0001F600"
                              "<|end|><|start|>assistant<|channel|>final<|message|>"),
    "qwen3_chatml": (0x0D, "<|im_start|>user\n\u4f60\u597d\uff0c\u4e16\u754c\uff01"
                           "\u3053\u3093\u306b\u3061\u306f<think>\n\n</think><|im_end|>\n"),
    "qwen3_nfc": (0x01, "e\u0301 \u212b \u2126 \ufb01 \ud55c\uad6d\uc5b4 "
                        "\u0627\u0644\u0639\u0631\u0628\u064a\u0629 Stra\u00dfe"),
    "mixtral_plain": (0x02, " The quick brown fox;  \u041f\u0440\u0438\u0432\u0435\u0442 "
                            "\u043c\u0438\u0440; \U0001F468\u200d\U0001F469\u200d\U0001F467 "
                            "\U0001F1E9\U0001F1EA the and der die"),
    "mixtral_inst": (0x06, "<s>[INST] ab ab \u4f60\u597d [/INST]ing</s>"),
}
for name, (options, text) in text_seeds.items():
    write("tokenizer_text", name, bytes([options]) + text.encode())
write("tokenizer_text", "bad_utf8", b"\x00ab\xc3(")
# Ids: the four byte tokens of U+1F600 and an id past the end (Mixtral), a character's first
# byte alone, a hole below gpt-oss's special tokens and a negative id.
write("tokenizer_text", "mixtral_ids", bytes([0x12]) + ids16(3 + 0xF0, 3 + 0x9F, 3 + 0x98, 3 + 0x80, 1, 3 + 0xE4))
write("tokenizer_text", "mixtral_ids_out_of_range", bytes([0x1A]) + ids16(300, 0xFFFF))
write("tokenizer_text", "gpt_oss_ids", bytes([0x10]) + ids16(72, 101, 300, 0x8000, 0xFFF0))
write("tokenizer_text", "qwen3_ids_skip", bytes([0x19]) + ids16(0xC3, 0xA9, 0xFFF8, 33))

# Chat messages (fuzz_chat): byte 0 picks the format (mod 3) and options (bits 2, 3); then
# role, content, ... separated by 0 bytes.
chat_seeds = {
    "harmony": bytes([4]) + b"system\0Be brief.\0user\0Hi <|end|>\0assistant\0Hello",
    "chatml_no_thinking": bytes([1]) + b"user\0\xe4\xbd\xa0\xe5\xa5\xbd\0assistant\0ok",
    "inst": bytes([2 | 4]) + b"system\0S\0user\0U\0assistant\0A\0user\0U2",
    "inst_bad_turns": bytes([2]) + b"assistant\0A",
    "unknown_role": bytes([0]) + b"tool\0x",
    # fuzz_chat's first finding: an [INST] system message alone was dropped (now refused).
    "inst_system_alone": bytes([0x14]) + b"system\0B<|im_end|>\0",
}
for name, data in chat_seeds.items():
    write("chat", name, data)
print(f"seed corpus written under {root}", file=sys.stderr)
