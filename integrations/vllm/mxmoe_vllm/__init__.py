"""mxmoe-vllm: vLLM's MXFP4 MoE layers computed by mxmoe when vLLM runs on the CPU platform.

vLLM loads this through its ``vllm.general_plugins`` entry point in every process (main,
engine core, workers); :func:`register` then patches, on the CPU platform, five attributes of
vLLM's CPU MXFP4 experts (``vllm/model_executor/layers/fused_moe/experts/cpu_moe.py``), and on
every platform the error of vLLM's DeepSeek-V4 MXFP4 selector (below), and nothing else:

- ``CPUExpertsMxfp4._supports_current_device``: true on any x86 CPU, not only with AMX
  (mxmoe's oracle decides at load what runs, and says why when nothing does);
- ``CPUExpertsMxfp4._supports_batch_invariance``: true, since ``VLLM_BATCH_INVARIANT=1``
  becomes mxmoe's batch-invariant request;
- ``prepare_mxfp4_moe_layer_for_cpu``: the weights stay as loaded (no AMX repack: on a CPU
  without AMX that op cannot run);
- ``CPUExpertsMxfp4.process_weights_after_loading``: each MoE layer's MXFP4 tensors
  (``w13_weight`` [E, 2I, H/2] with gate/up rows interleaved, ``w2_weight`` [E, H, I/2], their
  E8M0 scales, fp32 biases, alpha and limit) become an mxmoe layer at load, and vLLM's copies
  are released when mxmoe packed its own;
- ``CPUExpertsMxfp4.apply``: the experts and the weighted combine, by mxmoe's
  ``forward_routed`` on vLLM's top-k ids and weights, into vLLM's output tensor.

``VLLM_BATCH_INVARIANT=1`` becomes mxmoe's batch-invariant request; when mxmoe's oracle finds
no backend, the exception raised at load carries every candidate and every reason. It also
makes the rest of vLLM's CPU engine batch invariant (:mod:`mxmoe_vllm.invariance`: the ops
vLLM would give to Triton, and the linear layers, computed row by row by mxmoe).
On every platform (CUDA, ROCm and XPU as well), and only that off the CPU, vLLM's DeepSeek-V4
MXFP4 backend selector's error is given the candidate backends and each one's reason, taken
from vLLM's own ``is_supported_config`` (:mod:`mxmoe_vllm.reasons`).
``MXMOE_VLLM=0`` turns the plugin off (vLLM's own path then runs). ``MXMOE_VLLM_MOE_TIMES=PATH``
(for bench/python/vllm_generate.py, with or without the plugin) times every call of the
experts' ``apply`` in the process that runs it and keeps the totals in ``PATH.<pid>.json``
(rewritten whole, at most every 0.1 s); ``MXMOE_VLLM_DENSE_TIMES=PATH`` does the same for
vLLM's ``cpu_unquantized_gemm``, which every linear layer and the LM head call on the CPU
(vLLM's kernels, or the plugin's under ``VLLM_BATCH_INVARIANT=1``); :func:`read_times` sums
them. Unset, nothing is wrapped. docs/VLLM.md has the rest.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from typing import Any, Optional

__all__ = ["TESTED_VLLM", "read_times", "register"]

# The vLLM version this plugin is tested with. Another version is patched only where every
# attribute it replaces exists (and a warning says it is untested); otherwise nothing is.
TESTED_VLLM = "0.32.0"

# Under vLLM's logger, so its handlers and level apply (vLLM configures "vllm" only).
logger = logging.getLogger("vllm.mxmoe_vllm")

_PATCHED = ("_supports_current_device", "_supports_batch_invariance",
            "process_weights_after_loading", "apply")
_logged_shapes: set = set()
_lock = threading.Lock()


def register() -> None:
    """vLLM's general-plugin hook (idempotent: vLLM may call it more than once)."""
    if os.environ.get("MXMOE_VLLM", "1") == "0":
        _time_experts_apply()  # vLLM's own path, timed when asked
        _time_dense()
        return
    import vllm  # noqa: PLC0415
    from vllm.platforms import current_platform  # noqa: PLC0415

    from . import reasons  # noqa: PLC0415

    reasons.register()  # on every platform: the DeepSeek-V4 selector's error names its reasons
    if not current_platform.is_cpu():
        return
    try:
        from vllm.model_executor.layers.fused_moe.experts import cpu_moe  # noqa: PLC0415
    except ImportError as error:
        logger.error("mxmoe-vllm: vLLM %s has no CPU MoE experts module (%s); nothing patched "
                     "(tested with %s)", vllm.__version__, error, TESTED_VLLM)
        return
    experts = getattr(cpu_moe, "CPUExpertsMxfp4", None)
    missing = [] if experts is not None else ["CPUExpertsMxfp4"]
    missing += [f"CPUExpertsMxfp4.{name}" for name in _PATCHED
                if experts is not None and not hasattr(experts, name)]
    if not hasattr(cpu_moe, "prepare_mxfp4_moe_layer_for_cpu"):
        missing.append("prepare_mxfp4_moe_layer_for_cpu")
    if missing:
        logger.error("mxmoe-vllm: vLLM %s lacks %s; nothing patched (tested with %s)",
                     vllm.__version__, ", ".join(missing), TESTED_VLLM)
        return
    with _lock:
        if getattr(experts, "_mxmoe_patched", False):
            return
        if vllm.__version__ != TESTED_VLLM:
            logger.warning("mxmoe-vllm: vLLM %s is untested (tested with %s); its CPU MXFP4 "
                           "MoE is patched since every attribute replaced exists",
                           vllm.__version__, TESTED_VLLM)
        import mxmoe  # noqa: PLC0415,F401  (fail here, at start-up, when it is missing)

        experts._supports_current_device = staticmethod(_supports_current_device)
        # mxmoe's oracle honours VLLM_BATCH_INVARIANT (the request is passed at load), or the
        # load fails saying why no backend is batch invariant.
        experts._supports_batch_invariance = staticmethod(lambda: True)
        experts.process_weights_after_loading = _process_weights_after_loading
        experts.apply = _apply
        cpu_moe.prepare_mxfp4_moe_layer_for_cpu = _keep_weights
        experts._mxmoe_patched = True
    import vllm.envs as envs  # noqa: PLC0415

    if envs.VLLM_BATCH_INVARIANT:
        from . import invariance  # noqa: PLC0415

        invariance.install()  # the rest of the engine's rows made independent
    _time_experts_apply()
    _time_dense()


class _ApplyTimes:
    """The totals of the timed calls of this process, written to PATH.<pid>.json by a daemon
    thread (started at the first call) whenever they changed (at most every 0.1 s), so a
    benchmark in another process reads them between its timed regions (:func:`read_times`)
    without stopping the engine. VARIABLE names the environment variable that asked for them,
    in its error messages.

    A process forked after the timer was made (vLLM's engine processes, a multiprocessing
    worker) has none of the parent's threads and may hold a copy of its lock taken: the child
    starts its own totals at zero, with a new lock, and its first timed call its own file (its
    pid) and writer thread, so read_times sums every process once; a child that times nothing
    writes nothing."""

    def __init__(self, path: str, variable: str):
        self._base = path
        self.variable = variable
        self.dropped = False
        self._reset()
        _timers.add(self)

    def _reset(self) -> None:
        self.path = f"{self._base}.{os.getpid()}.json"
        self._lock = threading.Lock()
        self.calls = 0
        self.tokens = 0
        self.seconds = 0.0
        self._written = -1
        self._writer: threading.Thread | None = None

    def add(self, tokens: int, seconds: float) -> None:
        with self._lock:
            self.calls += 1
            self.tokens += tokens
            self.seconds += seconds
            if self._writer is None:
                self._writer = threading.Thread(target=self._write_loop, name="mxmoe-vllm-times",
                                                daemon=True)
                self._writer.start()

    def drop(self, error: BaseException) -> None:
        """The timing stops (the engine goes on): a call whose rows could not be read."""
        if not self.dropped:
            self.dropped = True
            logger.error("mxmoe-vllm: %s: %r; these times are no longer kept", self.variable,
                         error)

    def _write_loop(self) -> None:
        import json  # noqa: PLC0415
        import time  # noqa: PLC0415

        while not self.dropped:
            time.sleep(0.1)
            with self._lock:
                if self.calls == self._written:
                    continue
                self._written = self.calls
                text = json.dumps({"pid": os.getpid(), "calls": self.calls,
                                   "tokens": self.tokens, "seconds": self.seconds})
            tmp = f"{self.path}.tmp"
            try:
                with open(tmp, "w", encoding="utf-8") as f:
                    f.write(text)
                os.replace(tmp, self.path)
            except OSError as error:  # the engine goes on; only the timing is lost
                self.dropped = True
                logger.error("mxmoe-vllm: %s: cannot write %s (%s); these times are no longer "
                             "kept", self.variable, self.path, error)


# Every live timer of this process, restarted in a forked child by one at-fork hook (a timer
# that is gone leaves nothing behind).
_timers: "weakref.WeakSet[_ApplyTimes]" = weakref.WeakSet()


def _reset_timers_in_child() -> None:
    for timer in list(_timers):
        timer._reset()  # noqa: SLF001


os.register_at_fork(after_in_child=_reset_timers_in_child)


def _time_calls(variable: str, owner: Any, attribute: str, rows_name: str,
                rows_index: int) -> None:
    """With VARIABLE=PATH in the environment, wraps OWNER.ATTRIBUTE (a class's method or a
    module's function) in a timer kept by :class:`_ApplyTimes`; a call's tokens are the rows
    of its argument ROWS_NAME (positional ROWS_INDEX). Without VARIABLE nothing is wrapped."""
    path = os.environ.get(variable)
    marker = f"_mxmoe_timed_{attribute}"
    if not path or owner is None or getattr(owner, marker, False):
        return
    import time  # noqa: PLC0415

    times = _ApplyTimes(path, variable)
    inner = getattr(owner, attribute)

    def timed(*args, **kwargs):
        # Inside a torch.compile trace (vLLM's compiled mode) a wall clock means nothing and
        # would break the graph: the call is left as it is, untimed (the bench runs eager).
        if _compiling():
            return inner(*args, **kwargs)
        t0 = time.perf_counter()
        result = inner(*args, **kwargs)
        seconds = time.perf_counter() - t0
        if not times.dropped:
            try:
                x = kwargs[rows_name] if rows_name in kwargs else args[rows_index]
                times.add(x.numel() // max(int(x.shape[-1]), 1), seconds)
            except Exception as error:  # noqa: BLE001  (the timer never fails the engine)
                times.drop(error)
        return result

    setattr(owner, attribute, timed)
    setattr(owner, marker, True)


def _compiling() -> bool:
    """Whether torch.compile is tracing the caller (False where torch cannot say)."""
    try:
        import torch  # noqa: PLC0415

        return bool(torch.compiler.is_compiling())
    except (ImportError, AttributeError):
        return False


def _time_experts_apply() -> None:
    """With MXMOE_VLLM_MOE_TIMES=PATH, wraps the experts' ``apply`` (mxmoe's or vLLM's own) in
    a timer: the MoE share of a step inside the running engine."""
    if not os.environ.get("MXMOE_VLLM_MOE_TIMES"):
        return
    from vllm.platforms import current_platform  # noqa: PLC0415

    if not current_platform.is_cpu():
        return
    try:
        from vllm.model_executor.layers.fused_moe.experts import cpu_moe  # noqa: PLC0415
    except ImportError:
        return
    # apply(self, output, hidden_states, ...): the tokens are hidden_states' rows.
    _time_calls("MXMOE_VLLM_MOE_TIMES", getattr(cpu_moe, "CPUExpertsMxfp4", None), "apply",
                "hidden_states", 2)


def _time_dense() -> None:
    """With MXMOE_VLLM_DENSE_TIMES=PATH, wraps vLLM's ``cpu_unquantized_gemm``
    (``vllm/model_executor/layers/utils.py``) in a timer: every unquantized matmul of vLLM's
    CPU engine calls it (``layer.cpu_linear(x, weight, bias)``): the linear layers (gpt-oss's
    QKV and output projections and router, through ``UnquantizedLinearMethod.apply``) and the
    LM head (``UnquantizedEmbeddingMethod.apply``), whether ``cpu_linear`` is vLLM's (oneDNN,
    the sgl kernel, F.linear) or, under ``VLLM_BATCH_INVARIANT=1``, the plugin's mxmoe dense
    layer (:mod:`mxmoe_vllm.invariance`), so one timer counts both modes alike. Installed
    before the model is built: ``UnquantizedLinearMethod`` takes the function at construction."""
    if not os.environ.get("MXMOE_VLLM_DENSE_TIMES"):
        return
    from vllm.platforms import current_platform  # noqa: PLC0415

    if not current_platform.is_cpu():
        return
    from vllm.model_executor.layers import utils  # noqa: PLC0415

    if not hasattr(utils, "cpu_unquantized_gemm"):
        logger.error("mxmoe-vllm: MXMOE_VLLM_DENSE_TIMES: this vLLM has no "
                     "layers.utils.cpu_unquantized_gemm; the dense matmuls are not timed")
        return
    # cpu_unquantized_gemm(layer, x, weight, bias): the tokens are x's rows.
    _time_calls("MXMOE_VLLM_DENSE_TIMES", utils, "cpu_unquantized_gemm", "x", 1)


def read_times(path: str, settle_s: float = 0.2, limit_s: float = 5.0) -> dict:
    """The totals of MXMOE_VLLM_MOE_TIMES=PATH or MXMOE_VLLM_DENSE_TIMES=PATH over every engine
    process ({"calls", "tokens", "seconds"}), read when two reads SETTLE_S apart agree (the
    files are rewritten within 0.1 s of a change; at most LIMIT_S of waiting): for a benchmark
    or a test between its engine's calls."""
    import glob  # noqa: PLC0415
    import json  # noqa: PLC0415
    import time  # noqa: PLC0415

    def totals() -> dict:
        total = {"calls": 0, "tokens": 0, "seconds": 0.0}
        for name in sorted(glob.glob(f"{glob.escape(path)}.*.json")):
            try:
                with open(name, encoding="utf-8") as f:
                    one = json.load(f)
            except (OSError, ValueError):
                continue
            for key in total:
                total[key] += one[key]
        return total

    deadline = time.monotonic() + limit_s
    last = totals()
    while True:
        time.sleep(settle_s)
        now = totals()
        if now == last or time.monotonic() > deadline:
            return now
        last = now


def _supports_current_device() -> bool:
    from vllm.platforms import CpuArchEnum, current_platform  # noqa: PLC0415

    return current_platform.is_cpu() and current_platform.get_cpu_architecture() == CpuArchEnum.X86


def _keep_weights(w13, w2, w13_scale, w2_scale):
    """In place of vLLM's AMX repack: the tensors as loaded, which mxmoe reads at load."""
    return w13, w2, w13_scale, w2_scale


def _family(moe_config) -> str:
    """The mxmoe family whose expert math vLLM's layer computes."""
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation  # noqa: PLC0415

    activation = moe_config.activation
    if activation == MoEActivation.SWIGLUOAI:
        return "gpt_oss"
    raise ValueError(
        f"mxmoe-vllm: MoE activation {activation} is not one this plugin maps to mxmoe (gpt-oss's "
        "SWIGLUOAI is); vLLM's model is not one the plugin was tested with")


def _check_routing(moe_config) -> None:
    """vLLM's CPU path routes before the experts; mxmoe receives its ids and weights. Only
    routing whose meaning vLLM's CPU router computes is accepted."""
    from vllm.model_executor.layers.fused_moe.config import RoutingMethodType  # noqa: PLC0415

    method = moe_config.routing_method
    accepted = {RoutingMethodType.Default, RoutingMethodType.Renormalize,
                RoutingMethodType.RenormalizeNaive}
    if method not in accepted:
        raise ValueError(
            f"mxmoe-vllm: routing method {method!r}: vLLM's CPU router scores with softmax, which "
            "is not what a sigmoid or sqrt(softplus) router means (DeepSeek-V3/V4); refused "
            "rather than computing with the wrong experts")


def _tensor(layer, name: str, required: bool = True):
    value = getattr(layer, name, None)
    if value is None:
        if required:
            raise ValueError(f"mxmoe-vllm: the MoE layer has no {name}")
        return None
    return value.data if hasattr(value, "data") else value


def _process_weights_after_loading(self, layer) -> None:
    """Binds an mxmoe layer to vLLM's loaded MXFP4 tensors (errors here fail vLLM's load, with
    mxmoe's message), then releases vLLM's copies where mxmoe packed its own."""
    import torch  # noqa: PLC0415
    import vllm.envs as envs  # noqa: PLC0415

    import mxmoe  # noqa: PLC0415

    config = self.moe_config
    _check_routing(config)
    if getattr(config.moe_parallel_config, "use_ep", False):
        raise ValueError("mxmoe-vllm: vLLM's expert parallelism is not supported by the plugin "
                         "(use mxmoe's own under mpirun, docs/DISTRIBUTED.md)")
    if getattr(self.quant_config, "gemm1_beta", None) not in (None, 1.0):
        raise ValueError(f"mxmoe-vllm: SwiGLU beta {self.quant_config.gemm1_beta}: mxmoe's "
                         "gpt-oss activation adds 1 to the up projection")
    tensors = {name: _tensor(layer, name) for name in
               ("w13_weight", "w2_weight", "w13_weight_scale", "w2_weight_scale")}
    for name in ("w13_bias", "w2_bias"):
        tensors[name] = _tensor(layer, name, required=False)
    for name, t in tensors.items():
        if t is not None and t.device.type != "cpu":
            raise ValueError(f"mxmoe-vllm: {name} is on {t.device}; mxmoe computes on the CPU")
    alpha = getattr(self.quant_config, "gemm1_alpha", None)
    limit = getattr(self.quant_config, "gemm1_clamp_limit", None)
    mx = mxmoe.layer_from_tensors(
        family=_family(config), top_k=int(config.experts_per_token),
        w13_blocks=tensors["w13_weight"], w13_scales=tensors["w13_weight_scale"],
        w2_blocks=tensors["w2_weight"], w2_scales=tensors["w2_weight_scale"],
        w13_bias=tensors["w13_bias"], w2_bias=tensors["w2_bias"], gate_up="interleaved",
        alpha=alpha, limit=limit, batch_invariant=bool(envs.VLLM_BATCH_INVARIANT),
        threads=torch.get_num_threads())
    self._mxmoe_layer = mx
    shape = (mx.num_experts, mx.hidden, mx.intermediate, mx.top_k, mx.backend)
    with _lock:
        if shape not in _logged_shapes:
            _logged_shapes.add(shape)
            logger.info("mxmoe-vllm: MoE layers E=%d H=%d I=%d top-%d run on mxmoe's %s "
                        "(%s activations%s): %s", mx.num_experts, mx.hidden, mx.intermediate,
                        mx.top_k, mx.backend, mx.activation,
                        ", batch invariant" if mx.batch_invariant else "", mx.selection["why"])
    if not mx.reads_source_weights:
        # vLLM's copies are released; what stays is their shape (vLLM's modular kernel reads
        # the problem size from it), a stride-0 view of one byte.
        one = torch.zeros(1, dtype=torch.uint8)
        for name in ("w13_weight", "w2_weight", "w13_weight_scale", "w2_weight_scale"):
            shape = tensors[name].shape
            setattr(layer, name, torch.nn.Parameter(one.expand(*shape), requires_grad=False))


def _apply(self, output, hidden_states, w1, w2, topk_weights, topk_ids, activation,
           global_num_experts, expert_map, a1q_scale, a2_scale, workspace13, workspace2,
           expert_tokens_meta, apply_router_weight_on_input) -> None:
    mx: Optional[Any] = getattr(self, "_mxmoe_layer", None)
    if mx is None:
        raise RuntimeError("mxmoe-vllm: this MoE layer was not bound at load")
    if apply_router_weight_on_input:
        raise NotImplementedError("mxmoe-vllm: apply_router_weight_on_input=True is not "
                                  "supported (the weights multiply the experts' outputs)")
    if expert_map is not None:
        raise NotImplementedError("mxmoe-vllm: expert maps (vLLM expert parallelism)")
    mx.forward_routed(hidden_states, topk_ids, topk_weights, out=output)
