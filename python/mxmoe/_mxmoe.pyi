"""Type stubs of mxmoe._mxmoe, the C++ core of the package (tests/test_stubs.py checks that
they name exactly what the extension defines). Use the package mxmoe: it re-exports Layer,
NoBackendError, LoadError, NumericError and UnsupportedTokenizer."""

from typing import Any, Dict, List, Optional, Tuple, TypeVar

__version__: str
_MAX_THREADS: int  # kMaxThreads: the largest `threads` (0 is every logical CPU)
_MAX_TOKENS: int  # kMaxTokensPerCall: the largest `tokens`

# Anything that speaks DLPack (__dlpack__) or the buffer protocol: numpy arrays, CPU torch
# tensors, ... A layer returns the caller's kind of array (numpy in, numpy out; torch in,
# torch out; any other producer: an array with __dlpack__ and the buffer protocol).
ArrayLike = Any
Out = TypeVar("Out")

class NoBackendError(Exception):
    """No backend supports the deployment. str(e) is the whole report (every backend with every
    reason, and the single changes that would make one fit)."""

    selection: Dict[str, Any]
    """The same report as a dict: the keys of mxmoe.explain()."""

class LoadError(OSError):
    """A checkpoint is missing, unreadable or malformed: the message names the file, the
    tensor and the numbers."""

class NumericError(ValueError):
    """A layer call's output holds NaN/Inf: the message names the count and the tokens (the
    C API's MXMOE_ERROR_NON_FINITE, the command line's exit 1)."""

class UnsupportedTokenizer(RuntimeError):
    """A well-formed tokenizer.json using a model or stage mxmoe does not implement; the
    message names it."""

class Layer:
    """One MoE layer bound to its weights and the backend the oracle chose (made by
    mxmoe.Model.layer from a checkpoint, or by mxmoe.layer_from_tensors / Layer.from_tensors
    from the caller's arrays; there is no constructor).

    Calls take x [tokens, hidden] as float32, or bfloat16 where the producer has it
    (torch.bfloat16, ml_dtypes.bfloat16), or uint16 bfloat16 bit patterns with
    bf16_bits=True; C-contiguous arrays are read in place (others are copied). The result has
    x's dtype and kind; with ``out`` (a writable C-contiguous array of x's dtype and shape,
    not overlapping x) it is written there and ``out`` is returned. The GIL is released while
    the layer computes; calls on one layer from several threads run one at a time, calls on
    different layers at once. Bad arguments raise TypeError (not an array, wrong dtype) or
    ValueError (shape, device, values), naming the argument and what was expected.
    """

    def __call__(self, x: ArrayLike, out: Optional[Out] = None, *, bf16_bits: bool = False,
                 token_ids: Optional[ArrayLike] = None) -> Any:
        """Same as forward()."""

    def forward(self, x: ArrayLike, out: Optional[Out] = None, *, bf16_bits: bool = False,
                token_ids: Optional[ArrayLike] = None) -> Any:
        """The layer's output for x [tokens, hidden], routed by the layer's own router (the
        output before the transformer block's residual add). A hash-routed layer (DeepSeek-V4's
        first layers, ``vocab > 0``) routes by the tokens' ids: token_ids [tokens] int32 or
        int64 in [0, vocab) (ValueError naming the token otherwise, or when missing); other
        layers ignore them, so a model can pass them to every layer."""

    def forward_routed(self, x: ArrayLike, topk_ids: ArrayLike, topk_weights: ArrayLike,
                       out: Optional[Out] = None, *, bf16_bits: bool = False) -> Any:
        """The layer's output for x with the routing given, as vLLM's and SGLang's fused-experts
        calls pass it: topk_ids [tokens, top_k] int32 or int64 (expert ids in [0, num_experts),
        distinct per token), topk_weights [tokens, top_k] float32 (finite)."""

    def _time_cpp_forward(self, x: ArrayLike, out: ArrayLike, iterations: int) -> Tuple[float, float]:
        """(wall, calling thread's CPU) seconds of ``iterations`` calls of the C++ forward alone
        (for benchmarks)."""

    @property
    def vocab(self) -> int:
        """The token-id range of a hash-routed layer, 0 for other layers."""
    @property
    def selection(self) -> Dict[str, Any]:
        """The oracle's report for this layer (the keys of mxmoe.explain())."""
    @property
    def spec(self) -> Dict[str, Any]:
        """The layer's shape and math (LayerSpec) as a dict."""
    @property
    def backend(self) -> str:
        """The backend that runs this layer."""
    @property
    def activation(self) -> str:
        """The format activations are rounded to before each expert GEMM."""
    @property
    def batch_invariant(self) -> bool:
        """Whether each token's output bits are independent of the batch."""
    @staticmethod
    def from_tensors(**kwargs: Any) -> "Layer":
        """The same as mxmoe.layer_from_tensors()."""
    @property
    def index(self) -> Optional[int]:
        """The layer's index in its checkpoint (None for a layer from tensors)."""
    @property
    def reads_source_weights(self) -> bool:
        """Whether the layer reads the weights it was made from while it computes (the reference
        backend, a hash-routed layer): a layer from tensors then keeps the arrays alive itself.
        False: the backend packed its own copy and holds no reference to them."""
    @property
    def hidden(self) -> int: ...
    @property
    def intermediate(self) -> int: ...
    @property
    def num_experts(self) -> int: ...
    @property
    def top_k(self) -> int: ...
    @property
    def threads(self) -> int:
        """Threads of the runtime (thread pool) the layer computes on."""
    @property
    def packed_weight_bytes(self) -> int:
        """Bytes the backend packed for this layer (0 when it reads the mapping)."""

class _Model:
    def __init__(self, path: str) -> None: ...
    def bind(self, index: int, activation: Optional[str], batch_invariant: bool, threads: int,
             backend: Optional[str], exclude: List[str], tokens: int) -> Layer: ...
    @property
    def config_json(self) -> str: ...
    @property
    def dir(self) -> str: ...
    @property
    def num_layers(self) -> int: ...
    @property
    def moe_layers(self) -> List[int]: ...
    def skip_reason(self, index: int) -> str: ...

def _explain(preset: Optional[str], model: Optional[str], layer: int, activation: Optional[str],
             batch_invariant: bool, backend: Optional[str], exclude: List[str], tokens: int,
             threads: int, hardware_json: Optional[str],
             hardware_source: Optional[str]) -> Tuple[str, str]: ...
def _layer_from_tensors(family: str, top_k: int, tensors: Dict[str, Any], math: Dict[str, Any],
                        activation: Optional[str], batch_invariant: bool, threads: int,
                        backend: Optional[str], exclude: List[str], tokens: int) -> Layer: ...
def _generate(out: str, preset: str, layers: int, experts: int, top_k: int, hidden: int,
              intermediate: int, hash_layers: int, vocab: int, seed: int, force: bool,
              full: bool, attention_heads: int, kv_heads: int, head_dim: int) -> str: ...
def _hardware_json() -> str: ...
def _hardware_report(hardware_json: str) -> str: ...
def _quantize_mxfp4(w: ArrayLike, scale_rule: str) -> Tuple[Any, Any]: ...
def _dequantize_mxfp4(blocks: ArrayLike, scales: ArrayLike) -> Any: ...
def _presets() -> List[str]: ...
def _backends() -> List[str]: ...

class _LLM:
    def __init__(self, path: str, activation: Optional[str], batch_invariant: bool, threads: int,
                 backend: Optional[str], exclude: List[str], max_context: int, max_batch: int,
                 prefill_chunk: int, progress: Optional[Any]) -> None: ...
    def generate(self, prompts: List[List[int]], max_tokens: int, temperature: float, top_k: int,
                 top_p: float, min_p: float, seed: int, ignore_eos: bool, stop_ids: List[int],
                 on_token: Optional[Any]) -> List[Tuple[List[int], str]]: ...
    def prompt_logits(self, prompt: List[int]) -> Any: ...
    def describe(self) -> str: ...
    @property
    def family(self) -> str: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def max_context(self) -> int: ...
    @property
    def max_batch(self) -> int: ...
    @property
    def eos_ids(self) -> List[int]: ...
    @property
    def bos_id(self) -> int: ...
    @property
    def bytes_per_token(self) -> int: ...
    @property
    def kv_cache_bytes(self) -> int: ...

class _Tokenizer:
    def __init__(self, path: str) -> None: ...
    def encode(self, text: str, parse_special: bool) -> List[int]: ...
    def decode(self, ids: List[int], skip_special: bool) -> str: ...
    def contains(self, id: int) -> bool: ...
    @property
    def vocab_size(self) -> int: ...

class _TextStream:
    def __init__(self, tokenizer: _Tokenizer, skip_special: bool) -> None: ...
    def push(self, id: int) -> str: ...
    def finish(self) -> str: ...

def _render_chat(model_type: str, messages: List[Tuple[str, str]], add_generation_prompt: bool,
                 enable_thinking: bool) -> str: ...

# mxmoe's dense kernels for an engine's own layers (the vLLM plugin's VLLM_BATCH_INVARIANT=1,
# docs/VLLM.md). Batch invariant: each output row's bits depend only on that row of x, never on
# the other rows of the call or the thread count (include/mxmoe/dense.hpp).
class _DenseLinear:
    """y = x . weight^T (+ bias): weight [out, in] float32 or bfloat16, C-contiguous, read in
    place and held alive; bias [out] (float32 or bfloat16) or None; threads: 0 is every
    logical CPU. x [rows, in] float32; y float32 [rows, out], the caller's kind of array (or
    `out`), computed with the GIL released in the numerics class dense_fp32_lanes16."""
    def __init__(self, weight: ArrayLike, bias: Optional[ArrayLike], threads: int) -> None: ...
    def forward(self, x: ArrayLike, out: Optional[Out] = None) -> Any: ...
    @property
    def in_features(self) -> int: ...
    @property
    def out_features(self) -> int: ...
    @property
    def kernel(self) -> str: ...

def _row_softmax(x: ArrayLike, log: bool, out: Optional[Out] = None) -> Any:
    """softmax (log=False) or log_softmax (log=True) of each row of x [rows, n] float32, each
    row on its own in a fixed order (float32 out, the sum of exponentials in double)."""
    ...
