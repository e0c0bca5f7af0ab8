"""read_file, list_files, grep, write_file, edit_file on real files, and confinement."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from tiny_agent_nb.tools import ToolContext, ToolOutput, _files, builtin_registry

SECRET = "secret contents\n"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return Path(os.path.realpath(root))


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory beside the workspace holding a file the tools must never touch."""
    other = Path(os.path.realpath(tmp_path / "outside"))
    other.mkdir()
    (other / "secret.txt").write_text(SECRET)
    return other


@pytest.fixture
def context(workspace: Path) -> ToolContext:
    return ToolContext(workspace=workspace)


def call(context: ToolContext, name: str, **arguments: Any) -> ToolOutput:
    tool = builtin_registry().get(name)
    assert tool is not None
    return tool.run(tool.effective_arguments(arguments), context)


# ---------------------------------------------------------------- read_file


def test_read_file_shows_the_text_and_counts_lines(workspace: Path, context: ToolContext) -> None:
    (workspace / "a.txt").write_text("one\ntwo\nthree\n")
    out = call(context, "read_file", path="a.txt")
    assert not out.is_error
    assert out.content == "[a.txt: 3 lines]\none\ntwo\nthree"


def test_read_file_pages_with_offset_and_limit(workspace: Path, context: ToolContext) -> None:
    (workspace / "a.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    out = call(context, "read_file", path="a.txt", offset=4, limit=2)
    assert out.content == "[a.txt: lines 4-5 of 10]\nline 4\nline 5"
    tail = call(context, "read_file", path="a.txt", offset=9)
    assert tail.content == "[a.txt: lines 9-10 of 10]\nline 9\nline 10"


def test_read_file_offset_past_the_end_is_an_error(workspace: Path, context: ToolContext) -> None:
    (workspace / "a.txt").write_text("x\n")
    out = call(context, "read_file", path="a.txt", offset=5)
    assert out.is_error
    assert "past the end (1 lines)" in out.content


def test_read_file_accepts_an_absolute_path_inside(workspace: Path, context: ToolContext) -> None:
    (workspace / "a.txt").write_text("x\n")
    out = call(context, "read_file", path=str(workspace / "a.txt"))
    assert out.content == "[a.txt: 1 lines]\nx"


def test_read_file_of_an_empty_file(workspace: Path, context: ToolContext) -> None:
    (workspace / "empty").write_text("")
    assert call(context, "read_file", path="empty").content == "[empty: empty file, 0 lines]"


def test_read_file_refuses_binary_files(workspace: Path, context: ToolContext) -> None:
    (workspace / "blob.bin").write_bytes(b"\x7fELF\x00\x01\x02" * 10)
    out = call(context, "read_file", path="blob.bin")
    assert out.is_error
    assert "blob.bin: binary file (70 bytes)" in out.content


def test_read_file_errors_are_results(workspace: Path, context: ToolContext) -> None:
    (workspace / "d").mkdir()
    missing = call(context, "read_file", path="nope.txt")
    assert missing.is_error
    assert missing.content == "nope.txt: no such file or directory"
    directory = call(context, "read_file", path="d")
    assert directory.is_error
    assert "d: is a directory" in directory.content


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_read_file_without_permission(workspace: Path, context: ToolContext) -> None:
    locked = workspace / "locked.txt"
    locked.write_text("x")
    locked.chmod(0)
    out = call(context, "read_file", path="locked.txt")
    assert out.is_error
    assert out.content == "locked.txt: permission denied"


def test_os_errors_become_results_naming_the_path(
    workspace: Path, context: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Whatever the OS refuses (here simulated, since root may read anything) comes back
    # as a result, with the whole path as the model wrote it (the OS names only the last
    # component of an open relative to a directory).
    (workspace / "sub").mkdir()
    (workspace / "sub" / "locked.txt").write_text("x")
    real_open = os.open

    def refuse(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if path == "locked.txt":
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refuse)
    out = call(context, "read_file", path="sub/locked.txt")
    assert out == ToolOutput("sub/locked.txt: permission denied", is_error=True)


def test_read_file_cuts_long_files_to_the_output_limit(workspace: Path) -> None:
    (workspace / "big.txt").write_text("".join(f"{i}\n" for i in range(10_000)))
    out = call(ToolContext(workspace=workspace, output_limit=300), "read_file", path="big.txt")
    assert not out.is_error
    assert out.content.startswith("[big.txt: 10000 lines] (cut to fit;")
    assert "characters truncated" in out.content
    assert out.content.endswith("9999")


# ---------------------------------------------------------------- list_files


def _tree(workspace: Path) -> None:
    (workspace / "src" / "pkg").mkdir(parents=True)
    (workspace / "src" / "pkg" / "mod.py").write_text("")
    (workspace / "src" / "main.py").write_text("")
    (workspace / "README.md").write_text("")
    (workspace / ".git" / "objects").mkdir(parents=True)
    (workspace / ".git" / "HEAD").write_text("")


def test_list_files_marks_directories(workspace: Path, context: ToolContext) -> None:
    _tree(workspace)
    out = call(context, "list_files")
    assert out.content.splitlines() == [".git/", "README.md", "src/"]


def test_list_files_recursive_does_not_enter_vcs_directories(
    workspace: Path, context: ToolContext
) -> None:
    _tree(workspace)
    out = call(context, "list_files", recursive=True)
    assert out.content.splitlines() == [
        ".git/",
        "README.md",
        "src/",
        "src/main.py",
        "src/pkg/",
        "src/pkg/mod.py",
    ]


def test_list_files_filters_with_a_glob(workspace: Path, context: ToolContext) -> None:
    _tree(workspace)
    by_name = call(context, "list_files", path="src", pattern="*.py", recursive=True)
    assert by_name.content.splitlines() == ["src/main.py", "src/pkg/mod.py"]
    by_path = call(context, "list_files", path="src", pattern="pkg/*", recursive=True)
    assert by_path.content.splitlines() == ["src/pkg/mod.py"]
    none = call(context, "list_files", pattern="*.rs", recursive=True)
    assert none.content == "[.: nothing matches '*.rs']"


def test_list_files_stops_at_the_cap(
    workspace: Path, context: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_files, "MAX_LIST_ENTRIES", 3)
    for i in range(5):
        (workspace / f"f{i}").write_text("")
    lines = call(context, "list_files").content.splitlines()
    assert lines[:3] == ["f0", "f1", "f2"]
    assert lines[3].startswith("[stopped at 3 entries")
    assert len(lines) == 4


def test_list_files_of_a_missing_directory(context: ToolContext) -> None:
    out = call(context, "list_files", path="nowhere")
    assert out.is_error
    assert out.content == "nowhere: no such file or directory"


# ---------------------------------------------------------------- grep


def test_grep_reports_path_line_and_text(workspace: Path, context: ToolContext) -> None:
    _tree(workspace)
    (workspace / "src" / "main.py").write_text("import os\n\ndef main():\n    os.exit(0)\n")
    (workspace / "src" / "pkg" / "mod.py").write_text("X = 1\n# os is not imported here\n")
    out = call(context, "grep", pattern=r"\bos\b")
    assert out.content.splitlines() == [
        "src/main.py:1: import os",
        "src/main.py:4:     os.exit(0)",
        "src/pkg/mod.py:2: # os is not imported here",
    ]


def test_grep_glob_case_and_single_file(workspace: Path, context: ToolContext) -> None:
    (workspace / "a.py").write_text("Hello\n")
    (workspace / "a.txt").write_text("hello\n")
    assert call(context, "grep", pattern="hello", glob="*.py").content.startswith("[no matches")
    assert call(context, "grep", pattern="hello", glob="*.py", ignore_case=True).content == (
        "a.py:1: Hello"
    )
    assert call(context, "grep", pattern="hel", path="a.txt").content == "a.txt:1: hello"


def test_grep_skips_binary_files(workspace: Path, context: ToolContext) -> None:
    (workspace / "blob").write_bytes(b"needle\x00\x01")
    (workspace / "text").write_text("needle\n")
    assert call(context, "grep", pattern="needle").content == "text:1: needle"


def test_grep_invalid_regex_is_a_clear_error(context: ToolContext) -> None:
    out = call(context, "grep", pattern="(unclosed")
    assert out.is_error
    assert out.content.startswith("invalid regular expression '(unclosed': missing )")


def test_grep_stops_at_the_cap(
    workspace: Path, context: ToolContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_files, "MAX_GREP_MATCHES", 2)
    (workspace / "many").write_text("hit\n" * 10)
    lines = call(context, "grep", pattern="hit").content.splitlines()
    assert lines == ["many:1: hit", "many:2: hit", "[stopped at 2 matches; narrow the search]"]


def test_grep_no_matches_is_not_an_error(workspace: Path, context: ToolContext) -> None:
    (workspace / "a").write_text("x\n")
    out = call(context, "grep", pattern="y")
    assert not out.is_error
    assert out.content == "[no matches for 'y' in .]"


# ---------------------------------------------------------------- write_file / edit_file


def test_write_file_creates_parents_and_reports_bytes(
    workspace: Path, context: ToolContext
) -> None:
    out = call(context, "write_file", path="new/deep/f.txt", content="héllo\n")
    assert not out.is_error
    assert out.content == "created new/deep/f.txt: wrote 7 bytes"
    assert (workspace / "new" / "deep" / "f.txt").read_text(encoding="utf-8") == "héllo\n"
    again = call(context, "write_file", path="new/deep/f.txt", content="")
    assert again.content == "overwrote new/deep/f.txt: wrote 0 bytes"
    assert (workspace / "new" / "deep" / "f.txt").read_bytes() == b""


@pytest.mark.parametrize("path", ["f.txt/new", "f.txt/deeper/new"])
def test_write_file_below_a_file_is_an_error(
    workspace: Path, context: ToolContext, path: str
) -> None:
    (workspace / "f.txt").write_text("x")
    out = call(context, "write_file", path=path, content="y")
    assert out == ToolOutput(f"{path}: cannot be created, a parent on its path is a file", True)
    assert (workspace / "f.txt").read_text() == "x"


def test_write_file_onto_a_directory_is_an_error(workspace: Path, context: ToolContext) -> None:
    (workspace / "d").mkdir()
    out = call(context, "write_file", path="d", content="x")
    assert out.is_error
    assert "d: is a directory" in out.content


def test_edit_file_replaces_the_one_occurrence(workspace: Path, context: ToolContext) -> None:
    (workspace / "f.py").write_text("a = 1\nb = 2\nc = 3\n")
    out = call(context, "edit_file", path="f.py", old_string="b = 2", new_string="b = 20")
    assert not out.is_error
    assert out.content == "edited f.py: replaced 1 occurrence at line 2"
    assert (workspace / "f.py").read_text() == "a = 1\nb = 20\nc = 3\n"


@pytest.mark.parametrize(
    ("old", "expected"),
    [("zzz", "old_string not found"), ("= ", "old_string found 3 times")],
)
def test_edit_file_ambiguous_or_missing_text_writes_nothing(
    workspace: Path, context: ToolContext, old: str, expected: str
) -> None:
    target = workspace / "f.py"
    target.write_bytes(b"a = 1\r\nb = 2\nc = 3\n")
    before = target.stat().st_mtime_ns
    out = call(context, "edit_file", path="f.py", old_string=old, new_string="X")
    assert out.is_error
    assert expected in out.content
    assert "Nothing was written" in out.content
    assert target.read_bytes() == b"a = 1\r\nb = 2\nc = 3\n"
    assert target.stat().st_mtime_ns == before


def test_edit_file_of_a_missing_file(context: ToolContext) -> None:
    out = call(context, "edit_file", path="gone.py", old_string="a", new_string="b")
    assert out.is_error
    assert out.content == "gone.py: no such file or directory"


# ---------------------------------------------------------------- confinement

# Each tool with arguments aimed at PATH; a write or edit that got through would change
# the outside file or create one.
TOOL_CALLS: dict[str, dict[str, Any]] = {
    "read_file": {},
    "write_file": {"content": "pwned"},
    "edit_file": {"old_string": "secret", "new_string": "pwned"},
    "list_files": {},
    "grep": {"pattern": "secret"},
}


@pytest.fixture
def escapes(workspace: Path, outside: Path) -> dict[str, str]:
    (workspace / "link-to-secret").symlink_to(outside / "secret.txt")
    (workspace / "link-to-outside").symlink_to(outside, target_is_directory=True)
    (workspace / "sub").mkdir()
    return {
        "dot-dot": "../outside/secret.txt",
        "dot-dot-from-sub": "sub/../../outside/secret.txt",
        "absolute": str(outside / "secret.txt"),
        "etc-passwd": "/etc/passwd",
        "file-symlink": "link-to-secret",
        "through-dir-symlink": "link-to-outside/secret.txt",
        "dir-symlink": "link-to-outside",
        "new-file-through-dir-symlink": "link-to-outside/new.txt",
    }


@pytest.mark.parametrize("tool", sorted(TOOL_CALLS))
@pytest.mark.parametrize(
    "escape",
    [
        "dot-dot",
        "dot-dot-from-sub",
        "absolute",
        "etc-passwd",
        "file-symlink",
        "through-dir-symlink",
        "dir-symlink",
        "new-file-through-dir-symlink",
    ],
)
def test_paths_leading_outside_are_refused(
    tool: str,
    escape: str,
    escapes: dict[str, str],
    outside: Path,
    context: ToolContext,
) -> None:
    path = escapes[escape]
    out = call(context, tool, path=path, **TOOL_CALLS[tool])
    assert out.is_error
    assert out.content.startswith(f"{path}: refused")
    assert "outside the workspace" in out.content
    assert SECRET.strip() not in out.content
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == SECRET


def test_a_recursive_walk_does_not_follow_links_out(
    escapes: dict[str, str], context: ToolContext
) -> None:
    assert call(context, "grep", pattern="secret").content == "[no matches for 'secret' in .]"
    listing = call(context, "list_files", recursive=True).content.splitlines()
    assert listing == [
        "link-to-outside (symlink leading outside the workspace)",
        "link-to-secret (symlink leading outside the workspace)",
        "sub/",
    ]


def test_symlinks_that_stay_inside_are_followed(workspace: Path, context: ToolContext) -> None:
    (workspace / "real").mkdir()
    (workspace / "real" / "f.txt").write_text("inside\n")
    (workspace / "alias.txt").symlink_to(workspace / "real" / "f.txt")
    (workspace / "alias-dir").symlink_to("real", target_is_directory=True)

    assert call(context, "read_file", path="alias.txt").content == "[real/f.txt: 1 lines]\ninside"
    assert call(context, "list_files", path="alias-dir").content == "real/f.txt"
    assert call(context, "grep", pattern="ins", path="alias-dir").content == "real/f.txt:1: inside"
    edit = call(context, "edit_file", path="alias-dir/f.txt", old_string="in", new_string="out")
    assert not edit.is_error
    write = call(context, "write_file", path="alias.txt", content="rewritten\n")
    assert not write.is_error
    assert (workspace / "real" / "f.txt").read_text() == "rewritten\n"
    assert (workspace / "alias.txt").is_symlink()
    listing = call(context, "list_files").content.splitlines()
    assert listing == ["alias-dir/", "alias.txt", "real/"]


def test_a_path_through_the_parent_that_comes_back_inside_is_fine(
    workspace: Path, context: ToolContext
) -> None:
    (workspace / "a.txt").write_text("x\n")
    inside = f"../{workspace.name}/a.txt"
    assert call(context, "read_file", path=inside).content == "[a.txt: 1 lines]\nx"


def test_reads_never_block_on_a_named_pipe(tmp_path: Path) -> None:
    """A FIFO would make read_file/grep (and their replay after a crash) wait forever."""
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "notes.txt").write_text("needle\n")
    context = ToolContext(workspace=tmp_path.resolve())
    tools = builtin_registry()
    read = tools.get("read_file").run({"path": "pipe"}, context)  # type: ignore[union-attr]
    assert read.is_error and "not a regular file" in read.content
    grep = tools.get("grep").run({"pattern": "needle"}, context)  # type: ignore[union-attr]
    assert not grep.is_error and "notes.txt:1: needle" in grep.content
    direct = tools.get("grep").run({"pattern": "x", "path": "pipe"}, context)  # type: ignore[union-attr]
    assert direct.is_error and "not a regular file" in direct.content
