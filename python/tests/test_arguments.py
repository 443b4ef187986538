"""Hostile and unusual arguments: every bad one is a TypeError/ValueError (or mxmoe's own
errors) naming the argument and what was expected; never a crash. Zero-copy and `out=`
behave as documented."""

from __future__ import annotations

import json
import os
import tracemalloc

import numpy as np
import pytest

import mxmoe


@pytest.fixture(scope="module")
def layer(models):
    return models["gpt-oss-20b"].layer(0, activation="f32")


@pytest.fixture(scope="module")
def x(layer):
    return np.random.default_rng(0).standard_normal((5, layer.hidden), dtype=np.float32)


def routing(layer, tokens, dtype=np.int32):
    rng = np.random.default_rng(1)
    ids = np.array([rng.permutation(layer.num_experts)[:layer.top_k] for _ in range(tokens)],
                   dtype=dtype).reshape(tokens, layer.top_k)
    return ids, np.full((tokens, layer.top_k), 1.0 / layer.top_k, np.float32)


@pytest.mark.parametrize("bad, error, words", [
    (None, TypeError, ["x: expected a float32 or bfloat16 array of shape [tokens, 128]", "NoneType"]),
    ([[1.0] * 128], TypeError, ["x: expected", "list"]),
    ("text", TypeError, ["x: expected", "str"]),
    (np.zeros((2, 128), np.float64), TypeError, ["x: expected", "float32", "got float64"]),
    (np.zeros((2, 128), np.int32), TypeError, ["got int32"]),
    (np.zeros((2, 128), np.uint16), TypeError, ["got uint16", "bf16_bits=True"]),
    (np.zeros((2, 128), np.complex64), TypeError, ["got complex64"]),
    (np.zeros(128, np.float32), ValueError, ["x: expected a 2-D array of shape [tokens, 128]",
                                              "1-D shape [128]"]),
    (np.zeros((1, 2, 128), np.float32), ValueError, ["3-D"]),
    (np.zeros((2, 96), np.float32), ValueError, ["x: expected shape [tokens, 128], got [2, 96]"]),
    (np.zeros((2, 0), np.float32), ValueError, ["got [2, 0]"]),
])
def test_bad_x_names_the_argument(layer, bad, error, words):
    with pytest.raises(error) as e:
        layer(bad)
    for w in words:
        assert w in str(e.value)


def test_bf16_bits_needs_uint16(layer, x):
    with pytest.raises(TypeError, match="bf16_bits=True expects a uint16 array"):
        layer(x, bf16_bits=True)


@pytest.mark.parametrize("make_out, error, words", [
    (lambda x: np.zeros((5, 128), np.float64), TypeError, ["out: expected a writable C-contiguous float32 array of shape [5, 128]", "float64"]),
    (lambda x: np.zeros((4, 128), np.float32), ValueError, ["out: expected", "got shape [4, 128]"]),
    (lambda x: np.zeros((128, 5), np.float32).T, ValueError, ["strided"]),
    (lambda x: np.zeros((5, 256), np.float32)[:, ::2], ValueError, ["strided"]),
    (lambda x: x, ValueError, ["out: overlaps x"]),
    (lambda x: np.frombuffer(bytearray(x.nbytes + 1), np.float32, x.size, 1).reshape(x.shape),
     ValueError, ["unaligned"]),
    (lambda x: [0.0], TypeError, ["out: expected", "list"]),
])
def test_bad_out_names_the_argument(layer, x, make_out, error, words):
    xc = x.copy()
    with pytest.raises(error) as e:
        layer(xc, out=make_out(xc))
    for w in words:
        assert w in str(e.value)


def test_read_only_out_is_refused(layer, x):
    out = np.zeros_like(x)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="out: the array is read-only"):
        layer(x, out=out)


def test_overlapping_views_are_refused(layer):
    buf = np.zeros((6, 128), np.float32)
    with pytest.raises(ValueError, match="overlaps x"):
        layer(buf[:5], out=buf[1:])


def test_out_is_written_and_returned(layer, x):
    expected = layer(x)
    out = np.full_like(x, np.nan)
    result = layer(x, out=out)
    assert result is out
    np.testing.assert_array_equal(out, expected)


def test_read_only_input_is_accepted(layer, x):
    ro = x.copy()
    ro.flags.writeable = False
    np.testing.assert_array_equal(layer(ro), layer(x))


@pytest.mark.parametrize("view", [
    lambda x: np.asfortranarray(x),
    lambda x: np.repeat(x, 2, axis=0)[::2],
    lambda x: np.repeat(x, 3, axis=1)[:, ::3],
    lambda x: x[::-1][::-1],
    lambda x: np.flipud(np.flipud(x).copy()),
    lambda x: np.frombuffer(b"\0" + x.tobytes(), np.float32, x.size, 1).reshape(x.shape),
])
def test_strided_inputs_give_the_contiguous_result(layer, x, view):
    v = view(x)
    before = v.copy()
    np.testing.assert_array_equal(layer(v), layer(np.ascontiguousarray(v)))
    np.testing.assert_array_equal(v, before)  # the input is never written


def test_zero_tokens(layer):
    y = layer(np.zeros((0, layer.hidden), np.float32))
    assert y.shape == (0, layer.hidden) and y.dtype == np.float32
    ids, w = routing(layer, 0)
    assert layer.forward_routed(np.zeros((0, layer.hidden), np.float32), ids, w).shape == (0, 128)


def test_contiguous_input_is_read_in_place(layer):
    """With out= given, a call allocates nothing the size of x (numpy's allocations are
    traced): x is read where it lies, not converted or copied."""
    x = np.random.default_rng(2).standard_normal((512, layer.hidden), dtype=np.float32)
    out = np.empty_like(x)
    layer(x, out=out)  # warm the layer's workspace
    tracemalloc.start()
    try:
        layer(x, out=out)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < x.nbytes // 4, f"a call traced {peak} bytes for a {x.nbytes}-byte input"


@pytest.mark.parametrize("ids, weights, error, words", [
    (np.zeros((5, 4), np.float32), None, TypeError, ["topk_ids: expected a int32 or int64 array of shape [5, 4]", "float32"]),
    (np.zeros((5, 3), np.int32), None, ValueError, ["topk_ids: expected shape [5, 4], got [5, 3]"]),
    (np.zeros((4, 4), np.int32), None, ValueError, ["topk_ids: expected shape [5, 4], got [4, 4]"]),
    (None, np.zeros((5, 4), np.float64), TypeError, ["topk_weights: expected a float32 array of shape [5, 4]", "float64"]),
    (None, np.zeros((5, 4, 1), np.float32), ValueError, ["topk_weights: expected a 2-D array"]),
    (None, "w", TypeError, ["topk_weights: expected", "str"]),
])
def test_bad_routing_names_the_argument(layer, x, ids, weights, error, words):
    good_ids, good_w = routing(layer, 5)
    with pytest.raises(error) as e:
        layer.forward_routed(x, good_ids if ids is None else ids,
                             good_w if weights is None else weights)
    for w in words:
        assert w in str(e.value)


@pytest.mark.parametrize("value", [2**32 + 1, -1, 16, 2**63 - 1, -2**63])
def test_int64_ids_out_of_range_are_refused_not_wrapped(layer, x, value):
    ids, w = routing(layer, 5, np.int64)
    ids[2, 1] = value
    with pytest.raises(ValueError, match=r"topk_ids\[2, 1\] = .* is not an expert of this layer \(0..15\)"):
        layer.forward_routed(x, ids, w)


@pytest.mark.parametrize("value", [-1, 16, 2**31 - 1])
def test_int32_ids_out_of_range_are_refused(layer, x, value):
    ids, w = routing(layer, 5)
    ids[0, 0] = value
    with pytest.raises(ValueError, match="expert id"):
        layer.forward_routed(x, ids, w)


def test_repeated_expert_in_a_token_is_refused(layer, x):
    ids, w = routing(layer, 5)
    ids[3, 1] = ids[3, 0]
    with pytest.raises(ValueError):
        layer.forward_routed(x, ids, w)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_routing_weights_are_refused(layer, x, bad):
    ids, w = routing(layer, 5)
    w[1, 2] = bad
    with pytest.raises(ValueError, match="not finite"):
        layer.forward_routed(x, ids, w)


def test_a_failed_call_leaves_the_layer_usable(layer, x):
    ids, w = routing(layer, 5)
    ids[0, 0] = 99
    with pytest.raises(ValueError):
        layer.forward_routed(x, ids, w)
    ids, w = routing(layer, 5)
    np.testing.assert_array_equal(layer.forward_routed(x, ids, w),
                                  layer.forward_routed(x.copy(), ids, w))


# --- Model, requests, errors --------------------------------------------------------------

def test_missing_checkpoint_is_a_load_error(tmp_path):
    with pytest.raises(mxmoe.LoadError) as e:
        mxmoe.Model(tmp_path / "nothing-here")
    assert isinstance(e.value, OSError)
    assert "nothing-here" in str(e.value)


def test_a_path_with_a_nul_is_named_escaped(checkpoints):
    # The message ended at the NUL: a valid directory named, and no reason. A NUL is a bad
    # argument (ValueError naming it, as Python's own open() says), shown escaped.
    path = os.fspath(checkpoints["mixtral-8x7b"])
    with pytest.raises(ValueError) as e:
        mxmoe.Model(path + "\0junk")
    assert not isinstance(e.value, mxmoe.LoadError)
    assert "\\x00junk" in str(e.value) and "NUL" in str(e.value), str(e.value)


def test_malformed_config_is_a_load_error(tmp_path):
    (tmp_path / "config.json").write_text("{\"model_type\": \"gpt_oss\", ")
    with pytest.raises(mxmoe.LoadError, match="config.json"):
        mxmoe.Model(tmp_path)


def test_layer_index_out_of_range(models):
    with pytest.raises(mxmoe.LoadError, match="7"):
        models["mixtral-8x7b"].layer(7)


@pytest.mark.parametrize("kwargs, error, words", [
    (dict(activation="fp7"), ValueError, ["activation:", "fp7", "bf16"]),
    (dict(threads=-1), ValueError, ["threads: expected 0"]),
    (dict(threads=5000), ValueError, ["threads: expected 0"]),
    (dict(tokens=0), ValueError, ["tokens: expected 1..1048576, got 0"]),
    (dict(backend="no_such_backend"), ValueError, ["no_such_backend", "reference"]),
    (dict(exclude=["nope"]), ValueError, ["nope"]),
    (dict(threads="2"), TypeError, ["threads: expected an int"]),
    (dict(backend=3), TypeError, ["backend: expected a str"]),
])
def test_bad_request_names_the_argument(models, kwargs, error, words):
    with pytest.raises(error) as e:
        models["qwen3-30b-a3b"].layer(0, **kwargs)
    for w in words:
        assert w in str(e.value)


def test_no_backend_error_carries_the_selection(models):
    # Excluding every backend leaves none, on any machine.
    with pytest.raises(mxmoe.NoBackendError) as e:
        models["qwen3-30b-a3b"].layer(0, exclude=mxmoe.backends())
    assert str(e.value).startswith("No MXFP4 MoE backend supports the deployment configuration.")
    selection = e.value.selection
    assert selection["selected"] is None
    assert selection["error"] == str(e.value)
    assert {c["name"] for c in selection["candidates"]} == set(mxmoe.backends())
    for c in selection["candidates"]:
        assert not c["supported"]
        assert "user_excluded" in [r["code"] for r in c["reasons"]]


def test_same_request_gives_the_same_layer(models):
    m = models["deepseek-v4-flash"]
    assert m.layer(1, activation="bf16") is m.layer(1, activation="bf16")
    assert m.layer(1, activation="bf16") is not m.layer(1, activation="f32")


def test_layer_properties(models, checkpoints):
    layer = models["deepseek-v4-flash"].layer(1, activation="bf16", threads=1)
    assert (layer.index, layer.hidden, layer.intermediate, layer.num_experts, layer.top_k) == \
        (1, 128, 64, 16, 4)
    assert layer.threads == 1
    assert layer.backend == layer.selection["selected"] in mxmoe.backends()
    assert layer.spec["family"] == "deepseek_v4"
    assert layer.selection["deployment"]["layer"] == layer.spec
    assert "deepseek_v4" in repr(layer) and layer.backend in repr(layer)
    with pytest.raises(TypeError):
        mxmoe.Layer()


def test_model_properties(models, checkpoints):
    m = models["mixtral-8x7b"]
    assert m.path == os.fspath(checkpoints["mixtral-8x7b"])
    assert m.config["model_type"] == "mixtral"
    assert m.num_layers == 2 and m.moe_layers == [0, 1]
    assert m.skip_reason(0) == ""
    assert "mixtral" in repr(m) or checkpoints["mixtral-8x7b"] in repr(m)


def test_layers_outlive_their_model(checkpoints):
    layer = mxmoe.Model(checkpoints["qwen3-30b-a3b"]).layer(0)
    import gc  # noqa: PLC0415
    gc.collect()
    x = np.ones((2, layer.hidden), np.float32)
    assert np.isfinite(layer(x)).all()


def test_generate_refuses_an_existing_directory_and_bad_sizes(tmp_path):
    path = mxmoe.generate(tmp_path / "g", "mixtral-8x7b", experts=4, top_k=2, hidden=64,
                          intermediate=32)
    with pytest.raises(mxmoe.LoadError, match="already exists"):
        mxmoe.generate(path, "mixtral-8x7b", experts=4, top_k=2, hidden=64, intermediate=32)
    mxmoe.generate(path, "mixtral-8x7b", experts=4, top_k=2, hidden=64, intermediate=32,
                   force=True)
    with pytest.raises(ValueError, match="hidden"):
        mxmoe.generate(tmp_path / "h", "mixtral-8x7b", hidden=33)
    with pytest.raises(ValueError, match="top_k"):
        mxmoe.generate(tmp_path / "k", "mixtral-8x7b", experts=4, top_k=5)
    with pytest.raises(ValueError, match="no-such-preset"):
        mxmoe.generate(tmp_path / "p", "no-such-preset")
    assert not (tmp_path / "h").exists() and not (tmp_path / "k").exists()


def test_environment_is_read_by_the_library(monkeypatch, tmp_path):
    """MXMOE_* reach the package through the library's one parser: an argument left at its
    default takes the variable, a given one wins, a bad value is a ValueError naming it."""
    monkeypatch.setenv("MXMOE_BACKEND", "reference")
    monkeypatch.setenv("MXMOE_ACTIVATION", "f32")
    assert mxmoe.explain(preset="gpt-oss-20b")["selected"] == "reference"
    # avx2 is avx2_fp32's former name: accepted, reported by the name it has now.
    assert mxmoe.explain(preset="gpt-oss-20b", backend="avx2")["selected"] in ("avx2_fp32", None)
    monkeypatch.delenv("MXMOE_BACKEND")
    assert mxmoe.explain(preset="gpt-oss-20b")["selected"] != "reference"
    monkeypatch.setenv("MXMOE_THREADS", "100000")
    with pytest.raises(ValueError, match="MXMOE_THREADS"):
        mxmoe.explain(preset="gpt-oss-20b")
    monkeypatch.delenv("MXMOE_THREADS")
    monkeypatch.setenv("MXMOE_MAX_ISA", "sse9")
    with pytest.raises(ValueError, match="MXMOE_MAX_ISA"):
        mxmoe.hardware()


def test_hardware_file_is_read_by_the_library(tmp_path):
    """A hardware file is read as every file is (regular files only, size cap); a bad one is
    a LoadError naming it, as `mxmoe explain --hardware` exits 1."""
    with pytest.raises(mxmoe.LoadError, match="not a regular file"):
        mxmoe.explain(hardware="/dev/zero")
    bad = tmp_path / "probe.json"
    bad.write_text('{"x": 1}')
    with pytest.raises(mxmoe.LoadError, match="probe.json"):
        mxmoe.explain(hardware=str(bad))
    good = tmp_path / "good.json"
    good.write_text(__import__("json").dumps(mxmoe.hardware()))
    assert mxmoe.explain(hardware=good)["deployment"]["hardware"]["source"] == str(good)


def test_layer_cache_follows_the_environment(models, monkeypatch):
    """A variable that changes the request gives another layer, never the cached one."""
    model = models["gpt-oss-20b"]
    monkeypatch.setenv("MXMOE_BACKEND", "reference")
    assert model.layer(0, activation="f32").backend == "reference"
    monkeypatch.delenv("MXMOE_BACKEND")
    assert model.layer(0, activation="f32").backend != "reference"


def test_generate_full_writes_the_whole_model(tmp_path):
    path = mxmoe.generate(tmp_path / "oss", "gpt-oss-20b", full=True, layers=2, experts=4,
                          top_k=2, hidden=64, intermediate=32, attention_heads=4, kv_heads=2,
                          head_dim=16, vocab=300)
    files = sorted(os.listdir(path))
    assert files == [".mxmoe-checkpoint", "config.json", "generation_config.json",
                     "model-00001-of-00001.safetensors",
                     "model.safetensors.index.json", "tokenizer.json", "tokenizer_config.json"]
    with open(os.path.join(path, "model.safetensors.index.json"), encoding="utf-8") as f:
        names = json.load(f)["weight_map"]
    assert "lm_head.weight" in names and "model.layers.1.self_attn.sinks" in names
    assert len(names) == 41  # embeddings, norm, head and 19 tensors per layer
    assert mxmoe.Model(path).moe_layers == [0, 1]
    with pytest.raises(ValueError, match="full=True"):
        mxmoe.generate(tmp_path / "x", "gpt-oss-20b", head_dim=16)
    with pytest.raises(ValueError, match="do not divide"):
        mxmoe.generate(tmp_path / "y", "gpt-oss-20b", full=True, attention_heads=4, kv_heads=3)
    with pytest.raises(ValueError, match="gpt-oss and Qwen3-MoE"):
        mxmoe.generate(tmp_path / "z", "mixtral-8x7b", full=True)
    assert not os.path.exists(tmp_path / "y") and not os.path.exists(tmp_path / "z")


_TRUNCATE_AND_BIND = """
import glob, os, sys
import numpy as np
import mxmoe
path, backend = sys.argv[1], sys.argv[2] or None
model = mxmoe.Model(path)
kept = model.layer(0, backend=backend, activation="f32")  # bound before the cut
for shard in glob.glob(os.path.join(path, "*.safetensors")):
    os.truncate(shard, 0)
x = np.ones((2, kept.hidden), np.float32)
try:
    y = kept(x)
    print("forward ok", bool(np.isfinite(y).all()))
except mxmoe.LoadError as e:
    print("forward LoadError:", e)
try:
    model.layer(1, backend=backend, activation="f32")
    print("bound")
except mxmoe.LoadError as e:
    print("bind LoadError:", e)
"""


@pytest.mark.parametrize("backend", ["reference", ""])
def test_checkpoint_truncated_while_mapped_is_a_load_error(tmp_path, backend):
    # A shard truncated after Model() mapped it: binding (and computing from the mapping, for a
    # backend that reads it in place) raises LoadError naming the file; it was SIGBUS (exit -7).
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415
    path = mxmoe.generate(tmp_path / "cut", "mixtral-8x7b", layers=2, experts=4, top_k=2,
                          hidden=64, intermediate=32)
    r = subprocess.run([sys.executable, "-c", _TRUNCATE_AND_BIND, os.fspath(path), backend],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, (r.returncode, r.stderr)
    assert "bind LoadError:" in r.stdout and ".safetensors" in r.stdout, r.stdout
    assert "changed on disk" in r.stdout, r.stdout
    if backend == "reference":
        assert "forward LoadError:" in r.stdout, r.stdout
    else:
        assert "forward ok True" in r.stdout or "forward LoadError:" in r.stdout, r.stdout


# A later hostile pass (issue 25): booleans taken by truthiness, explicit zeros read as "the
# preset's", and names cut at a NUL.
def test_booleans_are_true_or_false_only(tmp_path, checkpoints):
    for flag in ("no", 2, None, "False"):
        with pytest.raises(TypeError, match="force: expected True or False"):
            mxmoe.generate(tmp_path / "g", "tiny", force=flag)
        with pytest.raises(TypeError, match="batch_invariant: expected True or False"):
            mxmoe.Model(checkpoints["mixtral-8x7b"]).layer(0, batch_invariant=flag)
    assert not (tmp_path / "g").exists()
    mxmoe.generate(tmp_path / "g", "tiny", force=np.bool_(False))
    assert (tmp_path / "g" / "config.json").is_file()


@pytest.mark.parametrize("argument", ["layers", "experts", "top_k", "hidden", "intermediate",
                                      "vocab"])
def test_an_explicit_zero_is_refused_not_read_as_the_presets(tmp_path, argument):
    with pytest.raises(ValueError, match=f"{argument}: expected a positive int"):
        mxmoe.generate(tmp_path / "g", "tiny", **{argument: 0})
    assert not (tmp_path / "g").exists()


def test_an_empty_preset_is_refused(tmp_path):
    with pytest.raises(ValueError, match="preset: expected a preset name"):
        mxmoe.generate(tmp_path / "g", "")


@pytest.mark.parametrize("argument", ["backend", "activation", "exclude"])
def test_a_name_with_a_nul_is_refused_whole(checkpoints, argument):
    # The message had been cut at the NUL ("unknown backend 'avx2", no list of names).
    with pytest.raises(ValueError, match=argument + r": 'avx2\\x00junk' holds a NUL"):
        mxmoe.Model(checkpoints["mixtral-8x7b"]).layer(0, **{argument: "avx2\0junk"})
