"""A tiny document model rendered to both Markdown and self-contained HTML.

Building the report once as blocks and rendering twice keeps report.md and report.html identical in
content without depending on a Markdown-to-HTML converter being installed.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path

from distlab.atomic import atomic_write_text as _atomic_write_text


@dataclass(frozen=True)
class Heading:
    text: str
    level: int = 2


@dataclass(frozen=True)
class Para:
    text: str


@dataclass(frozen=True)
class Table:
    headers: list[str]
    rows: list[list[str]]


@dataclass(frozen=True)
class Image:
    path: str  # relative to the report file, so the folder can be moved or zipped as a whole
    alt: str


Block = Heading | Para | Table | Image


def to_markdown(blocks: list[Block]) -> str:
    parts = []
    for b in blocks:
        if isinstance(b, Heading):
            parts.append(f"{'#' * b.level} {b.text}")
        elif isinstance(b, Para):
            parts.append(b.text)
        elif isinstance(b, Table):
            parts.append(_md_table(b))
        else:
            parts.append(f"![{b.alt}]({b.path})")
    return "\n\n".join(parts) + "\n"


def to_html(blocks: list[Block], title: str) -> str:
    body = []
    for b in blocks:
        if isinstance(b, Heading):
            body.append(f"<h{b.level}>{html.escape(b.text)}</h{b.level}>")
        elif isinstance(b, Para):
            body.append(f"<p>{html.escape(b.text)}</p>")
        elif isinstance(b, Table):
            head = "".join(f"<th>{html.escape(h)}</th>" for h in b.headers)
            rows = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in b.rows)
            body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>")
        else:
            body.append(f'<figure><img src="{html.escape(b.path)}" alt="{html.escape(b.alt)}">'
                        f"<figcaption>{html.escape(b.alt)}</figcaption></figure>")
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{_CSS}</style></head>\n<body>\n"
            + "\n".join(body) + "\n</body></html>\n")


def atomic_write_text(path: Path, text: str) -> None:
    """Readers never see a half-written report: write a sibling temp file, then rename over the target."""
    _atomic_write_text(path, text)


def _md_table(t: Table) -> str:
    def row(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    lines = [row(t.headers), "|" + "|".join("---" for _ in t.headers) + "|"]
    lines += [row(r) for r in t.rows]
    return "\n".join(lines)


_CSS = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}"
        "table{border-collapse:collapse;margin:1em 0;font-size:0.9em}"
        "th,td{border:1px solid #ccc;padding:4px 8px;text-align:right}"
        "th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}"
        "img{max-width:100%}figure{margin:1em 0}figcaption{color:#666;font-size:0.85em}")
