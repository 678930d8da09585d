"""`make demo`: the scripted conversation resumes across processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from firefly_orm.demo import SCRIPT, TURNS_PER_RUN


def _run_demo(path: Path) -> str:
    env = {**os.environ, "FIREFLY_ORM_DEMO_PATH": str(path)}
    result = subprocess.run(
        [sys.executable, "-m", "firefly_orm.demo"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_demo_resumes_across_processes(tmp_path: Path) -> None:
    db = tmp_path / "demo" / "demo.sqlite3"
    first = _run_demo(db)
    assert "New conversation" in first
    assert "[turn 0]" in first and f"[turn {TURNS_PER_RUN - 1}]" in first
    assert "- customer: Dana" in first

    second = _run_demo(db)
    assert f"Resumed conversation 'demo-support-chat': {TURNS_PER_RUN} turns so far" in second
    assert f"[turn {TURNS_PER_RUN}]" in second and "[turn 0]" not in second
    assert "evicted turns [0]" in second
    summary_line = next(line for line in second.splitlines() if line.startswith("summary"))
    assert "Sorry to hear that, Dana." in summary_line
    assert "- demo_runs: 2" in second

    runs = 2
    while runs * TURNS_PER_RUN < len(SCRIPT):
        _run_demo(db)
        runs += 1
    final = _run_demo(db)
    assert "The scripted conversation is complete" in final
    # every evicted turn is covered by the summary, oldest first
    summary_line = next(line for line in final.splitlines() if line.startswith("summary"))
    assert summary_line.index("Sorry to hear") < summary_line.index("Noted: a blue")
