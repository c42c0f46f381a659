"""infer/textsplit.py: parts that fit, joined back exactly, cut at the best boundaries, balanced."""

from __future__ import annotations

import random
import time

import pytest

from infer.textsplit import split_text
from models.tokenizer import Qwen3Tokenizer


@pytest.fixture(scope="module")
def tok(tokenizer_dir) -> Qwen3Tokenizer:
    return Qwen3Tokenizer.from_folder(tokenizer_dir)


def _check(parts: list[str], text: str, tok, max_tokens: int) -> list[int]:
    """The contract: joined back exactly, no empty part, none over; returns the counts."""
    assert "".join(parts) == text
    assert all(parts) or parts == [""]
    counts = [len(tok.encode(p)) for p in parts]
    assert max(counts) <= max_tokens, counts
    return counts


def _words(rng: random.Random, n: int) -> str:
    vocab = ["the", "prince", "said", "Anna", "Pávlovna", "war", "of", "and", "a", "letter",
             "to", "Moscow", "quietly", "évening", "soldiers", "1805", "—", "“well”"]
    return " ".join(rng.choice(vocab) for _ in range(n))


def _paragraph(rng: random.Random, sentences: int) -> str:
    out = []
    for _ in range(sentences):
        s = _words(rng, rng.randint(6, 14))
        out.append(s[0].upper() + s[1:] + rng.choice([".", "!", "?", ".”"]))
    return " ".join(out)


def _book(rng: random.Random, chapters: int, paragraphs: int = 6) -> str:
    return "".join(f"CHAPTER {roman}\n\n" + "\n\n".join(
        _paragraph(rng, 5) for _ in range(paragraphs)) + "\n\n\n"
        for roman in ["I", "II", "III", "IV", "V", "VI", "VII", "VIII", "IX", "X"][:chapters])


def test_a_text_that_fits_is_one_part(tok):
    assert split_text("", tok, 10) == [""]
    assert split_text("Hello.", tok, 10) == ["Hello."]
    text = _book(random.Random(0), 2)
    assert split_text(text, tok, len(tok.encode(text))) == [text]


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_chapters_are_preferred(tok, newline):
    text = _book(random.Random(1), 6).replace("\n", newline)
    total = len(tok.encode(text))
    parts = split_text(text, tok, int(total / 6 * 2.5))  # 2.5 chapters fit: 3 parts of 2
    _check(parts, text, tok, int(total / 6 * 2.5))
    assert [p.split(newline)[0] for p in parts] == ["CHAPTER I", "CHAPTER III", "CHAPTER V"]
    assert all(p.endswith(newline * 2) for p in parts[:-1])


@pytest.mark.parametrize("heading", ["BOOK ONE: 1805", "Chapter 3", "XIV", "II. A CASE OF IDENTITY",
                                     "第三章 风雪", "## Part two", "FIRST EPILOGUE: 1813 - 20"])
def test_heading_forms(tok, heading):
    rng = random.Random(2)
    a, b = _paragraph(rng, 30), _paragraph(rng, 30)
    text = f"{a}\n\n{_paragraph(rng, 2)}\n\n{heading}\n\n{b}\n\n{_paragraph(rng, 2)}"
    parts = split_text(text, tok, int(len(tok.encode(text)) * 0.7))
    _check(parts, text, tok, int(len(tok.encode(text)) * 0.7))
    assert len(parts) == 2 and parts[1].startswith(heading)


def test_a_book_heading_before_a_chapter_heading_cuts_before_the_book(tok):
    rng = random.Random(3)
    text = (_paragraph(rng, 30) + "\n\nBOOK TWO: 1806\n\n\n\nCHAPTER I\n\n" + _paragraph(rng, 30)
            + "\n\n" + _paragraph(rng, 4))
    parts = split_text(text, tok, int(len(tok.encode(text)) * 0.7))
    assert len(parts) == 2 and parts[1].startswith("BOOK TWO")


def test_paragraphs_then_lines_then_sentences(tok):
    rng = random.Random(4)
    paragraphs = "\n\n".join(_paragraph(rng, 4) for _ in range(40))
    lines = "\n".join(_paragraph(rng, 4) for _ in range(40))
    sentences = " ".join(_paragraph(rng, 4) for _ in range(40))
    cases = ((paragraphs, "\n\n"), (paragraphs.replace("\n", "\r\n"), "\r\n\r\n"),
             (lines, "\n"), (sentences, (".", "!", "?", "”")))
    for text, end in cases:
        max_tokens = len(tok.encode(text)) // 5
        parts = split_text(text, tok, max_tokens)
        _check(parts, text, tok, max_tokens)
        assert len(parts) in (6, 7)
        assert all(p.endswith(end) for p in parts[:-1]), [p[-5:] for p in parts]
        if end == "\n":
            assert not any(p.endswith("\n\n") for p in parts)


def test_whitespace_then_anywhere(tok):
    rng = random.Random(5)
    words = _words(rng, 3000)  # no sentence end at all
    parts = split_text(words, tok, 500)
    _check(parts, words, tok, 500)
    assert all(parts[i + 1][0] == " " for i in range(len(parts) - 1))
    blob = "".join(rng.choice("0123456789abcdef") for _ in range(6000))  # no boundary at all
    parts = split_text(blob, tok, 300)
    _check(parts, blob, tok, 300)


def test_cjk_without_spaces(tok):
    rng = random.Random(6)
    chars = "天地玄黄宇宙洪荒日月盈昃辰宿列张寒来暑往秋收冬藏闰余成岁律吕调阳云腾致雨露结为霜"
    sentences = "".join("".join(rng.choice(chars) for _ in range(rng.randint(8, 20)))
                        + rng.choice("。！？") for _ in range(300))
    parts = split_text(sentences, tok, 400)
    _check(parts, sentences, tok, 400)
    assert all(p[-1] in "。！？" for p in parts[:-1])
    run_on = "".join(rng.choice(chars) for _ in range(5000))  # no punctuation either
    parts = split_text(run_on, tok, 333)
    _check(parts, run_on, tok, 333)


def test_parts_are_balanced(tok):
    rng = random.Random(7)
    text = "\n\n".join(_paragraph(rng, 3) for _ in range(300))
    total = len(tok.encode(text))
    for max_tokens in (total // 3 + 1, total // 7 + 5, 1000):
        counts = _check(split_text(text, tok, max_tokens), text, tok, max_tokens)
        assert len(counts) <= -(-total // max_tokens) + 1
        assert min(counts) >= 0.6 * max(counts), counts  # no tiny tail


def test_tiny_limits_and_multi_token_characters(tok):
    text = "a𠀀b 𪚥. 龘"  # 𠀀 and 𪚥 are 3 tokens each, 龘 two
    _check(split_text(text, tok, 3), text, tok, 3)  # each 3-token character fits alone
    with pytest.raises(ValueError, match=r"max_tokens 2 is too small: '𠀀' alone is 3 tokens"):
        split_text(text, tok, 2)
    assert "".join(split_text("word " * 50, tok, 1)) == "word " * 50


@pytest.mark.parametrize("bad", [0, -3, 2.5, "30k", True])
def test_bad_max_tokens(tok, bad):
    with pytest.raises(ValueError, match="max_tokens must be a positive number"):
        split_text("some text", tok, bad)


def test_other_counters(tok, texts_dir):
    text = (texts_dir / "pep-0498-literal-string-interpolation.txt").read_text(encoding="utf-8")
    inner_counts = _check(split_text(text, tok._tok, 1500), text, tok, 1500)
    assert len(inner_counts) in (5, 6)

    def count(s: str) -> int:
        return len(s.split())

    parts = split_text(text, count, 800)
    assert "".join(parts) == text and max(map(count, parts)) <= 800
    assert len(parts) <= -(-count(text) // 800) + 1
    with pytest.raises(TypeError, match="tokenizer must be"):
        split_text(text, 42, 100)


def test_real_text_cuts_at_chapters(tok, texts_dir):
    text = (texts_dir / "pride_and_prejudice.txt").read_text(encoding="utf-8")
    parts = split_text(text, tok, 30000)
    counts = _check(parts, text, tok, 30000)
    assert len(parts) == -(-sum(counts) // 30000) or len(parts) == -(-sum(counts) // 30000) + 1
    assert all(p.lstrip().upper().startswith("CHAPTER") for p in parts[1:]), \
        [p[:20] for p in parts]


@pytest.mark.slow
def test_war_and_peace_splits_in_seconds(tok, texts_dir):
    text = (texts_dir / "war_and_peace.txt").read_text(encoding="utf-8")
    t0 = time.perf_counter()
    parts = split_text(text, tok, 30000)
    elapsed = time.perf_counter() - t0
    counts = _check(parts, text, tok, 30000)
    assert 26 <= len(parts) <= 27 and min(counts) > 20000
    headings = [p.startswith(("CHAPTER", "BOOK", "FIRST EPILOGUE", "SECOND EPILOGUE"))
                for p in parts[1:]]
    assert sum(headings) >= 0.75 * len(headings)  # the rest at paragraph ends
    assert all(p.endswith("\n\n") for p in parts[:-1])
    assert elapsed < 20, elapsed  # ~4 s on 2 shared CPU cores
