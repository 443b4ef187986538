"""mxmoe.LLM: a whole MoE model (gpt-oss, Qwen3-MoE, Mixtral) from its checkpoint directory,
run by mxmoe itself (C++: the attention, norms, MoE layers, head and sampler), in the spirit of
``vllm.LLM`` and ``llama_cpp.Llama``. The GIL is released while it computes.

    import mxmoe
    llm = mxmoe.LLM("/tmp/tiny-oss", max_context=256)
    out = llm.generate([[5, 17, 42]], max_tokens=8)
    print(out[0].tokens, out[0].finish_reason)
    print(llm.generate("The sky is", max_tokens=8)[0].text)
    print(llm.chat([{"role": "user", "content": "Hi"}], max_tokens=32).text)

Prompts are lists of token ids or text (encoded with the model's tokenizer.json, special
tokens parsed); ``stream`` yields each new token, or each new piece of text, as it is chosen.
"""

from __future__ import annotations

import os
import queue
import threading
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from . import _mxmoe
from . import _bool, _int, _names, _optional_str, _path, _threads, LoadError, PathLike
from ._mxmoe import UnsupportedTokenizer
from .text import Tokenizer, _TextStream, _text, render_chat


@dataclass
class Completion:
    """One prompt's answer: its new token ids (a stop token included), why it ended ("stop":
    a stop token, "length": max_tokens, or "cancelled") and their text (special tokens left
    out; None when the model has no tokenizer mxmoe reads)."""

    tokens: List[int]
    finish_reason: str
    text: Optional[str] = None


def _prompts(prompts: Any, tokenizer: Optional[Tokenizer] = None) -> List[List[int]]:
    """Token-id lists of PROMPTS: one prompt (text or a list of ids) or a list of them; text
    is encoded with TOKENIZER (special tokens parsed)."""
    if isinstance(prompts, str):
        prompts = [prompts]
    if not isinstance(prompts, (list, tuple)) or not prompts:
        raise TypeError("prompts: expected text, a list of token ids, or a non-empty list of "
                        "them")
    if all(isinstance(t, int) and not isinstance(t, bool) for t in prompts):
        prompts = [prompts]  # one prompt given as its ids
    out = []
    for i, p in enumerate(prompts):
        if isinstance(p, str):
            if tokenizer is None:
                raise ValueError(f"prompts[{i}]: text needs the model's tokenizer, and this "
                                 "model has none mxmoe reads (LLM.tokenizer is None): give "
                                 "token ids")
            out.append(tokenizer.encode(_text(p, f"prompts[{i}]")))
        elif isinstance(p, (list, tuple)):
            out.append([_int(t, f"prompts[{i}] token", 0, 2**31 - 1) for t in p])
        else:
            raise TypeError(f"prompts[{i}]: expected text or a list of token ids, got "
                            f"{type(p).__name__}")
    return out


def _model_tokenizer(path: str) -> Optional[Tokenizer]:
    """PATH/tokenizer.json, or None (with a warning when the file is there but mxmoe cannot
    use it: the model still runs from token ids)."""
    if not os.path.isfile(os.path.join(path, "tokenizer.json")):
        return None
    try:
        return Tokenizer(path)
    except (LoadError, UnsupportedTokenizer) as e:
        warnings.warn(f"mxmoe.LLM: no text for this model ({e}); prompts and answers are token "
                      "ids", RuntimeWarning, stacklevel=3)
        return None


def _float(value: Any, argument: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{argument}: expected a number, got {type(value).__name__}")
    value = float(value)
    if not low <= value <= high:  # NaN fails too
        raise ValueError(f"{argument}: expected a number in [{low}, {high}], got {value}")
    return value


def _compact(value: Any) -> str:
    """``compact`` as the library names it: False "off", True "int8", or "off" / "int8" / "int4"."""
    if isinstance(value, str):
        if value not in ("off", "int8", "int4"):
            raise ValueError(f"compact: {value!r} is not a compact format (off, int8 or int4)")
        return value
    try:
        return "int8" if _bool(value, "compact") else "off"
    except TypeError:
        raise TypeError(f"compact: expected True, False, 'off', 'int8' or 'int4', got "
                        f"{type(value).__name__} {value!r}") from None


class LLM:
    """A whole model bound for generation.

    ``max_context``: tokens per sequence, prompt and answer (the KV cache is allocated for
    ``max_batch`` sequences of it at load). ``tokenizer``: the directory's tokenizer.json
    (:class:`Tokenizer`), or None when there is none or mxmoe cannot read it (a warning says
    why); text prompts, ``Completion.text`` and :meth:`chat` need it. ``activation``, ``batch_invariant``, ``threads``,
    ``backend``, ``exclude``: the request every MoE layer is judged with (as
    :meth:`mxmoe.Model.layer`); ``activation="bf16"`` also rounds the dense matrices'
    activations to bf16 where the CPU has AVX-512 BF16 (docs/ACCURACY.md). ``compact``: the attention and head matrices quantized at load,
    True or ``"int8"`` to 8 bits per 32-block (about half their bytes), ``"int4"`` to 4 bits (a
    quarter, for a 16x coarser step; docs/ACCURACY.md), with int8 activations in the MoE
    layers unless ``activation`` names another format. ``progress``: a callable
    given each loading line.
    """

    def __init__(self, path: PathLike, max_context: int = 4096, max_batch: int = 1,
                 activation: Optional[str] = None, batch_invariant: bool = False,
                 threads: int = 0, backend: Optional[str] = None,
                 exclude: Union[str, Sequence[str]] = (), prefill_chunk: int = 256,
                 compact: Union[bool, str] = False,
                 progress: Optional[Callable[[str], Any]] = None) -> None:
        self._llm = _mxmoe._LLM(
            _path(path, "path"), _optional_str(activation, "activation"),
            _bool(batch_invariant, "batch_invariant"), _threads(threads),
            _optional_str(backend, "backend"), _names(exclude, "exclude"),
            _int(max_context, "max_context", 1, 1 << 24),
            _int(max_batch, "max_batch", 1, 4096), _int(prefill_chunk, "prefill_chunk", 1, 1 << 20),
            _compact(compact), progress)
        self._lock = threading.Lock()  # one generation at a time: the KV cache is the model's
        self.tokenizer: Optional[Tokenizer] = _model_tokenizer(_path(path, "path"))

    family = property(lambda self: self._llm.family, doc='"gpt_oss", "qwen3_moe" or "mixtral".')
    vocab_size = property(lambda self: self._llm.vocab_size)
    max_context = property(lambda self: self._llm.max_context)
    max_batch = property(lambda self: self._llm.max_batch)
    eos_ids = property(lambda self: list(self._llm.eos_ids),
                       doc="Token ids that end a sequence (config and generation_config).")

    def describe(self) -> str:
        """What runs where: sizes, the dense kernels, each layer's MoE backend."""
        return self._llm.describe()

    def generate(self, prompts: Any, max_tokens: int = 16, temperature: float = 0.0,
                 top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0, seed: int = 0,
                 ignore_eos: bool = False, stop_ids: Sequence[int] = (),
                 on_token: Optional[Callable[[int, int], Any]] = None) -> List[Completion]:
        """Completes every prompt as one batch: ``prompts`` is one prompt (text, or a list of
        token ids) or a list of them; text is encoded with :attr:`tokenizer`, special tokens
        parsed. ``on_token(sequence, token)`` is called for each new token; returning False
        ends that sequence. Greedy at temperature 0; the same seed gives the same tokens."""
        args = (
            _prompts(prompts, self.tokenizer), _int(max_tokens, "max_tokens", 1, 1 << 24),
            _float(temperature, "temperature", 0.0, 1e4), _int(top_k, "top_k", 0, 1 << 24),
            _float(top_p, "top_p", 1e-9, 1.0), _float(min_p, "min_p", 0.0, 1.0),
            _int(seed, "seed", 0, 2**64 - 1), _bool(ignore_eos, "ignore_eos"),
            [_int(t, "stop_ids", 0, 2**31 - 1) for t in stop_ids])
        callback = None
        if on_token is not None:
            def callback(sequence: int, token: int) -> bool:
                return on_token(sequence, token) is not False
        with self._lock:
            done = self._llm.generate(*args, callback)
        return [Completion(list(tokens), reason, self._text(tokens)) for tokens, reason in done]

    def _text(self, tokens: Sequence[int]) -> Optional[str]:
        return None if self.tokenizer is None else self.tokenizer.decode(tokens)

    def chat(self, messages: Any, add_generation_prompt: bool = True,
             enable_thinking: bool = True, **sampling: Any) -> Completion:
        """Answers a conversation: ``messages`` (a list of {"role": ..., "content": ...}) is
        rendered in the family's chat format (:func:`render_chat`), encoded and completed;
        ``sampling``: the keyword arguments of :meth:`generate`. Needs :attr:`tokenizer`."""
        ids = self._chat_ids(messages, add_generation_prompt, enable_thinking)
        return self.generate([ids], **sampling)[0]

    def _chat_ids(self, messages: Any, add_generation_prompt: bool,
                  enable_thinking: bool) -> List[int]:
        text = render_chat(self.family, messages, add_generation_prompt, enable_thinking)
        if self.tokenizer is None:
            raise ValueError("messages: a conversation needs the model's tokenizer, and this "
                             "model has none mxmoe reads (LLM.tokenizer is None)")
        return self.tokenizer.encode(text)

    def stream(self, prompt: Union[str, Sequence[int]], **kwargs: Any) -> Iterator[Any]:
        """Yields the new tokens of one prompt as they are chosen, or, when ``prompt`` is
        text, the new pieces of text (each complete characters; together the answer's
        ``text``). Generation runs on a thread of its own; closing the iterator early cancels
        it."""
        if isinstance(prompt, str):
            return self._stream_text(_prompts(prompt, self.tokenizer)[0], kwargs)
        if isinstance(prompt, (bytes, dict)) or not isinstance(prompt, (list, tuple, Sequence)):
            raise TypeError(f"prompt: expected text or a list of token ids, got "
                            f"{type(prompt).__name__}")
        return self._stream(_prompts([list(prompt)])[0], kwargs)

    def _stream_text(self, prompt: List[int], kwargs: Dict[str, Any]) -> Iterator[str]:
        assert self.tokenizer is not None  # _prompts encoded the text with it
        text = _TextStream(self.tokenizer)
        tokens = self._stream(prompt, kwargs)
        try:
            for token in tokens:
                piece = text.push(token)
                if piece:
                    yield piece
        finally:
            tokens.close()  # closing this iterator early cancels the generation now
        rest = text.finish()
        if rest:
            yield rest

    def _stream(self, prompt: List[int], kwargs: Dict[str, Any]) -> Iterator[int]:
        tokens: "queue.Queue[Tuple[str, Any]]" = queue.Queue()
        stop = threading.Event()

        def on_token(_: int, token: int) -> bool:
            tokens.put(("token", token))
            return not stop.is_set()

        def run() -> None:
            try:
                self.generate([prompt], on_token=on_token, **kwargs)
                tokens.put(("end", None))
            except BaseException as e:  # handed to the consumer
                tokens.put(("error", e))

        worker = threading.Thread(target=run, daemon=True)
        worker.start()
        try:
            while True:
                kind, value = tokens.get()
                if kind == "token":
                    yield value
                elif kind == "error":
                    raise value
                else:
                    return
        finally:
            stop.set()
            worker.join()

    def prompt_logits(self, prompt: Sequence[int]):
        """The logits after every position of PROMPT: numpy float32 [len(prompt), vocab]."""
        with self._lock:
            return self._llm.prompt_logits(_prompts(list(prompt))[0])

    def __repr__(self) -> str:
        return f"<mxmoe.LLM {self.family}: vocab {self.vocab_size}, context {self.max_context}>"
