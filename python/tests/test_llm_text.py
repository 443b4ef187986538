"""Text in Python: mxmoe.Tokenizer, LLM.tokenizer, text prompts, Completion.text, LLM.chat and
streamed text, on a tiny generated gpt-oss (``mxmoe.generate(..., full=True)``: random weights
and the stand-in byte-level BPE tokenizer in o200k's shape, docs/TOKENIZERS.md).

The reference is the tokenizers package (pinned in python/requirements-test.txt), which loads
the generated tokenizer.json: mxmoe's ids and text must be the library's. The chat text is
checked against harmony written out by hand here, from OpenAI's description of the format.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings

import pytest

if os.environ.get("MXMOE_REQUIRE_INTEGRATIONS") != "1":
    pytest.importorskip("tokenizers")

from tokenizers import Tokenizer as Reference  # noqa: E402

import mxmoe  # noqa: E402
from conftest import tiny_gpt_oss  # noqa: E402

SAMPLING = dict(max_tokens=12, ignore_eos=True)
TEXTS = [
    "Hello, world! How are you doing today?",
    "  leading spaces, tabs\tand\nnew lines\n\n",
    "Grüße aus München: Straße, naïve café",
    "数学是科学的语言。日本語のテキストも。",
    "emoji 👩‍👩‍👧 and flags 🇫🇷🇯🇵",
    "def f(x):\n    return x ** 2  # 12345 67890",
    "<|start|>user<|message|>What is 2+2?<|end|><|start|>assistant",
    "",
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_gpt_oss(tmp_path_factory.mktemp("llm_text") / "tiny-oss", seed=7)


@pytest.fixture(scope="module")
def reference(model_dir):
    return Reference.from_file(os.path.join(model_dir, "tokenizer.json"))


@pytest.fixture(scope="module")
def llm(model_dir):
    return mxmoe.LLM(model_dir, max_context=256, max_batch=2, threads=2)


def test_tokenizer_ids_and_text_are_the_librarys(model_dir, reference):
    tok = mxmoe.Tokenizer(model_dir)
    from_file = mxmoe.Tokenizer(os.path.join(model_dir, "tokenizer.json"))
    ids_of = reference.get_vocab(with_added_tokens=True)
    assert tok.vocab_size == from_file.vocab_size == max(ids_of.values()) + 1
    # The stand-in vocabulary has holes below its special tokens: they are no token.
    assert [i for i in range(-2, tok.vocab_size + 2) if i in tok] == sorted(ids_of.values())
    for text in TEXTS:
        want = reference.encode(text, add_special_tokens=False).ids
        assert tok.encode(text) == want == from_file.encode(text), text
        for skip in (True, False):
            assert tok.decode(want, skip_special_tokens=skip) == reference.decode(
                want, skip_special_tokens=skip), (text, skip)
    # Special tokens as ordinary text, as the library's encode_special_tokens.
    reference.encode_special_tokens = True
    try:
        for text in TEXTS[-2:]:
            assert tok.encode(text, parse_special=False) == reference.encode(
                text, add_special_tokens=False).ids
    finally:
        reference.encode_special_tokens = False
    assert reference.token_to_id("<|start|>") in tok and 10**6 not in tok and "a" not in tok
    # An id that is no token is skipped, as the library does.
    ids = reference.encode("Hello", add_special_tokens=False).ids
    assert tok.decode(ids + [tok.vocab_size + 5]) == reference.decode(ids) == "Hello"


def test_llm_has_the_tokenizer(llm, reference):
    assert isinstance(llm.tokenizer, mxmoe.Tokenizer)
    assert llm.tokenizer.encode(TEXTS[0]) == reference.encode(TEXTS[0], add_special_tokens=False).ids


def test_text_prompts_are_their_ids(llm, reference):
    prompts = TEXTS[:3]
    ids = [reference.encode(p, add_special_tokens=False).ids for p in prompts]
    for p, i in zip(prompts, ids):
        by_text = llm.generate(p, **SAMPLING)[0]
        by_ids = llm.generate(i, **SAMPLING)[0]
        assert by_text.tokens == by_ids.tokens and len(by_text.tokens) == SAMPLING["max_tokens"]
    # A list mixing text and ids, one batch each.
    mixed = llm.generate([prompts[0], ids[1]], **SAMPLING)
    assert [c.tokens for c in mixed] == [llm.generate(i, **SAMPLING)[0].tokens for i in ids[:2]]


def test_completion_text_is_the_decoded_tokens(llm, reference):
    for prompt in TEXTS[:4]:
        done = llm.generate(prompt, max_tokens=24, temperature=1.0, seed=3, ignore_eos=True)[0]
        assert done.text == llm.tokenizer.decode(done.tokens)
        assert done.text == reference.decode(done.tokens, skip_special_tokens=True)


def test_chat_is_generate_on_the_rendered_conversation(llm, reference):
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "What is 2+2?"}]
    harmony = ("<|start|>system<|message|>Be brief.<|end|>"
               "<|start|>user<|message|>What is 2+2?<|end|><|start|>assistant")
    assert mxmoe.render_chat("gpt_oss", messages) == harmony
    ids = reference.encode(harmony, add_special_tokens=False).ids
    answer = llm.chat(messages, **SAMPLING)
    plain = llm.generate(ids, **SAMPLING)[0]
    assert (answer.tokens, answer.finish_reason, answer.text) == (
        plain.tokens, plain.finish_reason, plain.text)
    assert answer.text == reference.decode(answer.tokens, skip_special_tokens=True)
    # (role, content) pairs are the same conversation.
    assert llm.chat([(m["role"], m["content"]) for m in messages], **SAMPLING).tokens == answer.tokens


def test_streamed_text_concatenates_to_the_completion_text(llm):
    for prompt in TEXTS[:4]:
        kwargs = dict(max_tokens=32, temperature=1.0, seed=11, ignore_eos=True)
        done = llm.generate(prompt, **kwargs)[0]
        pieces = list(llm.stream(prompt, **kwargs))
        assert all(isinstance(p, str) and p for p in pieces)
        assert "".join(pieces) == done.text, prompt
        # Given ids, the stream yields ids.
        ids = llm.tokenizer.encode(prompt)
        assert list(llm.stream(ids, **kwargs)) == done.tokens


def test_closing_a_text_stream_early_cancels(llm):
    stream = llm.stream(TEXTS[0], max_tokens=200, ignore_eos=True)
    next(stream)
    stream.close()  # joins the generation; the model is free again
    assert len(llm.generate(TEXTS[0], **SAMPLING)[0].tokens) == SAMPLING["max_tokens"]


def test_invalid_inputs_name_the_argument(llm, model_dir, tmp_path):
    tok = llm.tokenizer
    cases = [
        (TypeError, "path", lambda: mxmoe.Tokenizer(5)),
        (mxmoe.LoadError, "tokenizer.json", lambda: mxmoe.Tokenizer(str(tmp_path))),
        (TypeError, "text", lambda: tok.encode(b"bytes")),
        (ValueError, "text", lambda: tok.encode("lone \ud800 surrogate")),
        (TypeError, "parse_special", lambda: tok.encode("x", parse_special=1)),
        (TypeError, "ids", lambda: tok.decode("abc")),
        (TypeError, "ids", lambda: tok.decode([1, "2"])),
        (ValueError, "ids", lambda: tok.decode([2**40])),
        (TypeError, "prompts[1]", lambda: llm.generate(["hi", 5.0])),
        (ValueError, "prompts[0]", lambda: llm.generate(["\udfff"])),
        (TypeError, "prompt", lambda: llm.stream(5)),
        (TypeError, "messages", lambda: llm.chat("hi")),
        (ValueError, "messages", lambda: llm.chat([])),
        (ValueError, "messages[0]", lambda: llm.chat([{"role": "user"}])),
        (TypeError, "messages[0]['content']", lambda: llm.chat([{"role": "user", "content": 3}])),
        (ValueError, "wizard", lambda: llm.chat([{"role": "wizard", "content": "x"}])),
        (ValueError, "llama", lambda: mxmoe.render_chat("llama", [("user", "x")])),
    ]
    for kind, name, call in cases:
        with pytest.raises(kind, match=name.replace("[", r"\[").replace("]", r"\]")):
            call()


def _copy_without_tokenizer(model_dir, out):
    shutil.copytree(model_dir, out)
    os.remove(os.path.join(out, "tokenizer.json"))
    return str(out)


def test_a_model_without_tokenizer_runs_on_ids(model_dir, tmp_path):
    path = _copy_without_tokenizer(model_dir, tmp_path / "no-tokenizer")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # absent: no warning
        llm = mxmoe.LLM(path, max_context=64, threads=2)
    assert llm.tokenizer is None
    done = llm.generate([5, 17, 42], **SAMPLING)[0]
    assert done.text is None and len(done.tokens) == SAMPLING["max_tokens"]
    with pytest.raises(ValueError, match=r"prompts\[0\].*tokenizer"):
        llm.generate("hello")
    with pytest.raises(ValueError, match="tokenizer"):
        llm.chat([{"role": "user", "content": "hi"}])


def test_an_unsupported_tokenizer_warns_once(model_dir, tmp_path):
    path = _copy_without_tokenizer(model_dir, tmp_path / "unigram")
    with open(os.path.join(path, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump({"model": {"type": "Unigram", "vocab": [["a", 0.0]]}}, f)
    with pytest.raises(mxmoe.UnsupportedTokenizer, match="Unigram"):
        mxmoe.Tokenizer(path)
    with pytest.warns(RuntimeWarning, match="Unigram") as caught:
        llm = mxmoe.LLM(path, max_context=64, threads=2)
    assert len(caught) == 1 and llm.tokenizer is None
    assert llm.generate([5, 17], **SAMPLING)[0].text is None
