"""The spec lives in the repository, in two documents (docs/session-format.md: the file;
docs/spec.md: the behaviour): every relative link of the docs resolves, nothing shipped
cites the old out-of-tree DESIGN.md, and every "spec.md §N" or "session-format.md §N" the
code, tests, schemas and docs cite is a section of that document. Performance hacks have a
register (docs/benchmarks.md): every `# perf:` site names a row of it, and every row
still in force names a site."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "docs" / "spec.md"
FORMAT = ROOT / "docs" / "session-format.md"
BENCHMARKS = ROOT / "docs" / "benchmarks.md"
DOCS = sorted(
    [
        ROOT / "README.md",
        *(ROOT / "docs").glob("*.md"),
        *(ROOT / "schemas").rglob("*.md"),
        *(ROOT / "tiny_agent_nb").rglob("*.md"),
        *(ROOT / "notebooks").glob("*.md"),
    ]
)
# Where a citation of the spec may stand: the package, its tests, its example notebooks,
# its schemas and fixtures, the docs, the benchmarks and the scripts that generate schemas
# and fixtures.
CITING = sorted(
    [
        ROOT / "README.md",
        *(
            path
            for folder in ("tiny_agent_nb", "tests", "notebooks", "schemas", "docs", "bench")
            for path in (ROOT / folder).rglob("*")
            if path.suffix in {".py", ".json", ".md"} and path.is_file()
        ),
        *(ROOT / "scripts").rglob("*.py"),
    ]
)

# [text](target) and ![alt](target); a target ends at whitespace or the closing paren.
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{2,3} (\d+(?:\.\d+)?)\.? ", re.MULTILINE)
# "spec.md §2", "session-format.md §1-§8", "spec.md §2, §6", "[spec §12](docs/spec.md)",
# and, between the two documents, "format §4, rule 10" and "spec §2.1"
CITATION = re.compile(
    r"(?:\b(spec|format) |(spec|session-format)\.md\)?)"
    r"((?:\s*(?:,|-|\u2013|and)?\s*§\d+(?:\.\d+)?)+)"
)
SECTION = re.compile(r"§(\d+(?:\.\d+)?)")
DOCUMENT = {"spec": SPEC, "format": FORMAT, "session-format": FORMAT}


def relative_links(doc: Path) -> list[str]:
    text = doc.read_text()
    # Code spans and fenced blocks hold examples, not links.
    text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    text = re.sub(r"`[^`\n]*`", "", text)
    targets = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # http:, https:, mailto: and anchors inside the page
        targets.append(target.split("#", 1)[0])
    return targets


def sections(document: Path) -> set[str]:
    return set(HEADING.findall(document.read_text()))


def citations(path: Path) -> list[tuple[Path, str]]:
    """(document, section) for each section `path` cites; in the spec's own two documents
    a section cited without a document's name is one of their own."""
    text = path.read_text()
    found = [
        (DOCUMENT[word or name], number)
        for word, name, cited in CITATION.findall(text)
        for number in SECTION.findall(cited)
    ]
    if path in (SPEC, FORMAT):
        found += [(path, number) for number in SECTION.findall(CITATION.sub("", text))]
    return found


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_in_the_docs_resolves_inside_the_repository(doc: Path) -> None:
    broken = [
        target
        for target in relative_links(doc)
        if not (doc.parent / target).exists()
        or not (doc.parent / target).resolve().is_relative_to(ROOT)
    ]
    assert not broken, f"{doc.relative_to(ROOT)} links to missing files: {broken}"


def test_the_link_check_sees_links_and_skips_urls_and_code() -> None:
    """The checker itself: it finds the relative links and leaves out URLs."""
    links = relative_links(FORMAT)
    assert "glossary.md" in links and "spec.md" in links and "../schemas/session/" in links
    assert not any(link.startswith("http") for link in links)


def test_nothing_in_the_package_or_the_schemas_cites_the_out_of_tree_design() -> None:
    citing = [
        f"{path.relative_to(ROOT)}:{number}"
        for folder in ("tiny_agent_nb", "notebooks", "schemas")
        for path in sorted((ROOT / folder).rglob("*"))
        if path.is_file() and path.suffix in {".py", ".json", ".md", ".jsonl", ".ipynb"}
        # errors="replace": some fixtures hold invalid UTF-8 on purpose (a torn tail)
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if re.search(r"\bDESIGN\b", line)
    ]
    assert not citing, f"cite docs/spec.md instead of DESIGN: {citing}"


def test_every_cited_section_of_the_spec_exists() -> None:
    have = {SPEC: sections(SPEC), FORMAT: sections(FORMAT)}
    assert {"1", "2.1", "3", "5", "9", "12", "13"} <= have[SPEC]
    assert {"1", "2.3", "3.3", "4", "5", "6.2", "6.4", "7", "8.1"} <= have[FORMAT]
    cited: dict[tuple[Path, str], set[str]] = {}
    for path in CITING:
        for document, number in citations(path):
            cited.setdefault((document, number), set()).add(str(path.relative_to(ROOT)))
    for document in (SPEC, FORMAT):  # the package does cite both, in many places
        assert len({number for doc, number in cited if doc == document}) >= 8
    missing = {
        f"{document.name} §{number}": sorted(paths)
        for (document, number), paths in cited.items()
        if number not in have[document]
    }
    assert not missing, f"sections cited but not in their document: {missing}"


def test_a_citation_names_the_document_it_cites() -> None:
    """The checker itself: each form of citation is read as the document it names."""
    cited = citations(ROOT / "tests" / "test_docs_links.py")
    assert (SPEC, "12") in cited and (FORMAT, "4") in cited and (SPEC, "2.1") in cited
    assert (FORMAT, "8") in cited and (SPEC, "6") in cited


PERF_SITE = re.compile(r'(?:perf: |register )row "([a-z0-9-]+)"')
REGISTER_ROW = re.compile(r"^\| `([a-z0-9-]+)` \| (.*)$", re.MULTILINE)


def test_every_perf_site_names_a_row_of_the_register_and_every_row_a_site() -> None:
    rows = dict(REGISTER_ROW.findall(BENCHMARKS.read_text()))
    sites: dict[str, list[str]] = {}
    for path in sorted((ROOT / "tiny_agent_nb").rglob("*.py")):
        for key in PERF_SITE.findall(path.read_text()):
            sites.setdefault(key, []).append(str(path.relative_to(ROOT)))
    assert len(sites) >= 15
    unknown = {key: where for key, where in sites.items() if key not in rows}
    assert not unknown, f"# perf: sites naming no row of docs/benchmarks.md: {unknown}"
    in_force = {key for key, rest in rows.items() if "**reverted**" not in rest}
    unmarked = sorted(in_force - set(sites))
    assert not unmarked, f"register rows whose site has no `# perf:` comment: {unmarked}"


def test_no_comment_in_the_package_quotes_a_timing() -> None:
    """Microseconds and milliseconds of a measurement live in the register, not in comments."""
    timing = re.compile(r"~?\d[\d.,]*\s?(?:µs|us)\b|\b\d[\d.,]*\s?ms (?:per|each)\b|a few ms")
    quoting = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "tiny_agent_nb").rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if timing.search(line)
    ]
    assert not quoting, quoting
