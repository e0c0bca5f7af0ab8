"""A notebook interrupt (SIGINT -> KeyboardInterrupt) landing anywhere inside a commit
leaves the store's memory equal to the file, and the store keeps working."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

CHILD = Path(__file__).parent / "children" / "commit_under_sigint.py"


@pytest.mark.slow
def test_sigint_inside_commit_never_splits_memory_from_file(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    seed = int(os.environ.get("TINY_AGENT_TEST_SEED", "1234"))
    report_path = tmp_path / "report.json"
    child = subprocess.Popen(
        [sys.executable, str(CHILD), str(path), "400", str(seed), str(report_path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    rng = random.Random(seed)
    sent = 0
    while child.poll() is None and not report_path.exists():
        # Random spacing is the point here (where the signal lands), not synchronization.
        time.sleep(rng.uniform(0, 0.004))
        try:
            child.send_signal(signal.SIGINT)
            sent += 1
        except ProcessLookupError:
            break
    assert child.wait(timeout=60) == 0
    report = json.loads(report_path.read_text())
    assert report["mismatches"] == 0, report
    assert report["interrupts"] > 0, f"no commit was interrupted ({sent} signals sent): {report}"
    assert report["commits"] > 0, report
