"""mxmoe.Tokenizer: a checkpoint's Hugging Face tokenizer (tokenizer.json) run by mxmoe itself
(C++: include/mxmoe/tokenizer.hpp; what is supported is in docs/TOKENIZERS.md), and the
helpers mxmoe.LLM uses for text: streamed decoding and the families' chat formats.

    tok = mxmoe.Tokenizer("/tmp/tiny-oss")        # the directory or its tokenizer.json
    ids = tok.encode("Hello <|end|>")            # special tokens parsed
    tok.decode(ids)                              # special tokens skipped
"""

from __future__ import annotations

from typing import Any, Iterable, List, Mapping, Sequence, Tuple

from . import _mxmoe
from . import _bool, _int, _path, PathLike

_INT32 = (-(2**31), 2**31 - 1)


def _text(value: Any, argument: str) -> str:
    """VALUE as text the library takes: a str that is valid UTF-8 (no lone surrogates)."""
    if not isinstance(value, str):
        raise TypeError(f"{argument}: expected a str, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"{argument}: not valid text ({e.reason} at index {e.start})") from None
    return value


def _ids(value: Any, argument: str) -> List[int]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(f"{argument}: expected a sequence of token ids, got {type(value).__name__}")
    return [_int(t, f"{argument} token", *_INT32) for t in value]


class Tokenizer:
    """A tokenizer.json read by mxmoe: ``Tokenizer(path)`` takes the file or a checkpoint
    directory holding it. Encoding equals the tokenizers library's ``encode(text,
    add_special_tokens=False).ids`` and decoding its ``decode(ids, skip_special_tokens)``.

    Raises :class:`LoadError` for a missing or malformed file and
    :class:`UnsupportedTokenizer` for one that uses a stage mxmoe does not implement.
    """

    def __init__(self, path: PathLike) -> None:
        self._tok = _mxmoe._Tokenizer(_path(path, "path"))

    def encode(self, text: str, parse_special: bool = True) -> List[int]:
        """The token ids of TEXT. With ``parse_special``, special tokens written in the text
        ("<|start|>") become their ids; without, they are ordinary text. No BOS is added."""
        return list(self._tok.encode(_text(text, "text"), _bool(parse_special, "parse_special")))

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """The text of IDS; special tokens left out unless ``skip_special_tokens=False``. Ids
        that are no token (a model's vocabulary padding) are skipped, as the library does."""
        return self._tok.decode(_ids(ids, "ids"), _bool(skip_special_tokens, "skip_special_tokens"))

    def __contains__(self, token: Any) -> bool:
        """Whether TOKEN (an id) is a token of the vocabulary or an added token."""
        if isinstance(token, bool) or not isinstance(token, int):
            return False
        return _INT32[0] <= token <= _INT32[1] and self._tok.contains(token)

    @property
    def vocab_size(self) -> int:
        """One more than the highest token id (a model's embedding may have more rows)."""
        return self._tok.vocab_size

    def __repr__(self) -> str:
        return f"<mxmoe.Tokenizer: vocab {self.vocab_size}>"


class _TextStream:
    """Text of tokens pushed one at a time: each push returns what is complete (never half a
    UTF-8 character); the pieces and finish() concatenate to decode(all ids)."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self._stream = _mxmoe._TextStream(tokenizer._tok, True)

    def push(self, token: int) -> str:
        return self._stream.push(token)

    def finish(self) -> str:
        return self._stream.finish()


def _messages(messages: Any) -> List[Tuple[str, str]]:
    """A conversation: a list of {"role": ..., "content": ...} dicts (or (role, content) pairs)."""
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, (list, tuple)):
        raise TypeError("messages: expected a list of {'role': ..., 'content': ...} dicts, got "
                        f"{type(messages).__name__}")
    if not messages:
        raise ValueError("messages: expected at least one message")
    out = []
    for i, m in enumerate(messages):
        if isinstance(m, Mapping):
            missing = [k for k in ("role", "content") if k not in m]
            if missing:
                raise ValueError(f"messages[{i}]: missing {', '.join(repr(k) for k in missing)}")
            role, content = m["role"], m["content"]
        elif isinstance(m, (list, tuple)) and len(m) == 2:
            role, content = m
        else:
            raise TypeError(f"messages[{i}]: expected a dict with 'role' and 'content', got "
                            f"{type(m).__name__}")
        out.append((_text(role, f"messages[{i}]['role']"),
                    _text(content, f"messages[{i}]['content']")))
    return out


def render_chat(model_type: str, messages: Any, add_generation_prompt: bool = True,
                enable_thinking: bool = True) -> str:
    """MESSAGES (a list of {"role", "content"} dicts) as the text the family MODEL_TYPE
    (config.json's model_type, ``LLM.family``: "gpt_oss" harmony, "qwen3_moe" ChatML,
    "mixtral" [INST]) was trained on, for ``Tokenizer.encode`` with special tokens parsed.
    ``add_generation_prompt`` ends with the start of the assistant's turn;
    ``enable_thinking=False`` writes Qwen3's empty thinking block. ValueError names an unknown
    model type, a role the format has no place for, or [INST] turns that do not alternate."""
    return _mxmoe._render_chat(_text(model_type, "model_type"), _messages(messages),
                               _bool(add_generation_prompt, "add_generation_prompt"),
                               _bool(enable_thinking, "enable_thinking"))
