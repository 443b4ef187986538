"""Whole Hugging Face transformers models whose MoE blocks run in mxmoe, on any x86 CPU.

transformers builds the model and loads every tensor that is not a routed expert (attention,
norms, embeddings, the LM head, dense MLP layers); each MoE block becomes an
:class:`MxmoeMoeBlock` that computes the block (router, routed experts in MXFP4, combine and
shared experts) on the checkpoint's bytes, mapped by mxmoe. The experts are never dequantized
and never copied into torch parameters: while transformers builds the model the MoE block class
of the family is swapped for a block that holds no parameters, so no expert tensor is
allocated, read or initialised by torch, not even on the meta device::

    import torch, mxmoe.transformers
    from transformers import AutoTokenizer

    model = mxmoe.transformers.from_pretrained("gpt-oss-20b/")
    tokenizer = AutoTokenizer.from_pretrained("gpt-oss-20b/")
    ids = tokenizer("The capital of France is", return_tensors="pt")
    print(tokenizer.decode(model.generate(**ids, max_new_tokens=16)[0]))

Families: gpt-oss as published; Qwen3-MoE, Mixtral and DeepSeek-V3 after ``mxmoe quantize``;
DeepSeek-V4 in its release naming or transformers' (its hash layers route by the input ids the
model's forward receives). docs/PYTHON.md ("transformers") has versions, memory and threads.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import threading
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional

try:
    import torch
    import transformers
except ImportError as error:  # pragma: no cover - exercised by test_transformers_missing
    raise ImportError(
        "mxmoe.transformers needs torch and transformers: pip install \"mxmoe[transformers]\" "
        "(from a clone: pip install \".[transformers]\"; tested with torch 2.15.0 and "
        f"transformers 5.24.0). The import failed with: {error}"
    ) from error

from . import Layer, LoadError, Model

__all__ = ["MxmoeMoeBlock", "TESTED_TRANSFORMERS", "from_pretrained", "layers", "selections"]

# The transformers version these integrations are tested with (python/requirements-test.txt
# pins it); other 5.x versions work where the block classes below keep their names and call
# conventions, and anything else fails at load naming what is missing.
TESTED_TRANSFORMERS = "5.24.0"


@dataclass(frozen=True)
class _Family:
    """Where a family's MoE block lives in transformers, and how its decoder layer calls it."""

    module: str                  # the modeling module whose global the decoder layer builds
    block: str                   # the MoE block class
    returns_router_scores: bool  # gpt-oss's block returns (hidden_states, router_scores)


_FAMILIES: Dict[str, _Family] = {
    "gpt_oss": _Family("transformers.models.gpt_oss.modeling_gpt_oss", "GptOssMLP", True),
    "qwen3_moe": _Family("transformers.models.qwen3_moe.modeling_qwen3_moe",
                         "Qwen3MoeSparseMoeBlock", False),
    "mixtral": _Family("transformers.models.mixtral.modeling_mixtral", "MixtralSparseMoeBlock",
                       False),
    "deepseek_v3": _Family("transformers.models.deepseek_v3.modeling_deepseek_v3", "DeepseekV3MoE",
                           False),
    "deepseek_v4": _Family("transformers.models.deepseek_v4.modeling_deepseek_v4",
                           "DeepseekV4SparseMoeBlock", False),
}

_LAYER_INDEX = re.compile(r"(?:^|\.)layers\.(\d+)\.")

# A modeling module's block name holds a stand-in while a model is built (_blocks_replaced):
# one build at a time, so stand-ins never nest.
_build_lock = threading.Lock()


class MxmoeMoeBlock(torch.nn.Module):
    """A family's MoE block computed by an :class:`mxmoe.Layer`: routing with the checkpoint's
    router, the routed experts in MXFP4, the weighted combine and the shared experts.

    Holds no torch parameters. Called as the family's block is called: ``hidden_states``
    [batch, seq, hidden] (bfloat16 or float32), and for DeepSeek-V4 the ``input_ids`` the
    model's forward received (a hash layer routes by them). Returns what the family's block
    returns.
    """

    def __init__(self, config: Any = None, layer_idx: Optional[int] = None, *,
                 returns_router_scores: bool = False) -> None:
        super().__init__()
        self.layer_index = layer_idx
        self.returns_router_scores = returns_router_scores
        self.layer: Optional[Layer] = None

    def bind(self, index: int, layer: Layer) -> None:
        self.layer_index = index
        self.layer = layer

    def forward(self, hidden_states: torch.Tensor, input_ids: Optional[torch.Tensor] = None,
                **_: Any):
        if self.layer is None:
            raise RuntimeError(f"mxmoe: MoE block of layer {self.layer_index} has no mxmoe layer "
                               "bound (build models with mxmoe.transformers.from_pretrained)")
        shape = hidden_states.shape
        x = hidden_states.reshape(-1, shape[-1])
        if not x.is_contiguous():
            x = x.contiguous()
        token_ids = None
        if self.layer.vocab and input_ids is not None:
            token_ids = input_ids.reshape(-1)
            if token_ids.numel() != x.shape[0]:
                raise ValueError(
                    f"mxmoe: layer {self.layer_index} is hash-routed and got {token_ids.numel()} "
                    f"input ids for {x.shape[0]} tokens")
        y = self.layer(x, token_ids=token_ids).reshape(shape)
        return (y, None) if self.returns_router_scores else y

    def extra_repr(self) -> str:
        if self.layer is None:
            return f"layer={self.layer_index}, unbound"
        return (f"layer={self.layer_index}, backend={self.layer.backend}, "
                f"activation={self.layer.activation}, experts={self.layer.num_experts}, "
                f"top_k={self.layer.top_k}")


def _family(model_type: str) -> _Family:
    family = _FAMILIES.get(model_type)
    if family is None:
        raise ValueError(
            f"mxmoe.transformers: model_type '{model_type}' is not a family mxmoe runs in "
            f"transformers (supported: {', '.join(sorted(_FAMILIES))})")
    return family


@contextlib.contextmanager
def _blocks_replaced(family: _Family) -> Iterator[None]:
    """While transformers builds the model on this thread, its decoder layers build
    MxmoeMoeBlock where they would build the family's MoE block. Other threads see
    transformers unchanged (issue 38: a plain transformers load on another thread got mxmoe's
    parameterless block and wrote a checkpoint without MoE tensors): the module's name holds,
    for the build's length, a stand-in that makes the original block on every other thread
    and that every isinstance / issubclass test takes for the original."""
    try:
        module = importlib.import_module(family.module)
    except ImportError as error:
        raise ImportError(
            f"mxmoe.transformers: transformers {transformers.__version__} has no {family.module} "
            f"(tested with {TESTED_TRANSFORMERS})") from error
    original = getattr(module, family.block, None)
    if original is None:
        raise RuntimeError(
            f"mxmoe.transformers: transformers {transformers.__version__} has no "
            f"{family.module}.{family.block}, the MoE block mxmoe replaces (tested with "
            f"{TESTED_TRANSFORMERS}); nothing was patched")
    returns_scores = family.returns_router_scores

    class _Block(MxmoeMoeBlock):
        def __init__(self, config: Any = None, layer_idx: Optional[int] = None, *_: Any,
                     **__: Any) -> None:
            super().__init__(config, layer_idx, returns_router_scores=returns_scores)

    _Block.__name__ = _Block.__qualname__ = "MxmoeMoeBlock"
    builder = threading.get_ident()

    class _Original(type(original)):
        def __instancecheck__(cls, instance: Any) -> bool:
            return isinstance(instance, original)

        def __subclasscheck__(cls, subclass: type) -> bool:
            return issubclass(subclass, original)

    class _StandIn(original, metaclass=_Original):
        def __new__(cls, *args: Any, **kwargs: Any):
            # Not an instance of _StandIn: Python then calls no __init__ again.
            if threading.get_ident() == builder:
                return _Block(*args, **kwargs)
            return original(*args, **kwargs)

    _StandIn.__name__, _StandIn.__qualname__ = original.__name__, original.__qualname__
    _StandIn.__module__ = original.__module__
    with _build_lock:
        setattr(module, family.block, _StandIn)
        try:
            yield
        finally:
            setattr(module, family.block, original)


def _threads(threads: int) -> int:
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 0:
        raise ValueError(f"threads: expected an int >= 0 (0: torch's intra-op thread count), "
                         f"got {threads!r}")
    return threads if threads > 0 else torch.get_num_threads()


def from_pretrained(path: "os.PathLike[str] | str", *, activation: Optional[str] = None,
                    batch_invariant: bool = False, threads: int = 0,
                    dtype: torch.dtype = torch.bfloat16, backend: Optional[str] = None,
                    exclude: Any = (), **hf_kwargs: Any) -> "transformers.PreTrainedModel":
    """A transformers ``PreTrainedModel`` for the checkpoint directory ``path``, its MoE blocks
    in mxmoe.

    Raises :class:`mxmoe.LoadError` for a checkpoint mxmoe refuses, or one that lacks a tensor
    of the model outside the experts (transformers would initialise it at random).

    Every MoE layer is bound first, so a request no backend fits raises
    :class:`mxmoe.NoBackendError` (every backend, every reason) before transformers loads
    anything. ``activation``, ``batch_invariant``, ``backend`` and ``exclude`` are the request of
    :meth:`mxmoe.Model.layer` (None / defaults: the family's preference and the ``MXMOE_*``
    variables). ``threads``: mxmoe's pool; 0 (the default) takes torch's intra-op thread count,
    so the two take turns on the same cores. ``dtype`` is the model's (bfloat16 or float32);
    ``hf_kwargs`` go to ``AutoModelForCausalLM.from_pretrained`` (not ``config``,
    ``quantization_config`` or a ``device_map`` off the CPU).

    The model's ``mxmoe_layers`` maps each MoE layer index to its :class:`mxmoe.Layer`
    (``.backend``, ``.selection``: the oracle's choice and why); see :func:`selections`.
    """
    for key in ("config", "quantization_config"):
        if key in hf_kwargs:
            raise ValueError(f"mxmoe.transformers.from_pretrained: {key} is mxmoe's to set "
                             "(the checkpoint's config.json is read; its MXFP4 experts run "
                             "in mxmoe)")
    device_map = hf_kwargs.get("device_map")
    if device_map not in (None, "cpu") and not (isinstance(device_map, torch.device)
                                                and device_map.type == "cpu"):
        raise ValueError(f"mxmoe.transformers.from_pretrained: device_map={device_map!r}: mxmoe "
                         "computes on the CPU")
    if dtype not in (torch.bfloat16, torch.float32):
        raise ValueError(f"dtype: expected torch.bfloat16 or torch.float32, got {dtype}")
    path = os.fspath(path)
    if not isinstance(path, str):  # transformers takes str paths only: refused before any work
        raise TypeError(f"path: expected a str or an os.PathLike of str, got "
                        f"{type(path).__name__} (decode bytes with os.fsdecode)")
    checkpoint = Model(path)  # strict: LoadError naming the file and the problem
    config = transformers.AutoConfig.from_pretrained(path)
    family = _family(config.model_type)
    pool = _threads(threads)
    bound = {index: checkpoint.layer(index, activation=activation,
                                     batch_invariant=batch_invariant, threads=pool,
                                     backend=backend, exclude=exclude)
             for index in checkpoint.moe_layers}

    # The checkpoint's MXFP4 experts are mxmoe's: transformers must not bring its own
    # quantizer (on a CPU it dequantizes them to bf16).
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model_class = transformers.AutoModelForCausalLM._model_mapping[type(config)]
    ignored = getattr(model_class, "_keys_to_ignore_on_load_unexpected", None)
    with _blocks_replaced(family):
        try:
            # The MoE tensors are mxmoe's: not unexpected for transformers.
            model_class._keys_to_ignore_on_load_unexpected = list(ignored or []) + [
                r"(^|\.)layers\.\d+\.(mlp|ffn|block_sparse_moe)\.(router|gate|experts|"
                r"shared_experts)\."]
            model, info = model_class.from_pretrained(path, config=config, dtype=dtype,
                                                       output_loading_info=True, **hf_kwargs)
        finally:
            model_class._keys_to_ignore_on_load_unexpected = ignored
    # transformers initialises what the checkpoint lacks at random: a model with random
    # attention or embeddings would generate garbage, silently. Refuse it.
    missing = sorted(info.get("missing_keys") or [])
    if missing:
        shown = ", ".join(missing[:8]) + (f" and {len(missing) - 8} more" if len(missing) > 8
                                          else "")
        raise LoadError(
            f"{path}: the checkpoint lacks {len(missing)} tensor(s) of the model outside its "
            f"MoE experts: {shown} (a checkpoint written by an older `mxmoe quantize` holds "
            "only the MoE tensors: convert the original model again)")
    for key in ("mismatched_keys", "error_msgs"):
        if info.get(key):
            raise LoadError(f"{path}: transformers could not load the checkpoint's non-expert "
                            f"tensors ({key}: {info[key]})")
    model.eval()

    blocks = {}
    for name, module in model.named_modules():
        if isinstance(module, MxmoeMoeBlock):
            found = _LAYER_INDEX.search(name)
            if found is None:
                raise RuntimeError(f"mxmoe.transformers: MoE block '{name}' is not under a "
                                   "decoder layer")
            blocks[int(found.group(1))] = module
    if sorted(blocks) != sorted(bound):
        raise RuntimeError(
            f"mxmoe.transformers: transformers builds MoE blocks at layers {sorted(blocks)} and "
            f"the checkpoint has MoE layers {sorted(bound)} ({path}); config.json and the "
            "tensors disagree")
    for index, block in blocks.items():
        block.bind(index, bound[index])
    model.mxmoe_layers = dict(sorted(bound.items()))
    return model


def layers(model: torch.nn.Module) -> Dict[int, Layer]:
    """The :class:`mxmoe.Layer` of each MoE layer of a model from :func:`from_pretrained`."""
    found = getattr(model, "mxmoe_layers", None)
    if found is None:
        raise ValueError("mxmoe.transformers.layers: not a model built by "
                         "mxmoe.transformers.from_pretrained")
    return dict(found)


def selections(model: torch.nn.Module) -> List[Dict[str, Any]]:
    """Per MoE layer: its index, the backend the oracle chose, why, and every candidate's
    verdict (``selection`` as :attr:`mxmoe.Layer.selection` gives it)."""
    return [{"layer": index, "backend": layer.backend, "activation": layer.activation,
             "why": layer.selection.get("why"), "selection": layer.selection}
            for index, layer in layers(model).items()]
