"""What the repository says to a newcomer: the README's first lines, the CLI's --help, and
what git ignores after the example notebooks ran in a clone."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tiny_agent_nb.cli import main
from tiny_agent_nb.words import whole_sentences

ROOT = Path(__file__).resolve().parent.parent


def test_the_readme_opens_with_the_two_commands_then_the_venv_line_for_pep_668() -> None:
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", readme, re.DOTALL)
    assert blocks[:2] == [
        "python3 -m pip install -e '.[demo]' && tiny-agent-nb demo\n",
        "python3 -m pip install -e '.[test]' && python3 -m pytest\n",
    ]
    # Nothing but the title before the two commands, and no third command block before
    # the prose: the venv line for PEP 668 systems is inline, in the paragraph right after.
    assert readme.index(blocks[0]) < 40
    after = readme[readme.index(blocks[1]) + len(blocks[1]) + 3 :].lstrip()
    paragraph = after.split("\n\n")[0]
    assert "externally-managed-environment" in paragraph and "PEP 668" in paragraph
    assert "`python3 -m venv .venv && . .venv/bin/activate`" in paragraph


def help_text(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--help"])
    assert exited.value.code == 0
    return capsys.readouterr().out


def test_the_cli_help_says_what_each_command_writes(capsys: pytest.CaptureFixture[str]) -> None:
    words = " ".join(help_text([], capsys).split())
    assert "without modifying them" not in words  # demo and salvage do write
    assert "inspect, timeline and usage only read FILE" in words
    assert "salvage and fork read FILE and write only the new file NEW" in words
    assert "demo writes only in its own directory" in words


@pytest.mark.parametrize("argv", [[], ["salvage"], ["inspect"]])
def test_the_cli_help_lists_every_exit_code(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    out = help_text(argv, capsys)
    for code in ("0", "2", "3", "4", "5", "141"):
        assert re.search(rf"^  {code} +\S", out, re.MULTILINE), (code, out)
    assert "5 salvage or fork could not write NEW" in " ".join(out.split())


def test_the_readme_documents_every_exit_code() -> None:
    words = " ".join((ROOT / "README.md").read_text().split())
    assert "5 `salvage` or `fork` could not write NEW" in words and "141 the output" in words


@pytest.mark.parametrize(
    "left_behind",
    [
        "notebooks/quickstart.agent.jsonl",
        "notebooks/quickstart.agent.1.jsonl",  # after `%agent new`
        "notebooks/crash-and-resume.agent.jsonl",
        "notebooks/numbers.csv",  # quickstart's data
        "notebooks/marker.txt",  # crash-and-resume's marker
        "notebooks/.ipynb_checkpoints/quickstart-checkpoint.ipynb",
        "analysis.agent.jsonl",
    ],
)
def test_what_running_an_example_in_a_clone_leaves_is_ignored_by_git(left_behind: str) -> None:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    ignored = subprocess.run(
        ["git", "-C", str(ROOT), "check-ignore", "--no-index", "-q", left_behind], check=False
    )
    assert ignored.returncode == 0, f"{left_behind} would show up in git status"


@pytest.mark.parametrize("made", [".venv/pyvenv.cfg", ".venv/bin/python3"])
def test_the_virtual_environment_the_readme_makes_is_ignored_by_git(made: str) -> None:
    """The README says `python3 -m venv .venv` in the checkout on PEP 668 systems."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    assert "python3 -m venv .venv" in (ROOT / "README.md").read_text()
    ignored = subprocess.run(
        ["git", "-C", str(ROOT), "check-ignore", "--no-index", "-q", made], check=False
    )
    assert ignored.returncode == 0, f"{made} would show up in git status"


def test_the_examples_themselves_are_not_ignored() -> None:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    for name in ("quickstart.ipynb", "crash-and-resume.ipynb", "README.md"):
        path = f"notebooks/{name}"
        ignored = subprocess.run(
            ["git", "-C", str(ROOT), "check-ignore", "--no-index", "-q", path], check=False
        )
        assert ignored.returncode == 1, path


@pytest.mark.parametrize(
    ("text", "limit", "shown"),
    [
        ("One. Two.", 20, "One. Two."),
        ("... is a required property. The tool did not run.", 40, "... is a required property. …"),
        ("no sentence end within the limit here", 20, "no sentence end …"),
        ("x" * 30, 10, "xxxxxxxx …"),
    ],
)
def test_a_reason_is_cut_after_a_whole_sentence_or_a_word_and_marked(
    text: str, limit: int, shown: str
) -> None:
    assert whole_sentences(text, limit) == shown
    assert len(shown) <= limit


def test_the_examples_do_not_call_the_timeline_a_widget() -> None:
    """The timeline is plain rich output updated in place (no widget model to lose):
    what an example says about `%agent timeline` says so."""
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
        for cell in cells:
            text = "".join(cell["source"])
            if cell["cell_type"] == "markdown" and "%agent timeline" in text:
                assert "widget" not in text.lower(), (notebook.name, text)


def test_the_timeline_code_does_not_call_the_timeline_a_widget() -> None:
    """The timeline is rich output, not a widget (the ipywidgets controls are): its model,
    its renderer, the small words and its benchmark say so."""
    package = ROOT / "tiny_agent_nb"
    sources = [
        *sorted((package / "timeline").glob("*.py")),
        package / "render.py",
        package / "words.py",
        ROOT / "bench" / "bench_timeline.py",
    ]
    for source in sources:
        assert "widget" not in source.read_text(encoding="utf-8").lower(), source.name


# Names of the work that wrote something: a tracking issue's number, a review round or
# pass. What a file, test or comment holds outlives when it was written.
HISTORY = re.compile(
    r"\bissues? #?\d+\b|\battack-?s\d+\b|\bs\d+ on [0-9a-f]{7}\b|\bsecond pass\b", re.IGNORECASE
)
HISTORY_NAME = re.compile(r"attack|issue|(^|_)s\d+(_|$)|round_?\d|pass_?\d")


def test_files_and_comments_name_what_they_hold_not_the_work_that_wrote_them() -> None:
    # Not schemas/ nor the script making its fixtures: their sessions quote what a user
    # may type (a question about an issue by its number).
    roots = [ROOT / d for d in ("tiny_agent_nb", "tests", "bench", "docs", "notebooks")]
    files = [ROOT / "README.md", *(p for r in roots for p in sorted(r.rglob("*")) if p.is_file())]
    named = [
        str(p.relative_to(ROOT))
        for p in files
        if p.suffix in {".py", ".md", ".ipynb"} and HISTORY_NAME.search(p.stem)
    ]
    quoted = [
        f"{p.relative_to(ROOT)}:{n}: {m.group()}"
        for p in files
        if p.suffix in {".py", ".md", ".ipynb", ".toml"}
        for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
        if (m := HISTORY.search(line))
    ]
    assert named == [] and quoted == []
