"""mxmoe: Mixture-of-Experts layers with MXFP4 expert weights, on the CPU.

A checkpoint directory (config.json + safetensors in the gpt-oss MXFP4 layout) is opened with
:class:`Model`; each MoE layer is bound with :meth:`Model.layer`, which asks the oracle for the
fastest backend that satisfies the request and packs the weights for it. A :class:`Layer` is
called on any CPU array that speaks DLPack or the buffer protocol (numpy, torch, ...), read in
place, and returns the same kind of array::

    import numpy as np
    import mxmoe

    mxmoe.generate("/tmp/tiny", preset="qwen3-30b-a3b", experts=8, top_k=2,
                   hidden=128, intermediate=64)
    layer = mxmoe.Model("/tmp/tiny").layer(0)
    y = layer(np.random.default_rng(0).standard_normal((4, 128), dtype=np.float32))

The GIL is released while a layer computes, so layers called from several Python threads run
at once. Every backend's verdict, with all its reasons, is in :func:`explain` and
:attr:`Layer.selection`. docs/PYTHON.md in the repository has the whole story.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any, Dict, Iterable, List, Optional, Sequence, Union

from ._mxmoe import Layer, LoadError, NoBackendError, NumericError, UnsupportedTokenizer
from ._mxmoe import __version__
from ._mxmoe import _MAX_THREADS, _MAX_TOKENS  # kMaxThreads, kMaxTokensPerCall (C++)
from . import _mxmoe

__all__ = [
    "Completion",
    "LLM",
    "Layer",
    "LoadError",
    "Model",
    "NoBackendError",
    "NumericError",
    "Tokenizer",
    "UnsupportedTokenizer",
    "__version__",
    "backends",
    "dequantize_mxfp4",
    "explain",
    "generate",
    "hardware",
    "layer_from_tensors",
    "presets",
    "quantize_mxfp4",
    "render_chat",
]

PathLike = Union[str, "os.PathLike[str]"]


def _names(value: Union[None, str, Iterable[str]], argument: str) -> List[str]:
    """A comma list or a sequence of backend names, as a list."""
    if value is None:
        return []
    if isinstance(value, str):
        value = _optional_str(value, argument)
        return [v for v in value.split(",") if v]
    names = list(value)
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"{argument}: expected backend names (str), got {type(name).__name__}")
        _optional_str(name, argument)
    return names


_INT32 = (-(2**31), 2**31 - 1)


def _int(value: Any, argument: str, low: int = _INT32[0], high: int = _INT32[1],
         expected: Optional[str] = None) -> int:
    """VALUE as an int in [low, high] (default: what a C int holds), checked here so that an
    out-of-range value is a ValueError naming the argument, as the C API and the command line
    say, never nanobind's "incompatible function arguments"."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{argument}: expected an int, got {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{argument}: expected {expected or f'an int in {low}..{high}'}, "
                         f"got {value}")
    return value


def _threads(value: Any) -> int:
    return _int(value, "threads", 0, _MAX_THREADS,
                f"0 (every logical CPU) or 1..{_MAX_THREADS}")


def _tokens(value: Any) -> int:
    return _int(value, "tokens", 1, _MAX_TOKENS, f"1..{_MAX_TOKENS}")


def _path(value: Any, argument: str) -> str:
    """A path argument (str, bytes or os.PathLike) as the UTF-8 text the library takes: a
    ValueError naming the argument when it is not valid UTF-8 (undecodable bytes, a str with
    lone surrogates), a TypeError when it is no path."""
    try:
        path = os.fspath(value)
    except TypeError:
        raise TypeError(f"{argument}: expected a path (str, bytes or os.PathLike), got "
                        f"{type(value).__name__}") from None
    raw = os.fsencode(path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{argument}: the path {raw!r} is not valid UTF-8 (mxmoe takes UTF-8 "
                         "paths)") from None
    if "\0" in text:
        raise ValueError(f"{argument}: the path {raw!r} holds a NUL byte")
    return text


def _optional_str(value: Any, argument: str) -> Optional[str]:
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{argument}: expected a str or None, got {type(value).__name__}")
    if value is not None and "\0" in value:  # C++ would see the name cut at the NUL
        raise ValueError(f"{argument}: {value!r} holds a NUL character")
    return value


def _bool(value: Any, argument: str) -> bool:
    """VALUE as a bool: True or False only (a numpy bool too), never Python's truthiness of
    any object (force='no' is not False)."""
    kind = type(value)
    numpy_bool = kind.__module__ == "numpy" and kind.__name__ in ("bool", "bool_")
    if isinstance(value, bool) or numpy_bool:
        return bool(value)
    raise TypeError(f"{argument}: expected True or False, got {type(value).__name__} {value!r}")


def _hardware_json(hardware: Union[None, PathLike, Dict[str, Any]]):
    """(JSON text, None) of a hardware description given as a dict, (None, path) for a file,
    or (None, None)."""
    if hardware is None:
        return None, None
    if isinstance(hardware, dict):
        return json.dumps(hardware), None
    if isinstance(hardware, (str, bytes, os.PathLike)):
        return None, _path(hardware, "hardware")  # read by the library (regular file, size cap)
    raise TypeError(
        "hardware: expected None (probe this machine), a dict or the path of a JSON file "
        f"written by `mxmoe info --hardware --json`, got {type(hardware).__name__}"
    )


def explain(
    preset: Optional[str] = None,
    model: Optional[PathLike] = None,
    layer: Optional[int] = None,
    activation: Optional[str] = None,
    batch_invariant: bool = False,
    backend: Optional[str] = None,
    exclude: Union[str, Sequence[str]] = (),
    tokens: int = 1,
    threads: int = 0,
    hardware: Union[None, PathLike, Dict[str, Any]] = None,
) -> Dict[str, Any]:
    """Every backend's verdict for a deployment, with all its reasons.

    The layer is a preset (``preset``, default ``"gpt-oss-20b"``; see :func:`presets`) or layer
    ``layer`` (default 0) of the checkpoint directory ``model``. The request: ``activation``
    (``"f32"``, ``"bf16"``, ``"int8"``, ``"mxfp8"``; None: the model family's preference),
    ``batch_invariant``, a forced ``backend``, backends to ``exclude`` (names or a comma list),
    ``tokens`` per call (ranks the candidates by estimated cost) and ``threads`` (0: every
    logical CPU). ``hardware``: None probes this machine (capped by ``MXMOE_MAX_ISA``), or a
    dict / the path of a file written by ``mxmoe info --hardware --json`` replays another one.

    Returns the report of ``mxmoe explain --json`` as a dict: ``selected`` (None when no
    backend fits), ``why``, ``preferences``, ``deployment``, ``candidates`` (``name``,
    ``numerics_class``, ``supported``, ``estimated_us``, ``reasons``), ``error`` (the text NoBackendError would
    carry, or None) and ``suggestions``. Never raises for lack of a backend.
    """
    return _judge(preset, model, layer, activation, batch_invariant, backend, exclude, tokens,
                  threads, hardware)[0]


def _judge(preset, model, layer, activation, batch_invariant, backend, exclude, tokens, threads,
           hardware):
    """(the explain report as a dict, the text table of `mxmoe explain`) of one judgement."""
    if preset is not None and model is not None:
        raise ValueError("explain: give preset or model, not both")
    if layer is not None and model is None:
        raise ValueError("explain: layer needs model (a checkpoint directory)")
    hardware_json, source = _hardware_json(hardware)
    report, table = _mxmoe._explain(
        _optional_str(preset, "preset"),
        None if model is None else _path(model, "model"),
        0 if layer is None else _int(layer, "layer"),
        _optional_str(activation, "activation"),
        _bool(batch_invariant, "batch_invariant"),
        _optional_str(backend, "backend"),
        _names(exclude, "exclude"),
        _tokens(tokens),
        _threads(threads),
        hardware_json,
        source,
    )
    return json.loads(report), table


class Model:
    """A checkpoint directory: config.json + safetensors (one file or a sharded index).

    Opening maps the files and reads only their headers. Each MoE layer is bound on first
    use by :meth:`layer`; layers keep the mapping alive, so they outlive the Model object.
    Raises :class:`LoadError` (an OSError) for a missing or malformed checkpoint.
    """

    def __init__(self, path: PathLike) -> None:
        self._model = _mxmoe._Model(_path(path, "path"))
        self._layers: Dict[tuple, Layer] = {}
        self._lock = threading.Lock()

    @property
    def path(self) -> str:
        """The checkpoint directory."""
        return self._model.dir

    @property
    def config(self) -> Dict[str, Any]:
        """config.json, as read (a fresh dict each time)."""
        return json.loads(self._model.config_json)

    @property
    def num_layers(self) -> int:
        """The number of decoder layers in config.json."""
        return self._model.num_layers

    @property
    def moe_layers(self) -> List[int]:
        """The indices of the MoE layers mxmoe runs, ascending."""
        return list(self._model.moe_layers)

    def skip_reason(self, index: int) -> str:
        """Why layer ``index`` is not a MoE layer mxmoe runs ("" when it is)."""
        return self._model.skip_reason(_int(index, "index"))

    def layer(
        self,
        index: int,
        activation: Optional[str] = None,
        batch_invariant: bool = False,
        threads: int = 0,
        backend: Optional[str] = None,
        exclude: Union[str, Sequence[str]] = (),
        tokens: int = 1,
    ) -> Layer:
        """MoE layer ``index``, bound for this request (the arguments of :func:`explain`).

        The oracle judges every backend on this machine and the fastest that fits packs the
        weights; :class:`NoBackendError` (with ``.selection``) when none does. ``threads`` picks
        the thread pool: 0 shares the pool of every logical CPU, N shares the process's pool of
        N threads. The same arguments (and ``MXMOE_*`` variables) return the same Layer object.
        """
        key = (
            _int(index, "index"),
            _optional_str(activation, "activation"),
            _bool(batch_invariant, "batch_invariant"),
            _threads(threads),
            _optional_str(backend, "backend"),
            tuple(_names(exclude, "exclude")),
            _tokens(tokens),
        )
        # Defaults take the MXMOE_* variables (docs/PYTHON.md): a changed variable is another
        # request, so it is part of the key.
        environment = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("MXMOE_")))
        with self._lock:
            found = self._layers.get(key + environment)
            if found is None:
                found = self._model.bind(key[0], key[1], key[2], key[3], key[4], list(key[5]), key[6])
                self._layers[key + environment] = found
            return found

    def __repr__(self) -> str:
        return f"<mxmoe.Model {self.path}: {self.num_layers} layers, MoE layers {self.moe_layers}>"


def _optional_float(value: Any, argument: str) -> Optional[float]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{argument}: expected a number or None, got {type(value).__name__}")
    return float(value)


def _optional_bool(value: Any, argument: str) -> Optional[bool]:
    return None if value is None else _bool(value, argument)


def _optional_int(value: Any, argument: str) -> Optional[int]:
    return None if value is None else _int(value, argument)


def layer_from_tensors(
    *,
    family: str,
    top_k: int,
    w13_blocks: Any = None,
    w13_scales: Any = None,
    w2_blocks: Any = None,
    w2_scales: Any = None,
    w1_blocks: Optional[Sequence[Any]] = None,
    w1_scales: Optional[Sequence[Any]] = None,
    w3_blocks: Optional[Sequence[Any]] = None,
    w3_scales: Optional[Sequence[Any]] = None,
    w13_bias: Any = None,
    w2_bias: Any = None,
    router_weight: Any = None,
    router_bias: Any = None,
    selection_bias: Any = None,
    gate_up: Optional[str] = None,
    activation_fn: Optional[str] = None,
    alpha: Optional[float] = None,
    limit: Optional[float] = None,
    routing: Optional[str] = None,
    renormalize: Optional[bool] = None,
    routed_scaling_factor: Optional[float] = None,
    n_group: Optional[int] = None,
    topk_group: Optional[int] = None,
    expert_bias: Optional[bool] = None,
    activation: Optional[str] = None,
    batch_invariant: bool = False,
    threads: int = 0,
    backend: Optional[str] = None,
    exclude: Union[str, Sequence[str]] = (),
    tokens: int = 1,
) -> Layer:
    """A MoE layer on expert weights the caller holds (an engine's own tensors, as vLLM and
    SGLang keep them), read in place: numpy arrays, CPU torch tensors or any DLPack / buffer
    protocol producer, C-contiguous (a strided view is refused, never copied). Also
    ``Layer.from_tensors``. docs/PYTHON.md maps vLLM's and SGLang's tensors to the arguments.

    The layout: fused, ``w13_blocks`` [E, 2I, H/2] (or [E, 2I, H/32, 16]) and ``w13_scales``
    [E, 2I, H/32], ``w2_blocks`` [E, H, I/2] (or [E, H, I/32, 16]) and ``w2_scales``
    [E, H, I/32], uint8 (MXFP4 blocks, E8M0 scales), gate and up rows of w13 as ``gate_up``
    says (``"interleaved"``: even rows gate, odd rows up, as gpt-oss and vLLM's CPU MXFP4 path
    hold them; ``"halves"``: rows [0, I) gate, [I, 2I) up; default the family's: interleaved
    for gpt_oss, halves for the others); or per expert (DeepSeek's checkpoints), lists of E
    arrays ``w1_blocks``/``w1_scales`` (gate) and ``w3_blocks``/``w3_scales`` (up) [I, H/2] /
    [I, H/32], and ``w2_blocks``/``w2_scales`` [H, I/2] / [H, I/32]. Optional float32 or
    bfloat16: ``w13_bias`` [E, 2I] (rows as w13's), ``w2_bias`` [E, H] (as the family has
    them), ``router_weight`` [E, H] with ``router_bias`` [E] and ``selection_bias`` [E]
    (DeepSeek's e_score_correction_bias). Without ``router_weight`` the layer runs
    ``forward_routed`` only (``forward`` raises ValueError saying so).

    The math: ``family`` (``"gpt_oss"``, ``"qwen3_moe"``, ``"mixtral"``, ``"deepseek_v3"``,
    ``"deepseek_v4"``) gives the routing, the activation with its alpha and limit, the biases
    and the gate/up layout; ``activation_fn``, ``alpha``, ``limit`` (where the activation has
    them), ``routing``, ``renormalize``, ``routed_scaling_factor``, ``n_group``/``topk_group``
    (sigmoid_group_topk) and ``expert_bias`` override single parts of it. E, H and I come from
    the shapes; ``top_k`` is the number of experts per token (forward_routed's ids are
    [tokens, top_k]). The request: as :meth:`Model.layer`.

    Validated as a checkpoint's layer is (the same bounds; a 0xFF scale, a non-finite bias or
    router value refused): ValueError naming the tensor and the numbers, TypeError for an
    argument that is not an array or has the wrong dtype, NoBackendError when no backend fits.

    Memory: when the chosen backend packs its own copy (``Layer.reads_source_weights`` is
    False), the layer holds no reference to the arrays and the caller may free them; when it
    computes from them in place (the reference backend), the layer keeps them alive itself.
    """
    if not isinstance(family, str):
        raise TypeError(f"family: expected a str, got {type(family).__name__}")
    tensors = dict(w13_blocks=w13_blocks, w13_scales=w13_scales, w2_blocks=w2_blocks,
                   w2_scales=w2_scales, w1_blocks=w1_blocks, w1_scales=w1_scales,
                   w3_blocks=w3_blocks, w3_scales=w3_scales, w13_bias=w13_bias, w2_bias=w2_bias,
                   router_weight=router_weight, router_bias=router_bias,
                   selection_bias=selection_bias)
    math = dict(gate_up=_optional_str(gate_up, "gate_up"),
                activation_fn=_optional_str(activation_fn, "activation_fn"),
                alpha=_optional_float(alpha, "alpha"), limit=_optional_float(limit, "limit"),
                routing=_optional_str(routing, "routing"),
                renormalize=_optional_bool(renormalize, "renormalize"),
                routed_scaling_factor=_optional_float(routed_scaling_factor,
                                                      "routed_scaling_factor"),
                n_group=_optional_int(n_group, "n_group"),
                topk_group=_optional_int(topk_group, "topk_group"),
                expert_bias=_optional_bool(expert_bias, "expert_bias"))
    return _mxmoe._layer_from_tensors(
        family, _int(top_k, "top_k"), tensors, math, _optional_str(activation, "activation"),
        _bool(batch_invariant, "batch_invariant"), _threads(threads),
        _optional_str(backend, "backend"),
        _names(exclude, "exclude"), _tokens(tokens))


def generate(
    out: PathLike,
    preset: str = "gpt-oss-20b",
    *,
    layers: Optional[int] = None,
    experts: Optional[int] = None,
    top_k: Optional[int] = None,
    hidden: Optional[int] = None,
    intermediate: Optional[int] = None,
    hash_layers: int = 0,
    vocab: Optional[int] = None,
    seed: int = 1,
    force: bool = False,
    full: bool = False,
    attention_heads: Optional[int] = None,
    kv_heads: Optional[int] = None,
    head_dim: Optional[int] = None,
) -> str:
    """Writes a checkpoint of random weights with a preset's shape; returns ``out``.

    What ``mxmoe generate`` writes: config.json of the preset's family and ``layers`` (default 1)
    MoE layers in the gpt-oss MXFP4 layout, layer N's weights drawn from ``seed + N``.
    ``experts``, ``top_k``, ``hidden`` and ``intermediate`` (multiples of 32) resize the preset.
    DeepSeek-V4 is written in its release naming; its first ``hash_layers`` layers are
    hash-routed over ``vocab`` token ids (default 129280).

    ``full=True`` writes the whole model instead (``mxmoe generate --full``): every tensor of
    the published checkpoint with its name, shape and dtype, a byte-level tokenizer.json,
    tokenizer_config.json and generation_config.json, so that transformers loads it. Presets
    gpt-oss-20b, gpt-oss-120b and tiny (MXFP4 experts, as published) and qwen3-30b-a3b (BF16
    per-expert weights, as published: convert them with ``mxmoe quantize``). ``layers``,
    ``vocab``, ``attention_heads``, ``kv_heads`` and ``head_dim`` default to the published
    model's (gpt-oss-20b: 24 layers, vocab 201088, 64 heads, 8 key/value heads, head dim 64).

    The directory is written beside ``out``, in pieces, and renamed into place when complete;
    an existing ``out`` is an error unless ``force``. Ctrl-C stops it (KeyboardInterrupt) with
    ``out`` as it was.
    """
    # None is "the preset's"; 0 is passed to the extension as that, so an explicit 0 (or any
    # value below 1) is refused here, as the command line refuses --layers 0.
    def positive(value: Any, name: str) -> int:
        if value is None:
            return 0
        value = _int(value, name)
        if value < 1:
            raise ValueError(f"{name}: expected a positive int (or None for the preset's), got "
                             f"{value}")
        return value

    sizes = [positive(v, name)
             for v, name in ((experts, "experts"), (top_k, "top_k"), (hidden, "hidden"),
                             (intermediate, "intermediate"))]
    seed = _int(seed, "seed", 0, 2**64 - 1)
    hash_layers = _int(hash_layers, "hash_layers")
    if hash_layers < 0:
        raise ValueError(f"hash_layers: expected a non-negative int, got {hash_layers}")
    vocab = positive(vocab, "vocab")
    layers = positive(layers, "layers")
    full = _bool(full, "full")
    attention = [positive(v, name)
                 for v, name in ((attention_heads, "attention_heads"), (kv_heads, "kv_heads"),
                                 (head_dim, "head_dim"))]
    for value, name in zip(attention, ("attention_heads", "kv_heads", "head_dim")):
        if value and not full:
            raise ValueError(f"{name}: only with full=True, got {value}")
    preset = _optional_str(preset, "preset")
    if preset is None or preset == "":
        raise ValueError(f"preset: expected a preset name, got {preset!r}")
    return _mxmoe._generate(_path(out, "out"), preset,
                            layers, *sizes, hash_layers, vocab, seed, _bool(force, "force"), full,
                            *attention)


def hardware() -> Dict[str, Any]:
    """This machine's probe (``mxmoe info --hardware --json``), capped by ``MXMOE_MAX_ISA``."""
    return json.loads(_mxmoe._hardware_json())


def presets() -> List[str]:
    """The names of the layer presets (real models' shapes)."""
    return list(_mxmoe._presets())


def backends() -> List[str]:
    """The names of the registered backends."""
    return list(_mxmoe._backends())


def quantize_mxfp4(w: Any, scale_rule: str = "round_up"):
    """MXFP4 of ``w`` [..., K] (K a multiple of 32) in the gpt-oss layout, with mxmoe's own
    quantizer: ``(blocks, scales)``, numpy uint8 arrays of shapes [..., K/32, 16] and
    [..., K/32]. Byte j of a block holds element 2j in its low nibble and 2j+1 in its high
    nibble; a scale byte is an E8M0 exponent (2^(s-127)). ``scale_rule``: ``"round_up"``
    (never clips; the Hugging Face converter's rule) or ``"floor"`` (OCP's). Elements round to
    nearest even. NaN or Inf in ``w`` is a ValueError: its block would get the scale 0xFF,
    which no loader accepts. Needs numpy; ``w`` is anything numpy.asarray reads (converted to
    float32).
    """
    import numpy as np  # noqa: PLC0415 (only these helpers need numpy)

    w = np.ascontiguousarray(w, dtype=np.float32)
    finite = np.isfinite(w)
    if not finite.all():
        first = tuple(int(i) for i in np.argwhere(~finite)[0])
        raise ValueError(f"w: {int((~finite).sum())} non-finite values (NaN/Inf), the first at "
                         f"{first}; MXFP4 has no encoding a loader accepts for them")
    return _mxmoe._quantize_mxfp4(w, scale_rule)


def _uint8_array(value: Any, argument: str):
    import numpy as np  # noqa: PLC0415

    array = np.asarray(value)
    if array.dtype != np.uint8:
        raise TypeError(f"{argument}: expected a uint8 array (MXFP4 bytes), got {array.dtype}")
    return np.ascontiguousarray(array)


def dequantize_mxfp4(blocks: Any, scales: Any):
    """The float32 values [..., K] of MXFP4 ``blocks`` [..., K/32, 16] and ``scales``
    [..., K/32] (uint8, the layout of :func:`quantize_mxfp4`). Exact: every MXFP4 value is a
    float32. Any other dtype is a TypeError (a float or int64 array is not a block of bytes)."""
    return _mxmoe._dequantize_mxfp4(_uint8_array(blocks, "blocks"), _uint8_array(scales, "scales"))


from .text import Tokenizer, render_chat  # noqa: E402  (uses the helpers above)
from .llm import LLM, Completion  # noqa: E402  (uses the helpers above)
