"""The child process of ``test_reembed_kill.py``: a re-embedding that SIGKILLs itself.

``python reembed_child.py '<json>'`` opens the SQLite file ``location`` (with
vectors) and re-embeds namespace ``namespace`` with the new test model,
``batch_size`` entries per unit of work, and dies by SIGKILL:

* ``kill_in: "embed"``: during embedding call number ``at`` (the batches
  before it committed, this one read and not yet stored);
* ``kill_in: "store"``: inside the unit of work of batch number ``at``, once
  its vectors are written and before it commits.

It prints a JSON line after each committed batch, and ``{"done": true}`` if it
was never killed.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any


def main(raw: str) -> None:
    config: dict[str, Any] = json.loads(raw)
    from pydantic_ai.embeddings import EmbeddingResult, EmbeddingSettings
    from pydantic_ai.embeddings.result import EmbedInputType

    from firefly_orm.long_term import ReembedProgress, reembed
    from firefly_orm.long_term import _reembed as module
    from firefly_orm.sql import SQLiteStore
    from firefly_orm.testing.embeddings import ConceptEmbeddingModel

    kill_in, at = config["kill_in"], int(config["at"])
    calls = {"embed": 0, "store": 0}

    def count(kind: str) -> None:
        calls[kind] += 1
        if kind == kill_in and calls[kind] == at:
            os.kill(os.getpid(), signal.SIGKILL)

    class Killing(ConceptEmbeddingModel):
        async def embed(
            self,
            inputs: str | Sequence[str],
            *,
            input_type: EmbedInputType,
            settings: EmbeddingSettings | None = None,
        ) -> EmbeddingResult:
            count("embed")
            return await super().embed(inputs, input_type=input_type, settings=settings)

    store_vectors = module._store

    def killing_store(*args: Any) -> Any:
        result = store_vectors(*args)
        count("store")  # written, not committed: the unit of work commits after this returns
        return result

    module._store = killing_store  # type: ignore[assignment]

    def report(step: ReembedProgress) -> None:
        print(json.dumps({"batch": step.report.batches, "done": step.done}), flush=True)

    store = SQLiteStore(config["location"], vectors=True)
    model = Killing(dimensions=int(config["dimensions"]), model_name=config["model_name"])
    reembed(
        store, config["namespace"], model, batch_size=int(config["batch_size"]), on_batch=report
    )
    store.close()
    print(json.dumps({"done": True}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
