"""The plugin's load-time checks without an engine: what vLLM hands it at
process_weights_after_loading, made wrong in each way an engine could, fails at load with a
message naming the problem (never at the first token, never a wrong answer); right, it gives
mxmoe's layer, whose output equals mxmoe's on the same bytes loaded from a checkpoint."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

import mxmoe
import mxmoe_vllm
from vllm.model_executor.layers.fused_moe.activation import MoEActivation
from vllm.model_executor.layers.fused_moe.config import RoutingMethodType

E, H, I, K = 4, 64, 32, 2


def _experts(routing=RoutingMethodType.Renormalize, activation=MoEActivation.SWIGLUOAI):
    config = SimpleNamespace(activation=activation, routing_method=routing, experts_per_token=K,
                             moe_parallel_config=SimpleNamespace(use_ep=False))
    quant = SimpleNamespace(gemm1_alpha=1.702, gemm1_clamp_limit=7.0, gemm1_beta=1.0)
    return SimpleNamespace(moe_config=config, quant_config=quant)


def _layer(**override):
    rng = np.random.default_rng(0)
    w13 = rng.standard_normal((E, 2 * I, H), dtype=np.float32) / 8
    w2 = rng.standard_normal((E, H, I), dtype=np.float32) / 6
    b13, s13 = mxmoe.quantize_mxfp4(w13)
    b2, s2 = mxmoe.quantize_mxfp4(w2)
    tensors = dict(
        w13_weight=torch.from_numpy(b13.reshape(E, 2 * I, H // 2)),
        w2_weight=torch.from_numpy(b2.reshape(E, H, I // 2)),
        w13_weight_scale=torch.from_numpy(s13), w2_weight_scale=torch.from_numpy(s2),
        w13_bias=torch.from_numpy(rng.standard_normal((E, 2 * I), dtype=np.float32) / 10),
        w2_bias=torch.from_numpy(rng.standard_normal((E, H), dtype=np.float32) / 10))
    tensors.update(override)
    return SimpleNamespace(**{k: torch.nn.Parameter(v, requires_grad=False) if v is not None
                              else None for k, v in tensors.items()})


def test_a_right_layer_binds_and_computes():
    experts, layer = _experts(), _layer()
    source = layer.w13_weight.data.clone()
    mxmoe_vllm._process_weights_after_loading(experts, layer)
    mx = experts._mxmoe_layer
    assert (mx.num_experts, mx.hidden, mx.intermediate, mx.top_k) == (E, H, I, K)
    x = torch.randn(3, H).to(torch.bfloat16)
    ids = torch.tensor([[0, 1], [2, 3], [3, 0]], dtype=torch.int32)
    w = torch.tensor([[0.75, 0.25], [0.5, 0.5], [0.9, 0.1]], dtype=torch.float32)
    out = torch.empty(3, H, dtype=torch.bfloat16)
    mxmoe_vllm._apply(experts, out, x, None, None, w, ids, None, E, None, None, None, None,
                      None, None, False)
    assert torch.isfinite(out.float()).all() and out.float().abs().max() > 0
    if not mx.reads_source_weights:  # vLLM's copy released once mxmoe packed its own
        assert layer.w13_weight.shape == source.shape  # the shape vLLM reads sizes from
        assert layer.w13_weight.untyped_storage().nbytes() == 1
    else:
        assert torch.equal(layer.w13_weight.data, source)


@pytest.mark.parametrize("name,value,match", [
    ("w13_weight", torch.zeros(E, 2 * I, H // 2, dtype=torch.bfloat16), "w13"),
    ("w2_weight", torch.zeros(E, H, I // 4, dtype=torch.uint8), "w2"),
    ("w13_weight_scale", torch.full((E, 2 * I, H // 32), 255, dtype=torch.uint8), "scale"),
    ("w2_bias", torch.full((E, H), float("nan")), "bias"),
])
def test_wrong_tensors_fail_at_load_naming_them(name, value, match):
    with pytest.raises((ValueError, TypeError), match=match):
        mxmoe_vllm._process_weights_after_loading(_experts(), _layer(**{name: value}))


def test_a_router_the_cpu_path_misreads_is_refused():
    with pytest.raises(ValueError, match="softmax"):
        mxmoe_vllm._process_weights_after_loading(
            _experts(routing=RoutingMethodType.DeepSeekV3), _layer())


def test_an_activation_the_plugin_does_not_map_is_refused():
    with pytest.raises(ValueError, match="activation"):
        mxmoe_vllm._process_weights_after_loading(
            _experts(activation=MoEActivation.GELU), _layer())


def test_register_patches_only_what_exists(monkeypatch):
    from vllm.model_executor.layers.fused_moe.experts import cpu_moe

    mxmoe_vllm.register()
    assert cpu_moe.CPUExpertsMxfp4._mxmoe_patched
    assert cpu_moe.CPUExpertsMxfp4._supports_current_device() is True
    mxmoe_vllm.register()  # idempotent
    assert cpu_moe.prepare_mxfp4_moe_layer_for_cpu is mxmoe_vllm._keep_weights


def test_batch_invariant_request_gives_the_same_bits_alone_and_in_a_batch(monkeypatch):
    """VLLM_BATCH_INVARIANT=1 becomes mxmoe's batch-invariant request: a token's output rows
    are the same bits alone and among five others."""
    import vllm.envs as envs

    monkeypatch.setattr(envs, "VLLM_BATCH_INVARIANT", True, raising=False)
    experts = _experts()
    mxmoe_vllm._process_weights_after_loading(experts, _layer())
    assert experts._mxmoe_layer.batch_invariant
    g = torch.Generator().manual_seed(4)
    x = torch.randn(6, H, generator=g).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(6)]).to(torch.int32)
    w = torch.softmax(torch.randn(6, K, generator=g), -1)

    def run(rows):
        out = torch.empty(len(rows), H, dtype=torch.bfloat16)
        mxmoe_vllm._apply(experts, out, x[rows].contiguous(), None, None, w[rows].contiguous(),
                          ids[rows].contiguous(), None, E, None, None, None, None, None, None,
                          False)
        return out

    batch = run(list(range(6)))
    for t in range(6):
        assert torch.equal(run([t])[0].view(torch.int16), batch[t].view(torch.int16))


def test_a_timer_counts_rows_and_never_fails_the_call(tmp_path, monkeypatch):
    """MXMOE_VLLM_DENSE_TIMES' wrapper (the one of MXMOE_VLLM_MOE_TIMES too): a timed call
    returns what the call returns, its rows (positional or keyword, any leading dimensions)
    are counted and read back by read_times; a call whose rows cannot be read stops the timing,
    logged, and still returns its result."""
    path = str(tmp_path / "dense")
    monkeypatch.setenv("MXMOE_VLLM_DENSE_TIMES", path)
    errors = []
    monkeypatch.setattr(mxmoe_vllm.logger, "error", lambda *args: errors.append(args))
    owner = SimpleNamespace(gemm=lambda layer, x, weight, bias=None: ("out", x))
    mxmoe_vllm._time_calls("MXMOE_VLLM_DENSE_TIMES", owner, "gemm", "x", 1)
    timed = owner.gemm
    mxmoe_vllm._time_calls("MXMOE_VLLM_DENSE_TIMES", owner, "gemm", "x", 1)
    assert owner.gemm is timed  # wrapped once
    x = torch.ones(5, 4)
    assert owner.gemm(None, x, None)[1] is x
    assert owner.gemm(None, x=torch.ones(2, 3, 4), weight=None)[0] == "out"
    totals = mxmoe_vllm.read_times(path)
    assert totals["calls"] == 2 and totals["tokens"] == 11 and totals["seconds"] > 0, totals
    assert not errors
    assert owner.gemm(None, "no rows", None) == ("out", "no rows")
    assert len(errors) == 1 and "MXMOE_VLLM_DENSE_TIMES" in errors[0]
    owner.gemm(None, x, None)
    assert mxmoe_vllm.read_times(path) == totals  # no longer counted


def test_a_timer_counts_the_calls_of_a_forked_process_once(tmp_path, monkeypatch):
    """vLLM runs its engine in processes forked after register(): a child's timed calls reach
    read_times through its own file and writer thread, counted from zero (the parent's calls
    before the fork are the parent's only), though the lock was held in the parent at the fork
    (the writer's or a caller's); a child that times nothing writes no file."""
    import os
    import signal
    import time

    path = str(tmp_path / "dense")
    monkeypatch.setenv("MXMOE_VLLM_DENSE_TIMES", path)
    owner = SimpleNamespace(gemm=lambda layer, x, weight, bias=None: x)
    mxmoe_vllm._time_calls("MXMOE_VLLM_DENSE_TIMES", owner, "gemm", "x", 1)
    owner.gemm(None, torch.ones(5, 4), None)
    assert mxmoe_vllm.read_times(path)["tokens"] == 5
    times = owner.gemm.__closure__  # the timer, found through the wrapper's cells
    timer = next(c.cell_contents for c in times if isinstance(c.cell_contents, mxmoe_vllm._ApplyTimes))
    with timer._lock:  # held across the fork, as a writer thread may hold it
        pid = os.fork()
    if pid == 0:  # the child: three calls of 2 rows, then wait for its file
        code = 1
        signal.alarm(20)  # a hang (a held lock) ends the child, failing the test
        try:
            for _ in range(3):
                owner.gemm(None, torch.ones(2, 4), None)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and code:
                try:
                    with open(f"{path}.{os.getpid()}.json", encoding="utf-8") as f:
                        code = 0 if '"calls": 3' in f.read() else 1
                except OSError:
                    pass
                time.sleep(0.05)
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    totals = mxmoe_vllm.read_times(path)
    assert totals["calls"] == 4 and totals["tokens"] == 11, totals
    idle = os.fork()  # a child that times nothing writes nothing
    if idle == 0:
        time.sleep(0.5)
        os._exit(0)
    os.waitpid(idle, 0)
    files = sorted(p.name for p in tmp_path.glob("dense.*.json"))
    assert files == sorted(f"dense.{p}.json" for p in (os.getpid(), pid)), files


def test_a_timer_inside_torch_compile_is_left_out_of_the_graph(tmp_path, monkeypatch):
    """vLLM compiles the model's forward unless told to run eager: the dense timer's wrapper
    sits inside it. Traced with fullgraph=True (any graph break an error), the wrapped call
    compiles, computes what it computes, and only eager calls are counted."""
    path = str(tmp_path / "dense")
    monkeypatch.setenv("MXMOE_VLLM_DENSE_TIMES", path)
    owner = SimpleNamespace(gemm=lambda layer, x, weight, bias=None: x @ weight)
    mxmoe_vllm._time_calls("MXMOE_VLLM_DENSE_TIMES", owner, "gemm", "x", 1)
    w = torch.randn(4, 3)

    def forward(x):
        return torch.relu(owner.gemm(None, x, w))

    compiled = torch.compile(forward, backend="eager", fullgraph=True)
    x = torch.randn(5, 4)
    assert torch.equal(compiled(x), torch.relu(x @ w))
    owner.gemm(None, x, w)  # eager: counted
    totals = mxmoe_vllm.read_times(path)
    assert totals["calls"] == 1 and totals["tokens"] == 5, totals
