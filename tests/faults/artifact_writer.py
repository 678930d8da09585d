"""A child writer of artifact operations that runs until it is killed (``test_artifact_crash``).

``python artifact_writer.py '<json>'`` opens the store of the JSON's ``store``
(a :class:`faults.harness.StoreSpec`), takes the workspace ``crash`` (with
``keep_versions=True``) and loops over random operations on a few paths:
writes (half of them compare-and-set), deletes and promotions into
``memory/``.  Before each operation it logs ``T<TAB>tag<TAB>op<TAB>path``,
after it returns ``A<TAB>tag<TAB>op<TAB>path<TAB>sha`` (the sha written, or
for a delete the sha deleted; ``-`` when nothing changed), each line fsynced.
Every written content is unique (``tag``), so the parent can tell which
operation each stored row came from.
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from faults.harness import StoreSpec, close_store

WORKSPACE = "crash"
PATHS = ("f0.txt", "f1.txt", "f2.txt", "dir/f3.txt")
ATTEMPT, ACK = "T", "A"


def log_line(file: int, *fields: str) -> None:
    os.write(file, ("\t".join(fields) + "\n").encode())
    os.fsync(file)


def run(config: dict[str, str]) -> None:
    from firefly_orm.artifacts import Artifacts, ShaMismatchError

    rng = random.Random(int(config["seed"]))
    store = StoreSpec(**json.loads(config["store"])).open()
    file = os.open(config["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        ws = Artifacts(store=store).workspace(WORKSPACE, keep_versions=True)
        n = 0
        while True:
            n += 1
            tag = f"{config['tag']}:{n}"
            path = rng.choice(PATHS)
            roll = rng.random()
            if roll < 0.65:
                op = "write"
                log_line(file, ATTEMPT, tag, op, path)
                expected = ws.current_sha(path) if rng.random() < 0.5 else None
                try:
                    info = ws.write_text(
                        path, f"{tag} " + "x" * rng.randrange(200), actor=tag, expected_sha=expected
                    )
                except ShaMismatchError:
                    log_line(file, ACK, tag, op, path, "-")
                    continue
                log_line(file, ACK, tag, op, path, info.sha256)
            elif roll < 0.8:
                op = "delete"
                log_line(file, ATTEMPT, tag, op, path)
                current = ws.current_sha(path)
                try:
                    deleted = ws.delete(path, actor=tag, expected_sha=current)
                except ShaMismatchError:
                    deleted = False
                log_line(file, ACK, tag, op, path, current if deleted else "-")
            else:
                op = "promote"
                log_line(file, ATTEMPT, tag, op, path)
                current = ws.current_sha(path)
                if not current:
                    log_line(file, ACK, tag, op, path, "-")
                    continue
                try:
                    info = ws.promote(
                        path, f"memory/{path}", actor=tag, reason="crash test", src_sha=current
                    )
                except ShaMismatchError:
                    log_line(file, ACK, tag, op, path, "-")
                    continue
                log_line(file, ACK, tag, op, path, info.sha256)
    finally:
        os.close(file)
        close_store(store)


if __name__ == "__main__":
    run(json.loads(sys.argv[1]))
