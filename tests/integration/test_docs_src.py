"""The docs' runnable samples (``docs_src/``) run, and the README shows them as they are.

Every code sample of the guide (``docs/guide/``) and of the README that runs on
its own is a file in ``docs_src/``:

* each ``docs_src/*.py`` runs here, in this process (``runpy``), in an empty
  working directory of its own and without ``FIREFLY_AGENTIC_*`` variables, so
  a sample may write relative paths and never depends on another one;
* a guide page includes a sample with ``--8<-- "docs_src/<name>"``
  (pymdownx.snippets, checked by the strict build of ``test_docs.py``);
* the README, which the package index shows as it is, keeps its samples
  inline: ``<!-- docs_src/<name> -->`` right above a fenced block names the
  file, and the block must be that file, byte for byte;
* every sample is shown somewhere (a page or the README).
"""

from __future__ import annotations

import os
import re
import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS_SRC = ROOT / "docs_src"
README = ROOT / "README.md"

SAMPLES = sorted(DOCS_SRC.glob("*.py"))

#: ``<!-- docs_src/<name> -->`` then a fenced block: the README's copy of a sample.
README_COPY = re.compile(
    r"^<!-- docs_src/(?P<name>[\w.-]+) -->\n```[\w-]*\n(?P<code>.*?)^```$", re.M | re.S
)
#: Where a page or the README names a sample.
SHOWN = re.compile(r"(?:--8<-- \"|<!-- )docs_src/(?P<name>[\w.-]+)")


def test_there_are_samples() -> None:
    names = {path.name for path in SAMPLES}
    assert {"quickstart_sqlite.py", "memory_manager.py", "embedding_session.py"} <= names


@pytest.mark.parametrize("path", SAMPLES, ids=lambda path: path.stem)
def test_sample_runs(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for key in list(os.environ):
        if key.startswith("FIREFLY_AGENTIC_"):
            monkeypatch.delenv(key)
    # A module of its own while it runs (runpy puts it in sys.modules), so
    # declarative classes in a sample resolve their annotations.
    runpy.run_path(str(path), run_name=f"docs_src_{path.stem}")


def readme_copies() -> list[tuple[str, str]]:
    """``(file name, block text)`` of each sample the README shows."""
    text = README.read_text(encoding="utf-8")
    return [(m["name"], m["code"]) for m in README_COPY.finditer(text)]


def test_the_readme_shows_the_samples_as_they_are() -> None:
    copies = readme_copies()
    assert "quickstart_sqlite.py" in {name for name, _ in copies}
    for name, code in copies:
        sample = DOCS_SRC / name
        assert sample.is_file(), f"README.md names docs_src/{name}, which does not exist"
        assert code == sample.read_text(encoding="utf-8"), (
            f"README.md's block under <!-- docs_src/{name} --> differs from docs_src/{name}: "
            "copy the file into the block"
        )


def test_every_sample_is_shown() -> None:
    pages = [README, *sorted((ROOT / "docs").rglob("*.md"))]
    shown = {m["name"] for page in pages for m in SHOWN.finditer(page.read_text("utf-8"))}
    samples = {path.name for path in DOCS_SRC.iterdir() if path.suffix in {".py", ".sql"}}
    assert not samples - shown, f"samples no page shows: {sorted(samples - shown)}"
    assert not shown - samples, f"pages name samples that do not exist: {sorted(shown - samples)}"
