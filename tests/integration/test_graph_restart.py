"""A stored graph run survives kill -9: another process resumes it at the node it died in.

On SQLite and PostgreSQL: a worker process (``helpers/graph_worker.py``) runs
the count-down graph and is killed with SIGKILL inside a node; a second process
is refused while the dead worker's claim is live, a third takes the run over
(``take_over=True``) and finishes it.  Every node ran exactly once in the
state the run reached (the killed node's unfinished work left no trace), and
the facts the nodes wrote through ``ctx.deps.memory`` are all there.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.graph_worker import START, count_down_graph, spec_for
from store_backends import OpenedBackend, backend_params

from firefly_orm.pydantic_ai.graph import PersistentGraph

REPO = Path(__file__).resolve().parents[2]
TESTS_DIR = REPO / "tests"
#: Seconds a worker may take to reach the node it stalls in (import, migrate, 2 nodes).
READY_TIMEOUT = 60.0
STALL_AT = 2


def _worker(spec: str, **kwargs: object) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO), str(TESTS_DIR), env.get("PYTHONPATH")])
    )
    process: subprocess.Popen[str] = subprocess.Popen(
        [sys.executable, "-m", "helpers.graph_worker", spec],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,  # type: ignore[call-overload]
    )
    return process


def _report(spec: str) -> dict[str, object]:
    process = _worker(spec)
    out, err = process.communicate(timeout=READY_TIMEOUT)
    assert process.returncode == 0, err
    report: dict[str, object] = json.loads(out)
    return report


@pytest.mark.parametrize("layer_backend", backend_params(["sqlite", "postgres"]), indirect=True)
def test_a_killed_run_resumes_in_another_process(
    layer_backend: OpenedBackend, tmp_path: Path
) -> None:
    opened = layer_backend
    marker = tmp_path / "stalled"
    first = _worker(spec_for(opened, "r1", "start", stall_at=STALL_AT, marker=str(marker)))
    deadline = time.monotonic() + READY_TIMEOUT
    while not marker.exists():  # the worker reaches the node it stalls in
        assert first.poll() is None, first.communicate()[1]
        assert time.monotonic() < deadline, "the worker never reached the stalling node"
        time.sleep(0.05)
    first.send_signal(signal.SIGKILL)
    first.communicate()
    assert first.returncode == -signal.SIGKILL

    runs = PersistentGraph(count_down_graph(), opened.reopen())
    history = runs.persistence("r1").load_all()
    assert [s.status for s in history] == ["success", "success", "running"]
    assert history[-1].state.counter == STALL_AT and history[-1].owner is not None

    refused = _report(spec_for(opened, "r1", "resume", take_over=False))
    assert refused == {"claimed": history[-1].owner}  # its lease is live: not taken silently

    done = _report(spec_for(opened, "r1", "resume", take_over=True))
    ticks = [f"tick {n}" for n in range(START, -1, -1)]
    assert done["output"] == ticks  # each node once: the killed one ran again, from its state
    assert done["facts"] == {f"tick:{n}": START - n + 1 for n in range(START, -1, -1)}
    history = runs.persistence("r1").load_all()
    assert [(s.kind, s.status) for s in history] == [("node", "success")] * (START + 1) + [
        ("end", "success")
    ]
    assert history[START - STALL_AT].owner != history[0].owner  # the third process finished it
