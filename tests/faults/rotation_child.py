"""The child process of ``test_rotation_kill.py``: a key rotation that SIGKILLs itself.

``python rotation_child.py '<json>'`` opens the store (``kind``: ``sqlite`` or
``file``, at ``location``), rotates it from key ``k1`` to ``k2`` with
``batch_size`` rows per unit of work and:

* ``kill_at_fetch``: dies by SIGKILL on that key fetch (1-based; each row
  re-encrypted fetches two keys: its own to open it, the current one to seal
  it; the rotation fetches the current key once first), so the kill lands in
  the middle of a batch, its earlier rows saved into an uncommitted unit of work;
* ``kill_at_fs_call``: dies by SIGKILL right after that file-system call
  (``faults.filestore_crash.install_killer``), so the kill lands inside a
  FileStore commit;
* neither: rotates to the end and prints, after each batch, the file-system
  calls made so far (the dry run that finds a commit's calls).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/: faults.*


def main(raw: str) -> None:
    config: dict[str, Any] = json.loads(raw)
    from firefly_orm.privacy import CallbackKeys, Encryption, RotationProgress, rotate_keys

    if config["kind"] == "sqlite":
        from firefly_orm.sql import SQLiteStore

        store: Any = SQLiteStore(config["location"])
    else:
        from firefly_orm.file_store import FileStore

        store = FileStore(config["location"])
    ring: dict[str, str] = {"k1": str(config["k1"]), "k2": str(config["k2"])}
    fetches = 0
    kill_at_fetch = config.get("kill_at_fetch")

    def fetch(kid: str) -> str:
        nonlocal fetches
        fetches += 1
        if fetches == kill_at_fetch:
            os.kill(os.getpid(), signal.SIGKILL)
        return ring[kid]

    calls: list[str] = []
    if config.get("kill_at_fs_call") is not None or config.get("count_fs_calls"):
        from faults.filestore_crash import install_killer

        install_killer(config.get("kill_at_fs_call"), False, calls)

    def report(step: RotationProgress) -> None:
        print(json.dumps({"batch": step.report.batches, "fs_calls": len(calls)}), flush=True)

    encryption = Encryption(CallbackKeys("k2", fetch, cache=False))
    rotate_keys(store, encryption, batch_size=int(config["batch_size"]), on_batch=report)
    print(json.dumps({"done": True, "fetches": fetches}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
