#!/usr/bin/env python3
"""Writes the seed corpus: one small file per accepted shape and per rejection class of the
safetensors reader (fuzz/corpus/safetensors) and of the index parser (fuzz/corpus/index)."""
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
    "missing_weight_map": {"metadata": {}},
    "bad_total_size": {"metadata": {"total_size": -1}, "weight_map": {}},
}


def write(folder, name, data):
    os.makedirs(os.path.join(root, folder), exist_ok=True)
    with open(os.path.join(root, folder, name), "wb") as f:
        f.write(data)


for name, data in seeds.items():
    write("safetensors", name, data)
for name, obj in index_seeds.items():
    write("index", name + ".json", json.dumps(obj).encode())
write("index", "duplicate_key.json", b'{"weight_map":{"a":"x","a":"y"}}')
write("index", "invalid_json.json", b'{"weight_map":')
print(f"seed corpus written under {root}", file=sys.stderr)
