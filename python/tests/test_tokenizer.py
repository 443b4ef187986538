"""mxmoe's tokenizer (src/text/, `mxmoe tokenize`) against the Hugging Face tokenizers library
(the pinned `tokenizers`, an independent implementation): small BPE models trained here, on a
multilingual corpus, in the shapes of gpt-oss (o200k's Split + ByteLevel), Qwen2/3 (NFC, its
Split + ByteLevel) and Mixtral (Metaspace or Prepend/Replace, byte fallback), saved as
tokenizer.json; every corpus line must encode to the library's ids and decode to its text.
Also the stand-in tokenizer `mxmoe generate --full` writes: the library loads it and agrees."""

from __future__ import annotations

import json
import subprocess
import unicodedata

import pytest

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers  # noqa: E402
from tokenizers import pre_tokenizers, trainers  # noqa: E402

O200K = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
         r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+"
         r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+"
         r"[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
         r"|\s*[\r\n]+|\s+(?!\S)|\s+")

CORPUS = [
    "Hello, world! How are you doing today?",
    "The quick brown fox jumps over the lazy dog. THE QUICK BROWN FOX'S DEN.",
    "I'm sure they'll say we've done what you'd've LIKED.",
    "Grüße aus München: Die Straße ist schön, Äpfel und Öl kosten 3,50 €.",
    "Ein Fußgängerübergang über die Brücke.",
    "机器学习是人工智能的一个分支。我们今天讨论混合专家模型。",
    "日本語のテキスト：東京は晴れです。カタカナとひらがな、漢字。",
    "مرحبا بالعالم، هذا نص عربي للاختبار.",
    "Emoji: 😀🎉👍🏽 👨‍👩‍👧‍👦 ❤️ and flags 🇩🇪🇯🇵",
    "def f(x):\n    return x ** 2 + 3 * x - 1  # a comment\n",
    "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }",
    "    leading spaces, trailing spaces    ",
    "tabs\tand\t\ttabs\nnew\n\n\nlines\r\nwindows",
    "Digits: 1234567890 3.14159 2026-12-01 +49 (0)30 12345",
    "1 22 333 4444 55555 666666",
    "Mixed中文English混合テキスト123abc",
    "e\u0301 versus \u00e9 (NFC), \ufb01 ligature, \u212b angstrom",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|><|endoftext|>text between<|endoftext|>",
    "a <think>reasoning</think> b",
    "x <mask> y<mask>z",
    "   ",
    "a",
    "Zero\u200bwidth and non\u00a0breaking space",
    "ÀÉÎÕÜ àéîõü ñ ç ß ø å",
    "www.example.com/path?query=1&b=2#frag",
    "!!!??? ... --- ***",
    "supercalifragilisticexpialidocious " * 3,
]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def add_tokens(tok: Tokenizer) -> None:
    tok.add_special_tokens(SPECIALS)
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=True, special=True)])
    tok.add_tokens([AddedToken("<think>", special=False), AddedToken("</think>", special=False)])


def byte_level(pattern: str, nfc: bool) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    if nfc:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=700, min_frequency=1, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 3, trainer=trainer)
    add_tokens(tok)
    return tok


def gpt2_byte_level() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 3, trainer=trainer)
    add_tokens(tok)
    return tok


def with_byte_fallback(tok: Tokenizer, merges_as_strings: bool) -> Tokenizer:
    """TOK with the 256 <0xNN> tokens, byte_fallback and an <unk>: Llama/Mixtral's model."""
    doc = json.loads(tok.to_str())
    vocab = doc["model"]["vocab"]
    for b in range(256):
        vocab.setdefault(f"<0x{b:02X}>", len(vocab))
    vocab.setdefault("<unk>", len(vocab))
    doc["model"].update(byte_fallback=True, unk_token="<unk>", fuse_unk=True)
    if merges_as_strings:
        doc["model"]["merges"] = [" ".join(m) for m in doc["model"]["merges"]]
    out = Tokenizer.from_str(json.dumps(doc))
    add_tokens(out)
    return out


def metaspace(legacy: bool) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    if legacy:  # Mixtral's published tokenizer.json
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                         decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    else:  # what newer conversions write
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=False)
        tok.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace(
            replacement="▁", prepend_scheme="first", split=False)])
    # A small alphabet: rare characters (emoji, some CJK) take the byte fallback.
    trainer = trainers.BpeTrainer(vocab_size=500, limit_alphabet=120, show_progress=False)
    tok.train_from_iterator(CORPUS * 3, trainer=trainer)
    return with_byte_fallback(tok, merges_as_strings=legacy)


TOKENIZERS = {
    "o200k_style": lambda: byte_level(O200K, nfc=False),
    "qwen2_style": lambda: byte_level(QWEN2, nfc=True),
    "gpt2_byte_level": gpt2_byte_level,
    "mixtral_legacy": lambda: metaspace(legacy=True),
    "mixtral_metaspace": lambda: metaspace(legacy=False),
}


def mxmoe_json(cli: str, *args: str) -> dict:
    run = subprocess.run([cli, "tokenize", *args, "--json"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


@pytest.fixture(scope="module", params=sorted(TOKENIZERS))
def saved(request, tmp_path_factory):
    tok = TOKENIZERS[request.param]()
    path = tmp_path_factory.mktemp(request.param) / "tokenizer.json"
    tok.save(str(path))
    return tok, str(path)


def test_encode_equals_the_library_on_every_line(cli, saved):
    tok, path = saved
    for line in CORPUS:
        want = tok.encode(line, add_special_tokens=False).ids
        got = mxmoe_json(cli, "--model", path, "--prompt", line)["ids"]
        assert got == want, f"line {line!r}"


def test_no_special_equals_the_library(cli, saved):
    tok, path = saved
    tok.encode_special_tokens = True
    try:
        for line in CORPUS[17:21]:
            want = tok.encode(line, add_special_tokens=False).ids
            got = mxmoe_json(cli, "--model", path, "--prompt", line, "--no-special")["ids"]
            assert got == want, f"line {line!r}"
    finally:
        tok.encode_special_tokens = False


def test_decode_equals_the_library_and_round_trips(cli, saved):
    tok, path = saved
    for line in CORPUS:
        ids = tok.encode(line, add_special_tokens=False).ids
        if not ids:
            continue
        want = tok.decode(ids, skip_special_tokens=False)
        got = mxmoe_json(cli, "--model", path, "--decode", ",".join(map(str, ids)))["text"]
        assert got == want, f"line {line!r}"
        skipped = tok.decode(ids, skip_special_tokens=True)
        got = mxmoe_json(cli, "--model", path, "--decode", ",".join(map(str, ids)),
                         "--no-special")["text"]
        assert got == skipped, f"line {line!r}"


def test_a_long_prompt_file_equals_the_library(cli, saved, tmp_path):
    tok, path = saved
    text = "\n".join(CORPUS * 40) + " " + "x" * 10000
    prompt = tmp_path / "prompt.txt"
    prompt.write_text(text, encoding="utf-8")
    got = mxmoe_json(cli, "--model", path, "--prompt-file", str(prompt))["ids"]
    assert got == tok.encode(text, add_special_tokens=False).ids


@pytest.mark.parametrize("preset,vocab", [("gpt-oss-20b", 1000), ("qwen3-30b-a3b", 1000),
                                          ("qwen3-30b-a3b", 300)])
def test_generated_stand_in_tokenizer_agrees(cli, tmp_path, preset, vocab):
    out = tmp_path / "model"
    run = subprocess.run([cli, "synth", "--preset", preset, "--full", "--layers", "1",
                          "--experts", "8", "--hidden", "64", "--intermediate", "64", "--heads",
                          "4", "--kv-heads", "2", "--head-dim", "16", "--vocab", str(vocab),
                          "--out", str(out)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    assert tok.get_vocab_size(with_added_tokens=True) <= vocab
    merges = json.loads((out / "tokenizer.json").read_text())["model"]["merges"]
    if vocab >= 1000:
        assert len(merges) > 50  # a real BPE: words become fewer tokens than bytes
    for line in CORPUS:
        want = tok.encode(line, add_special_tokens=False).ids
        assert max(want, default=0) < vocab
        assert mxmoe_json(cli, "--model", str(out), "--prompt", line)["ids"] == want
        if want:  # Qwen's normalizer is NFC: the text comes back composed
            back = unicodedata.normalize("NFC", line) if preset.startswith("qwen") else line
            assert tok.decode(want, skip_special_tokens=False) == back
