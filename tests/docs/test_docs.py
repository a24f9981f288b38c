"""The docs say what is true of this checkout: the test counts they give are what pytest collects, and every
section a doc or a message points at (``docs/NAME.md#anchor``) is a heading of that doc."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
COLLECTED = re.compile(r"^(\d+) tests? collected", re.MULTILINE)
# the sentences whose counts these tests hold true (README.md's and docs/serve.md's)
SUITE = re.compile(r"The suite has (\d+) tests")
ROUTE = re.compile(r"The route gate runs (\d+) tests, `tests/route` \((\d+):.*?`tests/serve` \((\d+):", re.DOTALL)
# a pointer at a section: in Python sources and the README as docs/NAME.md#anchor, in a doc as a link (NAME.md#anchor)
POINTER = re.compile(r"docs/([\w-]+\.md)#([\w-]+)")
LINK = re.compile(r"\]\(([\w-]+\.md)#([\w-]+)\)")
STALE = "{doc} says {said} {what}; `python -m pytest --collect-only -q {paths}` collects {count}: write {count} there"


def collected(*paths: str) -> int:
    """How many tests pytest collects under ``paths`` (the whole suite when none), as the docs' command counts them."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS")}
    argv = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *paths]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=env, check=False)
    found = COLLECTED.search(done.stdout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert found, done.stdout[-3000:]
    return int(found.group(1))


def said(pattern: re.Pattern[str], doc: Path) -> re.Match[str]:
    found = pattern.search(doc.read_text(encoding="utf-8"))
    assert found, f"{doc.relative_to(ROOT)}: no sentence matching {pattern.pattern!r}"
    return found


def test_the_readme_gives_the_suites_count() -> None:
    count = collected()
    n = int(said(SUITE, ROOT / "README.md").group(1))
    assert n == count, STALE.format(doc="README.md", said=n, what="tests", paths="", count=count)


def test_docs_serve_gives_the_route_gates_counts() -> None:
    found = said(ROUTE, DOCS / "serve.md")
    for said_count, paths in zip(found.groups(), (("tests/route", "tests/serve"), ("tests/route",), ("tests/serve",)), strict=True):
        count = collected(*paths)
        assert int(said_count) == count, STALE.format(doc="docs/serve.md", said=said_count, what=f"for {' '.join(paths)}", paths=" ".join(paths), count=count)


def anchors(doc: Path) -> set[str]:
    """The anchors GitHub gives a markdown file's headings (lowercased; punctuation but '-' and '_' dropped; spaces as
    '-'; a repeated one suffixed -1, -2, ...), headings in fenced code left out; and each ``<a id="...">`` (a renamed
    heading's old anchor, kept for the links that use it)."""
    seen: Counter[str] = Counter()
    out: set[str] = set()
    fenced = False
    for line in doc.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            out.update(re.findall(r'<a id="([\w-]+)"></a>', line))
        heading = re.match(r"#{1,6} +(.*?) *#* *$", line)
        if fenced or not heading:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).lower()).replace(" ", "-")
        out.add(slug if not seen[slug] else f"{slug}-{seen[slug]}")
        seen[slug] += 1
    return out


def pointers() -> list[tuple[str, str, str]]:
    """(where, doc, anchor) for every section pointed at: by the code's messages, the README and the docs' links."""
    found = []
    sources = [*sorted((ROOT / "ci").rglob("*.py")), *sorted((ROOT / "serve").rglob("*.py")), ROOT / "README.md"]
    for path in sources:
        found += [(str(path.relative_to(ROOT)), d, a) for d, a in POINTER.findall(path.read_text(encoding="utf-8"))]
    for path in sorted(DOCS.glob("*.md")):
        found += [(str(path.relative_to(ROOT)), d, a) for d, a in LINK.findall(path.read_text(encoding="utf-8"))]
    return found


def test_every_section_pointed_at_is_a_heading_of_its_doc() -> None:
    """A message that names its next step names a section (docs/gates.md#what-each-check-reaches, issue 37): it must
    be there, under that heading, for the reader who follows it."""
    found = pointers()
    assert any(doc == "patches.md" and anchor == "add-a-patch" for _, doc, anchor in found)  # the scan sees the messages
    missing = [f"{where}: {doc}#{anchor}" for where, doc, anchor in found if not (DOCS / doc).is_file() or anchor not in anchors(DOCS / doc)]
    assert missing == []


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("## nox -s gate_selftest: gates that can fail", "nox--s-gate_selftest-gates-that-can-fail"),
        ("## perf: the seeds' performance claims", "perf-the-seeds-performance-claims"),
        ("### Measured", "measured"),
    ],
)
def test_anchors_are_githubs(tmp_path: Path, heading: str, anchor: str) -> None:
    doc = tmp_path / "d.md"
    doc.write_text(f"{heading}\n\n```\n# not a heading\n<a id=\"fenced\"></a>\n```\n{heading}\n<a id=\"old-name\"></a>\n")
    assert anchors(doc) == {anchor, f"{anchor}-1", "old-name"}
