"""bench/bench_peers.py --quick: the script runs, measures tiny-agent-nb's writes and
resumes against the raw baselines, and skips a peer that is not installed with one line."""

from __future__ import annotations

import os
import re
from pathlib import Path

from helpers.bench_scripts import run_bench

ROW = re.compile(r"^\| (?P<what>[^|]+) \|(?P<cells>.*)\|$", re.M)


def run_peers(work: Path, *args: str, pythonpath: str | None = None) -> str:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, env.get("PYTHONPATH")) if p)
    done = run_bench(
        "bench_peers.py",
        "--dir",
        str(work),
        *args,
        cwd=work,  # the script writes under a temporary directory in `work` only
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert list(work.iterdir()) == [], "the script left files behind"
    return done.stdout


def row(stdout: str, store: str, how: str = "") -> list[str]:
    """The cells of the table row of `store` (its file size in between) ending in `how`."""
    for m in ROW.finditer(stdout):
        what = m["what"].strip()
        if what.startswith(store) and what.endswith(how):
            return [c.strip() for c in m["cells"].split("|")]
    raise AssertionError(f"no row {store} ... {how}:\n{stdout}")


def ratios(cell: str) -> tuple[float, float]:
    wall, cpu = (float(x.strip().rstrip("x").replace(",", "")) for x in cell.split("·"))
    return wall, cpu


def test_quick_run_of_tiny_agent_nb_alone_reports_writes_resumes_and_power(
    tmp_path: Path,
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    stdout = run_peers(work, "--only", "tiny-agent-nb")
    step, step_ratio, resume, resume_ratio = row(stdout, "tiny-agent-nb (", ": load_session")
    assert re.fullmatch(r"[\d,]+ µs · [\d,]+ µs", step), stdout  # wall · CPU
    assert re.fullmatch(r"[\d,.]+ ms · [\d,.]+ ms", resume), stdout
    # Each figure is printed as a ratio (wall, CPU) to the cheapest code doing the same
    # work; how they compare is the benchmark's to show, not a test's to assert.
    assert all(r > 0 for r in ratios(step_ratio) + ratios(resume_ratio)), stdout
    recover = row(stdout, "tiny-agent-nb (", "SessionStore.open + load + plan_recovery")
    assert recover[:2] == ["〃", "〃"] and all(r > 0 for r in ratios(recover[3])), stdout
    power = row(stdout, "tiny-agent-nb, durability power")
    assert power[0] == "2" and re.fullmatch(r"[\d,]+ µs · [\d,]+ µs", power[1]), stdout
    # SQLiteSession's default, on the standard library's sqlite3: measured without the peer.
    assert row(stdout, "sqlite3, SQLiteSession's statements")[0] == "1", stdout
    assert "openai-agents" not in stdout and "LangGraph" not in stdout


def test_a_peer_that_does_not_import_is_skipped_with_one_line(tmp_path: Path) -> None:
    # Packages named like the peers that fail to import, first on the path: the peers
    # are "not installed" whether or not this machine has them.
    shadow, work = tmp_path / "shadow", tmp_path / "work"
    work.mkdir()
    for package in ("agents", "langgraph"):
        (shadow / package).mkdir(parents=True)
        (shadow / package / "__init__.py").write_text("raise ImportError('absent')\n")
    stdout = run_peers(work, pythonpath=str(shadow))
    skipped = [line for line in stdout.splitlines() if "skipped, not installed" in line]
    assert len(skipped) == 2, stdout
    assert skipped[0].startswith("- openai-agents SQLiteSession: skipped"), stdout
    assert skipped[1].startswith("- LangGraph SqliteSaver: skipped"), stdout
    assert row(stdout, "tiny-agent-nb (", ": load_session")[2].endswith("ms"), stdout
