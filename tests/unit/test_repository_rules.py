"""Rules of the repository itself: the code justifies its behaviour with the project's own
docs/ pages, never with a document kept outside the repository, and every docs/ page (and
quoted section) a source file cites exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCE_DIRS = ("cs_daemon", "webapp", "cs_cli", "migrations", "bench", "tests")
# the pages and SDKs are read for outside references too (they are the project's words)
PROSE = ("docs", "sdk/python", "sdk/js/src", "sdk/js/test", "README.md")
SUFFIXES = {".py", ".sql", ".sh", ".toml", ".ini", ".cfg", ".txt", ".md", ".js", ".ts"}
# built by concatenation so that this file does not cite them itself
OUTSIDE = ("decisions " + "§", "interface" + "-spec", "shared/" + "spec")
CITATION = re.compile(r"docs/([A-Za-z0-9_/-]+\.md)(?:,\s*\"([^\"]+)\")?")


def _sources(tops=SOURCE_DIRS):
    for top in tops:
        base = ROOT / top
        for path in sorted(base.rglob("*")) if base.is_dir() else [base]:
            if (path.is_file() and path.suffix in SUFFIXES
                    and not {"__pycache__", "node_modules"} & set(path.parts)):
                yield path


def _words(text: str) -> str:
    """Lower case, one space between words, comment markers of a wrapped line dropped."""
    return " ".join(text.replace("#", " ").replace("`", " ").lower().split())


def _has_section(page: Path, section: str) -> bool:
    """A heading of the page holds the quoted words, or (for a named item of a list, such
    as "Editing a planned message") the page does."""
    text = page.read_text()
    headings = [_words(line) for line in text.splitlines() if line.startswith("#")]
    wanted = _words(section)
    return any(wanted in h for h in headings) or wanted in _words(text)


def test_no_source_file_cites_a_document_outside_the_repository():
    found = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
             for p in _sources(SOURCE_DIRS + PROSE)
             for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
             if any(word in line for word in OUTSIDE)]
    assert not found, "cite a docs/ page instead:\n" + "\n".join(found)


def test_every_cited_docs_page_and_section_exists():
    missing = []
    for path in _sources():
        text = path.read_text(errors="replace")
        for match in CITATION.finditer(text):
            page, section = ROOT / "docs" / match.group(1), match.group(2)
            where = f"{path.relative_to(ROOT)}: docs/{match.group(1)}"
            if not page.is_file():
                missing.append(where)
            elif section and not _has_section(page, section):
                missing.append(f'{where}, "{section}"')
    assert not missing, "cited but not there:\n" + "\n".join(missing)
