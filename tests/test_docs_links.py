"""Every claim in the README and the docs pages keeps its evidence: each link reaches a file and, with an anchor, a
heading there (as GitHub names headings), every result row of ``docs/results.md`` links the section of
``docs/benchmarks.md`` that measured it, and every number such a row or a linked README line states is written in the
sections it links, as written there (so a figure cannot be invented, rounded differently or left behind when a
section changes). Markdown is read with markdown-it-py (a dependency of rich), not by hand-written parsing."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from markdown_it.token import Token

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
BENCHMARKS = DOCS / "benchmarks.md"
RESULTS = DOCS / "results.md"
README = ROOT / "README.md"
# the pages that orient a reader; benchmarks.md (the lab notebook) and the suite reports are evidence, not checked here
PAGES = [README, *sorted(p for p in DOCS.glob("*.md") if p != BENCHMARKS), *sorted(DOCS.glob("recipes/*.md"))]
NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
MD = MarkdownIt("commonmark").enable("table")


@cache
def _tokens(path: Path) -> list[Token]:
    return MD.parse(path.read_text())


def _text(inline: Token) -> str:
    """What a reader sees of an inline run: text and code, link texts included, link targets left out."""
    return "".join(c.content for c in inline.children or () if c.type in ("text", "code_inline"))


def _links(inline: Token) -> list[str]:
    return [str(c.attrs["href"]) for c in inline.children or () if c.type == "link_open"]


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation other than '-' and '_' dropped, spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


@cache
def _sections(path: Path) -> dict[str, str]:
    """Anchor -> the section's markdown, from its heading to the next heading of the same or a higher level."""
    toks, lines = _tokens(path), path.read_text().splitlines()
    heads = [(int(t.tag[1]), _slug(_text(toks[i + 1])), t.map[0]) for i, t in enumerate(toks) if t.type == "heading_open"]
    out: dict[str, str] = {}
    seen: dict[str, int] = {}
    for k, (level, slug, start) in enumerate(heads):
        end = next((h[2] for h in heads[k + 1:] if h[0] <= level), len(lines))
        n = seen[slug] = seen.get(slug, -1) + 1  # GitHub suffixes a repeated heading's anchor with -1, -2, ...
        out[f"{slug}-{n}" if n else slug] = "\n".join(lines[start:end])
    return out


def _target(page: Path, href: str) -> tuple[Path, str] | None:
    """The file and anchor a relative link names; None for a web address."""
    if re.match(r"[a-z][a-z0-9+.-]*:", href):
        return None
    path, _, anchor = href.partition("#")
    return (page if not path else (page.parent / path).resolve()), anchor


def _blocks(path: Path) -> list[Token]:
    """The inline runs a claim lives in: paragraphs, list items' paragraphs, headings and table cells."""
    return [t for t in _tokens(path) if t.type == "inline"]


def _claims(path: Path, body_rows_only: bool = False) -> list[list[Token]]:
    """Each claim as its inline runs: a table row (all its cells) or any other paragraph, item or heading."""
    claims: list[list[Token]] = []
    row: list[Token] | None = None
    head = False
    for t in _tokens(path):
        if t.type in ("thead_open", "thead_close"):
            head = t.type == "thead_open"
        elif t.type == "tr_open":
            row = []
        elif t.type == "tr_close":
            claims += [row] if row is not None and not (head and body_rows_only) else []
            row = None
        elif t.type == "inline" and row is not None:
            row.append(t)
        elif t.type == "inline" and not body_rows_only:
            claims.append([t])
    return claims


def _rows(path: Path) -> list[list[Token]]:
    """Body rows of every table in the page, each as its cells' inline runs."""
    return _claims(path, body_rows_only=True)


def _evidence(page: Path, hrefs: list[str]) -> str:
    """The text the links of a claim point at: a linked section, or a whole linked page without an anchor."""
    parts = []
    for href in hrefs:
        target = _target(page, href)
        if target is None or target[0].suffix != ".md" or not target[0].exists():
            continue
        file, anchor = target
        parts.append(_sections(file).get(anchor, "") if anchor else file.read_text())
    return "\n".join(parts)


def _unbacked_numbers(claim: str, evidence: str) -> list[str]:
    """Numbers of the claim not written as such in the evidence (``38.3`` is not found inside ``138.32``)."""
    return [n for n in dict.fromkeys(NUMBER.findall(claim))
            if not re.search(rf"(?<![\d.,]){re.escape(n)}(?!\d|[.,]\d)", evidence)]


def _benchmark_links(hrefs: list[str]) -> list[str]:
    return [h for h in hrefs if h.split("#")[0].endswith("benchmarks.md") and "#" in h]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_reaches_its_file_and_heading(page: Path) -> None:
    broken = []
    for block in _blocks(page):
        for href in _links(block):
            target = _target(page, href)
            if target is None:
                continue
            file, anchor = target
            if not file.exists():
                broken.append(f"{href}: no file {file}")
            elif anchor and file.suffix == ".md" and anchor not in _sections(file):
                broken.append(f"{href}: no heading #{anchor} in {file.name}")
    assert not broken, "\n".join(broken)


def test_every_result_row_links_the_section_that_measured_it() -> None:
    rows = _rows(RESULTS)
    assert len(rows) >= 50, f"docs/results.md has {len(rows)} result rows; the README's results table had 50"
    unlinked = [_text(row[0]) for row in rows if not _benchmark_links([h for cell in row for h in _links(cell)])]
    assert not unlinked, f"rows without a link to a docs/benchmarks.md section: {unlinked}"


def test_every_number_of_a_result_row_is_in_the_sections_it_links() -> None:
    wrong = []
    for row in _rows(RESULTS):
        hrefs = [h for cell in row for h in _links(cell)]
        claim = " ".join(_text(cell) for cell in row)
        missing = _unbacked_numbers(claim, _evidence(RESULTS, hrefs))
        if missing:
            wrong.append(f"{_text(row[0])[:70]!r}: {missing}")
    assert not wrong, "numbers not found as written in the linked sections:\n" + "\n".join(wrong)


def test_every_number_the_readme_links_to_a_measurement_is_in_that_measurement() -> None:
    linked = [(" ".join(_text(b) for b in claim), [h for b in claim for h in _links(b)]) for claim in _claims(README)]
    linked = [(text, hrefs) for text, hrefs in linked if _benchmark_links(hrefs)]
    assert linked
    wrong = [f"{text[:70]!r}: {missing}" for text, hrefs in linked
             if (missing := _unbacked_numbers(text, _evidence(README, hrefs)))]
    assert not wrong, "numbers not found as written in the linked sections:\n" + "\n".join(wrong)


def test_the_readme_has_five_headline_results_each_linked_to_its_measurement() -> None:
    text = README.read_text()
    section = re.search(r"^## Headline results\n(.*?)(?=^## )", text, re.S | re.M)
    assert section, "README.md has no '## Headline results' section"
    bullets: list[list[Token]] = []
    inside = False
    for t in MD.parse(section.group(1)):
        if t.type in ("list_item_open", "list_item_close") and t.level == 1:
            inside = t.type == "list_item_open"
            bullets += [[]] if inside else []
        elif t.type == "inline" and inside:
            bullets[-1].append(t)
    texts = [" ".join(_text(b) for b in item)[:60] for item in bullets]
    assert len(bullets) == 5, texts
    assert all(_benchmark_links([h for b in item for h in _links(b)]) for item in bullets), texts


def test_the_anchor_rule_matches_headings_the_readme_links() -> None:
    """The slug rule itself, on headings with code, an apostrophe, a colon and '..' (GitHub keeps both dashes)."""
    assert _slug("Rollouts with grouped_sdpa: 2.6-5.0x hf-static") == "rollouts-with-grouped_sdpa-26-50x-hf-static"
    assert _slug("TRM's no-grad mixer (2026-11-24)") == "trms-no-grad-mixer-2026-11-24"
    assert _slug("traded 2016-01-04 .. 2020-08-19") == "traded-2016-01-04--2020-08-19"
    assert _unbacked_numbers("38.3 GiB and 1,000 runs", "peak 138.32 GiB; 1,000 runs") == ["38.3"]
