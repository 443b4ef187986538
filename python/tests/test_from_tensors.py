"""mxmoe.layer_from_tensors: a layer on the caller's arrays (numpy, torch) in the fused layout
(interleaved or halves) and per expert gives the bits of the same bytes loaded from a checkpoint
(mxmoe.Model), reads them in place, holds them only while its backend computes from them, and
refuses bad tensors with ValueError / TypeError naming them."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import mxmoe
from reference import evaluate, load_layer, read_checkpoint, relative_error

try:
    import torch
except ImportError:  # the torch tests skip; the numpy ones run
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed here")

E, K, H, I = 8, 2, 64, 96
TOKENS = 6


@pytest.fixture(scope="module")
def gpt_oss(tmp_path_factory):
    """(checkpoint directory, its layer-0 tensors by short name, as numpy arrays)."""
    path = mxmoe.generate(str(tmp_path_factory.mktemp("tensors") / "gpt-oss"), "gpt-oss-20b",
                          experts=E, top_k=K, hidden=H, intermediate=I, seed=41)
    _, t = read_checkpoint(path)
    p = "model.layers.0.mlp."
    arrays = {name: np.ascontiguousarray(t[p + stem][1]) for name, stem in {
        "w13_blocks": "experts.gate_up_proj_blocks", "w13_scales": "experts.gate_up_proj_scales",
        "w2_blocks": "experts.down_proj_blocks", "w2_scales": "experts.down_proj_scales",
        "w13_bias": "experts.gate_up_proj_bias", "w2_bias": "experts.down_proj_bias",
        "router_weight": "router.weight", "router_bias": "router.bias"}.items()}
    assert t[p + "router.weight"][0] == "F32"  # the generator writes float32 dense tensors
    return path, arrays


def routing(seed=0):
    rng = np.random.default_rng(seed)
    ids = np.stack([rng.permutation(E)[:K] for _ in range(TOKENS)]).astype(np.int32)
    weights = rng.uniform(0.1, 1.0, (TOKENS, K)).astype(np.float32)
    return ids, weights / weights.sum(axis=1, keepdims=True)


def x_f32(seed=1):
    return np.random.default_rng(seed).standard_normal((TOKENS, H), dtype=np.float32)


def fused(arrays, **changes):
    """The checkpoint's fused tensors, w13 blocks as vLLM holds them ([E, 2I, H/2])."""
    t = dict(arrays)
    t["w13_blocks"] = t["w13_blocks"].reshape(E, 2 * I, H // 2)
    t.update(changes)
    return {k: v for k, v in t.items() if v is not None}


def halves(rows):
    """[E, 2I, ...] with gate/up rows interleaved -> gate rows, then up rows."""
    return np.ascontiguousarray(np.concatenate([rows[:, 0::2], rows[:, 1::2]], axis=1))


def test_every_layout_gives_the_checkpoints_bits(gpt_oss):
    path, a = gpt_oss
    x = x_f32()
    ids, w = routing()
    h_blocks, h_scales = halves(a["w13_blocks"]), halves(a["w13_scales"])
    h_bias = halves(a["w13_bias"])
    per_expert = dict(
        w1_blocks=[h_blocks[e, :I] for e in range(E)],
        w1_scales=[h_scales[e, :I] for e in range(E)],
        w3_blocks=[h_blocks[e, I:] for e in range(E)],
        w3_scales=[h_scales[e, I:] for e in range(E)],
        w2_blocks=[a["w2_blocks"][e] for e in range(E)],
        w2_scales=[a["w2_scales"][e] for e in range(E)],
        w13_bias=h_bias, w2_bias=a["w2_bias"], router_weight=a["router_weight"],
        router_bias=a["router_bias"])
    layouts = {
        "interleaved": fused(a),
        "halves": dict(fused(a, w13_blocks=h_blocks, w13_scales=h_scales, w13_bias=h_bias),
                       gate_up="halves"),
        "per expert": per_expert,
    }
    model = mxmoe.Model(path)
    for backend in (None, "reference"):
        want = model.layer(0, backend=backend, threads=1)
        for name, tensors in layouts.items():
            layer = mxmoe.layer_from_tensors(family="gpt_oss", top_k=K, backend=backend,
                                             threads=1, **tensors)
            assert layer.backend == want.backend, name
            sizes = (layer.num_experts, layer.top_k, layer.hidden, layer.intermediate)
            assert sizes == (E, K, H, I)
            assert layer.index is None
            np.testing.assert_array_equal(layer.forward_routed(x, ids, w),
                                          want.forward_routed(x, ids, w), err_msg=name)
            np.testing.assert_array_equal(layer(x), want(x), err_msg=name)


def test_matches_a_float64_evaluation(gpt_oss):
    path, a = gpt_oss
    layer = mxmoe.layer_from_tensors(family="gpt_oss", top_k=K, backend="reference",
                                     activation="f32", **fused(a))
    x = x_f32(2)
    ids, w = routing(3)
    reference = load_layer(path, 0)
    assert relative_error(layer.forward_routed(x, ids, w),
                          evaluate(reference, x, "f32", (ids, w.astype(np.float64)))) < 1e-5
    assert relative_error(layer(x), evaluate(reference, x, "f32")) < 1e-5


def test_reads_numpy_arrays_in_place_while_its_backend_needs_them(gpt_oss):
    _, a = gpt_oss
    mine = {k: v.copy() for k, v in fused(a).items()}
    layer = mxmoe.layer_from_tensors(family="gpt_oss", top_k=K, backend="reference", **mine)
    assert layer.reads_source_weights
    x = x_f32(4)
    ids, w = routing(5)
    before = layer.forward_routed(x, ids, w)
    mine["w2_scales"][...] += 1  # every down-projection weight doubles, in the caller's memory
    after = layer.forward_routed(x, ids, w)
    assert not np.array_equal(after, before)
    fresh = mxmoe.layer_from_tensors(family="gpt_oss", top_k=K, backend="reference",
                                     **{k: v.copy() for k, v in mine.items()})
    np.testing.assert_array_equal(after, fresh.forward_routed(x, ids, w))
    # The layer keeps the arrays alive: dropping the caller's names frees nothing.
    ref = weakref.ref(mine["w13_blocks"])
    del mine
    gc.collect()
    assert ref() is not None
    del layer
    gc.collect()
    assert ref() is None


@needs_torch
def test_torch_uint8_tensors_are_read_without_a_copy(gpt_oss):
    _, a = gpt_oss
    tensors = {k: torch.from_numpy(v.copy()) for k, v in fused(a).items()}
    layer = mxmoe.layer_from_tensors(family="gpt_oss", top_k=K, backend="reference", **tensors)
    x = torch.from_numpy(x_f32(6))
    ids, w = (torch.from_numpy(v) for v in routing(7))
    before = layer.forward_routed(x, ids, w)
    assert isinstance(before, torch.Tensor)
    tensors["w13_scales"].sub_(1)  # the first projection's weights halve, in the tensor itself
    after = layer.forward_routed(x, ids, w)
    assert not torch.equal(after, before)
    fresh = mxmoe.layer_from_tensors(family="gpt_oss", top_k=K, backend="reference",
                                     **{k: v.clone() for k, v in tensors.items()})
    assert torch.equal(after, fresh.forward_routed(x, ids, w))


@needs_torch
def test_tensors_given_other_memory_keep_the_layers_bytes_alive(gpt_oss):
    """Issue 38: the layer held the tensor objects, not their memory. `t.set_(...)` and
    `t.data = other` (an engine's process_weights_after_loading) freed the bytes it read: a
    SIGSEGV for large tensors, another answer for small ones. It holds the storages now."""
    _, a = gpt_oss
    tensors = {k: torch.tensor(v) for k, v in fused(a).items()}  # torch's own memory
    layer = mxmoe.layer_from_tensors(family="gpt_oss", top_k=K, backend="reference", **tensors)
    x = x_f32(10)
    ids, w = routing(11)
    before = layer.forward_routed(x, ids, w)
    for name, t in tensors.items():
        if name in ("w13_blocks", "w2_scales", "router_weight"):
            t.data = torch.full_like(t, 0x7F)
        else:
            t.set_(torch.full_like(t, 0x7F))
    junk = [torch.full_like(t, 0x7F) for t in tensors.values() for _ in range(4)]  # reuses freed
    gc.collect()
    np.testing.assert_array_equal(layer.forward_routed(x, ids, w), before)
    del junk


@needs_torch
def test_memory_reallocated_under_the_layer_is_refused_by_name(gpt_oss):
    _, a = gpt_oss
    tensors = {k: torch.tensor(v) for k, v in fused(a).items()}
    layer = mxmoe.layer_from_tensors(family="gpt_oss", top_k=K, backend="reference", **tensors)
    x = x_f32(12)
    ids, w = routing(13)
    before = layer.forward_routed(x, ids, w)
    tensors["w2_scales"].resize_(1 << 20)  # the storage itself grows: reallocated
    with pytest.raises(RuntimeError, match="w2_scales: the array's memory was reallocated"):
        layer.forward_routed(x, ids, w)
    with pytest.raises(RuntimeError, match="w2_scales"):
        layer(x)

    mine = {k: v.copy() for k, v in fused(a).items()}
    layer = mxmoe.layer_from_tensors(family="gpt_oss", top_k=K, backend="reference", **mine)
    np.testing.assert_array_equal(layer.forward_routed(x, ids, w), before)
    mine["w13_bias"].resize((1 << 20,), refcheck=False)
    with pytest.raises(RuntimeError, match="w13_bias: the array's memory was reallocated"):
        layer.forward_routed(x, ids, w)


@needs_torch
def test_a_packing_backend_holds_no_reference_to_the_tensors(gpt_oss):
    _, a = gpt_oss
    tensors = {k: torch.from_numpy(v.copy()) for k, v in fused(a).items()}
    layer = mxmoe.layer_from_tensors(family="gpt_oss", top_k=K, **tensors)
    if layer.reads_source_weights:
        pytest.skip(f"the oracle chose {layer.backend}, which computes from the views")
    x = x_f32(8)
    ids, w = routing(9)
    before = layer.forward_routed(x, ids, w)
    refs = [weakref.ref(t) for t in tensors.values()]
    for t in tensors.values():
        t.fill_(0xFF)  # NaN scales (and biases of 255), had they been read
    np.testing.assert_array_equal(layer.forward_routed(x, ids, w), before)
    del tensors, t
    gc.collect()
    assert all(r() is None for r in refs)  # the engine's copy is gone
    np.testing.assert_array_equal(layer.forward_routed(x, ids, w), before)


@needs_torch
def test_bf16_torch_tensors(gpt_oss):
    path, a = gpt_oss
    # Biases and router in bfloat16 (their float32 values rounded), x and y in bfloat16.
    dense = ("w13_bias", "w2_bias", "router_weight", "router_bias")
    bf = {k: torch.from_numpy(v.copy()) for k, v in fused(a).items()}
    for k in dense:
        bf[k] = bf[k].to(torch.bfloat16)
    rounded = {k: (v.to(torch.float32).numpy() if k in dense else v.numpy()) for k, v in bf.items()}
    layer = mxmoe.layer_from_tensors(family="gpt_oss", top_k=K, backend="reference", **bf)
    same = mxmoe.layer_from_tensors(family="gpt_oss", top_k=K, backend="reference", **rounded)
    x = torch.from_numpy(x_f32(10)).to(torch.bfloat16)
    ids, w = routing(11)
    ids64 = torch.from_numpy(ids.astype(np.int64))
    y = layer.forward_routed(x, ids64, torch.from_numpy(w))
    assert y.dtype == torch.bfloat16 and y.shape == (TOKENS, H)
    assert torch.equal(y, same.forward_routed(x, ids64, torch.from_numpy(w)))
    assert torch.equal(layer(x), same(x))


def test_without_a_router_only_forward_routed_runs(gpt_oss):
    _, a = gpt_oss
    layer = mxmoe.Layer.from_tensors(family="gpt_oss", top_k=K,
                                     **fused(a, router_weight=None, router_bias=None))
    x = x_f32()
    with pytest.raises(ValueError, match="has no router weights: pass the routing .*use forward_routed in Python and C"):
        layer(x)
    ids, w = routing()
    assert np.isfinite(layer.forward_routed(x, ids, w)).all()


def test_errors_name_the_tensor(gpt_oss):
    _, a = gpt_oss

    def make(**changes):
        return mxmoe.layer_from_tensors(family="gpt_oss", top_k=K, backend="reference",
                                        **fused(a, **changes))

    with pytest.raises(ValueError,
                       match=r"w13_scales has shape \[8, 192, 4\], expected \[8, 192, 2\]"):
        make(w13_scales=np.zeros((E, 2 * I, H // 16), np.uint8))
    with pytest.raises(ValueError, match=r"w2_blocks has shape \[7, 64, 48\]"):
        make(w2_blocks=a["w2_blocks"][:7].reshape(7, H, I // 2).copy())
    with pytest.raises(ValueError, match="hidden = 48 must be a positive multiple of 32"):
        make(w13_blocks=np.zeros((E, 2 * I, 24), np.uint8),
             w13_scales=np.zeros((E, 2 * I, 1), np.uint8))
    scales = a["w13_scales"].copy()
    scales[3, 17, 1] = 0xFF
    with pytest.raises(ValueError,
                       match="w13_scales has the NaN scale 0xFF at expert 3, row 17, block 1"):
        make(w13_scales=scales)
    bias = a["w2_bias"].copy()
    bias[5, 9] = np.nan
    with pytest.raises(ValueError, match="w2_bias holds NaN or Inf at row 5, column 9"):
        make(w2_bias=bias)
    with pytest.raises(ValueError, match=r"top_k = 9 must be in \[1, num_experts = 8\]"):
        mxmoe.layer_from_tensors(family="gpt_oss", top_k=9, **fused(a))
    with pytest.raises(ValueError, match="w13_bias is missing"):
        make(w13_bias=None)
    with pytest.raises(ValueError, match="family: unknown"):
        mxmoe.layer_from_tensors(family="llama", top_k=K, **fused(a))
    with pytest.raises(ValueError, match="alpha applies to the swiglu_oai activation only"):
        mxmoe.layer_from_tensors(family="mixtral", top_k=K, alpha=1.5, **fused(a))
    with pytest.raises(ValueError, match="C-contiguous"):
        make(w2_bias=np.asfortranarray(np.repeat(a["w2_bias"][:, :1], H, axis=1)))
    with pytest.raises(TypeError, match="w2_blocks: expected a uint8 array"):
        make(w2_blocks=a["w2_blocks"].astype(np.int8))
    with pytest.raises(TypeError,
                       match="w2_bias: expected a float32 or bfloat16 array, got float64"):
        make(w2_bias=a["w2_bias"].astype(np.float64))
    with pytest.raises(TypeError, match="w1_blocks: expected a list of per-expert arrays"):
        mxmoe.layer_from_tensors(family="gpt_oss", top_k=K, w1_blocks=a["w13_blocks"])
    with pytest.raises(mxmoe.NoBackendError) as e:
        make(exclude=mxmoe.backends())
    assert "user_excluded" in str(e.value)


def test_an_output_over_the_weights_the_layer_reads_is_refused(gpt_oss):
    """Issue 38: `layer(x, out=w2_bias)` on a layer reading its arrays in place was accepted;
    the first answer was right, every later one silently wrong."""
    _, a = gpt_oss
    mine = {k: v.copy() for k, v in fused(a).items()}
    layer = mxmoe.layer_from_tensors(family="gpt_oss", top_k=K, backend="reference", **mine)
    x = x_f32(14)
    ids, w = routing(15)
    expected = layer(x)
    bias = mine["w2_bias"]  # [E, H] float32: TOKENS rows of it fit an output
    kept = bias.copy()
    with pytest.raises(ValueError, match="out: overlaps w2 bias"):
        layer(x, out=bias[1:1 + TOKENS])
    with pytest.raises(ValueError, match="out: overlaps w2 bias"):
        layer.forward_routed(x, ids, w, out=bias[:TOKENS])
    np.testing.assert_array_equal(bias, kept)
    np.testing.assert_array_equal(layer(x), expected)
    # A layer that packed its own copy reads the arrays no more: they may take its output.
    packed = mxmoe.layer_from_tensors(family="gpt_oss", top_k=K, **mine)
    if not packed.reads_source_weights:
        np.testing.assert_array_equal(packed(x, out=bias[:TOKENS]), packed(x))


@needs_torch
@pytest.mark.skipif(torch is None or not hasattr(torch, "float8_e8m0fnu"),
                    reason="this torch has no float8_e8m0fnu")
def test_float8_e8m0fnu_scales_are_read_as_their_bytes(gpt_oss):
    """Issue 38: a torch float8_e8m0fnu scale tensor (how engines hold E8M0 scales) was
    refused as "dtype code 14"; it is the scale's byte, read as it is."""
    _, a = gpt_oss
    tensors = {k: torch.from_numpy(v.copy()) for k, v in fused(a).items()}
    expected = mxmoe.layer_from_tensors(family="gpt_oss", top_k=K, backend="reference",
                                        **tensors)(x_f32(16))
    e8m0 = dict(tensors, w13_scales=tensors["w13_scales"].view(torch.float8_e8m0fnu),
                w2_scales=tensors["w2_scales"].view(torch.float8_e8m0fnu))
    layer = mxmoe.layer_from_tensors(family="gpt_oss", top_k=K, backend="reference", **e8m0)
    np.testing.assert_array_equal(layer(x_f32(16)), expected)
    # Blocks are not scales: named by their dtype, not a code.
    with pytest.raises(TypeError, match="w13_blocks: expected a uint8 array.*got float8_e8m0fnu"):
        mxmoe.layer_from_tensors(family="gpt_oss", top_k=K, backend="reference",
                                 **dict(e8m0, w13_blocks=tensors["w13_blocks"].view(
                                     torch.float8_e8m0fnu)))
