"""A griffe extension for attnlab's reference site: its docstrings' reStructuredText idioms in
Markdown, so that mkdocstrings renders them as they read in the source.

* a ``>>>`` example block (prompts, continuation lines, expected output, up to a blank
  line) becomes a fenced ``pycon`` block, not a Markdown block quote;
* a line of prose starting with ``>`` stays prose (not a block quote);
* ``:class:`X```, ``:func:`X```, ``:mod:`X``` and the other roles become code spans;
* a paragraph ending in ``::`` introduces an indented literal block: the colon is kept once;
* a simple table (columns ruled by ``=====  =====``) becomes a Markdown table.

The docstrings themselves are not changed; their ``>>>`` examples run as doctests.
"""

from __future__ import annotations

import re

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|data|obj|exc|const):`~?([^`]+)`")
_RULE = re.compile(r"^( *)(=+)( +=+)+ *$")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _fence_doctests(lines: list[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.lstrip().startswith(">>>"):
            if line.lstrip().startswith(">"):  # "(WORLD_SIZE\n> 1)" is prose, not a quote
                line = line.replace(">", "\\>", 1)
            out.append(line)
            i += 1
            continue
        pad = " " * _indent(line)
        block = []
        while i < len(lines) and lines[i].strip():
            block.append(lines[i])
            i += 1
        out += [pad + "```pycon", *block, pad + "```"]
    return out


def _split_row(line: str, spans: list[tuple[int, int]]) -> list[str]:
    cells = []
    for n, (start, _) in enumerate(spans):
        stop = len(line) if n == len(spans) - 1 else spans[n + 1][0]
        cells.append(line[start:stop].strip())
    return cells


def _tables(lines: list[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(lines):
        rule = _RULE.match(lines[i])
        rules = [j for j in range(i, min(len(lines), i + 400)) if _RULE.match(lines[j])]
        if not rule or len(rules) < 3:
            out.append(lines[i])
            i += 1
            continue
        top, head_end, bottom = rules[0], rules[1], rules[2]
        spans = [(m.start(), m.end()) for m in re.finditer(r"=+", lines[top])]
        rows: list[list[str]] = []
        for j in [*range(top + 1, head_end), *range(head_end + 1, bottom)]:
            if not lines[j].strip():
                continue
            cells = _split_row(lines[j], spans)
            if rows and not cells[0] and j > head_end:  # a continuation line
                rows[-1] = [f"{a} {b}".strip() for a, b in zip(rows[-1], cells)]
            else:
                rows.append(cells)
        pad = " " * _indent(lines[top])
        width = len(spans)
        out.append(pad + "| " + " | ".join(rows[0]) + " |")
        out.append(pad + "|" + "---|" * width)
        out += [pad + "| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows[1:]]
        i = bottom + 1
    return out


def markdown_docstring(text: str) -> str:
    """A docstring's reStructuredText idioms in Markdown.

    >>> markdown_docstring("See :func:`run`::\\n\\n    a -> b").splitlines()
    ['See `run`:', '', '    a -> b']
    >>> markdown_docstring(">>> 1 + 1\\n2\\n\\nText.").splitlines()
    ['```pycon', '>>> 1 + 1', '2', '```', '', 'Text.']
    >>> markdown_docstring("(N\\n> 1)").splitlines()[1]
    '\\\\> 1)'
    """
    text = _ROLE.sub(r"`\1`", text)
    text = re.sub(r"(\S)::$", r"\1:", text, flags=re.MULTILINE)
    text = re.sub(r"^( *)::$", "", text, flags=re.MULTILINE)
    return "\n".join(_fence_doctests(_tables(text.splitlines())))


class MarkdownDocstrings(griffe.Extension):
    """Rewrites each object's docstring with :func:`markdown_docstring` before it is parsed."""

    def on_instance(self, *, obj: griffe.Object, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown_docstring(obj.docstring.value)
