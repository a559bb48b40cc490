"""The texts a survey reads: a corpus file streamed and checked line by line, attnlab's own
prose as a built-in corpus, and the first token ids of a text without tokenizing it whole.

**Corpus**: a ``.txt`` file (one text a line; blank lines skipped) or a ``.jsonl`` file
(one JSON object a line with a string ``text``); or :func:`builtin_corpus`, the
paragraphs of attnlab's own docstrings. A bad line is refused before any work, naming
its line number.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from attnlab._errors import Error
from attnlab.analysis.literature import literature_ids

__all__ = ["CHARS_PER_TOKEN", "Corpus", "builtin_corpus", "first_ids"]


class Corpus:
    """The texts of a ``.txt`` (one a line) or ``.jsonl`` (``{"text": ...}`` a line) file,
    read as a stream; or a list of texts given in memory (``Corpus.of``).

    :meth:`scan` reads the whole file once, checks every line (a bad line raises
    ``ValueError`` naming ``what``, the file and the line number) and returns the number
    of texts and the sha256 of the file; iterating yields the texts in order, again
    streamed.
    """

    def __init__(self, path: str | os.PathLike[str], *, what: str = "--texts") -> None:
        self.path: Path | None = Path(path)
        self.what = what
        self._texts: list[str] | None = None
        self.name = str(path)
        suffix = self.path.suffix.lower()
        if suffix not in (".txt", ".jsonl"):
            raise ValueError(f"{what} {path}: must be a .txt file (one text a line) or a "
                             f".jsonl file (a JSON object with a \"text\" string a line), "
                             f"got {suffix or 'no extension'}")
        self.jsonl = suffix == ".jsonl"
        if not self.path.exists():
            raise FileNotFoundError(f"{what} {path}: no such file")
        if self.path.is_dir():
            raise ValueError(f"{what} {path}: is a directory, not a corpus file")

    @classmethod
    def of(cls, texts: Sequence[str], name: str = "texts") -> Corpus:
        """A corpus of texts held in memory (each checked like a file's line)."""
        self = cls.__new__(cls)
        self.path, self.what, self.name, self.jsonl = None, name, name, False
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise TypeError(f"{name}[{i}] must be a str, got {type(t).__name__}")
        self._texts = [t for t in texts if t.strip()]
        return self

    def _lines(self) -> Iterator[tuple[int, str]]:
        if self._texts is not None:
            yield from enumerate(self._texts, 1)
            return
        if self.path is None:  # (a corpus holds its texts, or the path of its file)
            raise Error(f"{self.what} holds neither its texts nor the path of its file")
        with open(self.path, "rb") as f:
            for number, raw in enumerate(f, 1):
                try:
                    line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
                except UnicodeDecodeError as exc:
                    raise ValueError(f"{self.what} {self.path}: line {number} is not UTF-8 "
                                     f"(byte 0x{raw[exc.start]:02x} at column "
                                     f"{exc.start + 1})") from None
                yield number, line.rstrip("\r\n")

    def _text(self, number: int, line: str) -> str | None:
        if not line.strip():
            return None
        if not self.jsonl:
            return line
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{self.what} {self.path}: line {number} is not valid JSON "
                             f"({exc.msg} at column {exc.colno})") from None
        if not isinstance(obj, dict) or "text" not in obj:
            raise ValueError(f"{self.what} {self.path}: line {number} has no \"text\" field "
                             f"(each line must be a JSON object with a \"text\" string)")
        text = obj["text"]
        if not isinstance(text, str):
            raise ValueError(f"{self.what} {self.path}: line {number}: \"text\" must be a "
                             f"string, got {type(text).__name__}")
        return text if text.strip() else None

    def __iter__(self) -> Iterator[str]:
        for number, line in self._lines():
            text = self._text(number, line)
            if text is not None:
                yield text

    def scan(self) -> tuple[int, str]:
        """(number of texts, sha256 of the corpus), every line checked."""
        h = hashlib.sha256()
        count = 0
        for number, line in self._lines():
            h.update(line.encode("utf-8") + b"\n")
            if self._text(number, line) is not None:
                count += 1
        if count == 0:
            where = f"{self.what} {self.path}" if self.path is not None else self.what
            raise ValueError(f"{where}: holds no text (every line is blank); give one text a "
                             f"line" + (", as {\"text\": ...}" if self.jsonl else ""))
        return count, h.hexdigest()


_SKIP_LINE = re.compile(r"^\s*(>>>|\.\.\.|={3,}|-{3,}|\+[-=+]+)")


def builtin_corpus(min_chars: int = 300) -> list[str]:
    """attnlab's own prose: every paragraph of at least ``min_chars`` characters of the
    docstrings of the package's modules, classes and functions, whitespace collapsed, in
    file order (paragraphs holding doctest lines or table rules are left out). It ships
    with attnlab, so it is the same wherever attnlab of one version is installed."""
    root = Path(__file__).resolve().parent.parent
    out: list[str] = []
    for path in sorted(root.rglob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (OSError, SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                     ast.AsyncFunctionDef)):
                continue
            doc = ast.get_docstring(node)
            if not doc:
                continue
            for block in re.split(r"\n\s*\n", doc):
                lines = block.splitlines()
                if any(_SKIP_LINE.match(line) for line in lines):
                    continue
                text = " ".join(" ".join(lines).split())
                if len(text) >= min_chars:
                    out.append(text)
    return out


#: A text is tokenized from a prefix of at least this many characters per kept token (a
#: 10 MB line of which 64 tokens are kept is not tokenized whole).
CHARS_PER_TOKEN = 32
_SPACE = re.compile(r"\s")


def first_ids(tokenizer: Any, text: str, n: int) -> tuple[list[int], bool]:
    """``(literature_ids(tokenizer, text)[:n], whether the text has more)`` without
    tokenizing a long text whole.

    The text is cut at its first whitespace after ``CHARS_PER_TOKEN · n`` characters (the
    budget grows ×4 until the cut keeps more than ``n + 1`` ids, or the whole text is
    read). A cut before whitespace leaves every word before it as it was — the
    pre-tokenizers of byte-level BPE, WordPiece and SentencePiece all split there — so the
    ids kept are those of the whole text.

    >>> class Words:  # one id per word, like a word-level tokenizer
    ...     def encode(self, text): return [0] + [len(w) for w in text.split()]
    >>> text = "ab " * 1_000_000  # 3 MB
    >>> first_ids(Words(), text, 4)
    ([0, 2, 2, 2], True)
    """
    budget = CHARS_PER_TOKEN * n
    while True:
        m = _SPACE.search(text, budget) if budget < len(text) else None
        part = text if m is None else text[:m.start()]
        ids = literature_ids(tokenizer, part)
        if m is None or len(ids) > n + 1:
            return ids[:n], len(ids) > n
        budget *= 4

