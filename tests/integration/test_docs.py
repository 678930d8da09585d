"""The docs site: built with warnings as errors, its guide in the nav, its reference complete.

The site (``mkdocs.yml``, ``docs/``: the guide and the API reference) is built
once per test run with ``mkdocs build --strict`` into a temporary directory
(the only build ``make test`` runs; under pytest-xdist the workers share it,
see :func:`site`).  What the pages document is read from
the build's own inventory (``objects.inv``: every documented object's path, and
every other path it is importable from) and from its HTML; what must be
documented is read from the running package:

* every name in ``firefly_orm.__all__``;
* the public modules: every module with a section of its own is one
  (``docs/index.md`` names each and says why); the modules the top-level names
  come from must be among them;
* every name in a public module's ``__all__``;
* every public member of those classes (methods, properties, fields; members
  inherited from outside firefly_orm excepted);
* a description for every documented class, function, method and property,
  and for each field of ``ConversationTurn``.

So a public name, method or field added without documentation fails here.
Besides: the README stays a front page (at most :data:`README_MAX_LINES`
lines), every guide page is in the nav, and no page shows a raw reST role
(``:class:`...```) or literal-block marker (``Usage::``) as text.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import re
import subprocess
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from filelock import FileLock

import firefly_orm

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "firefly_orm"


@dataclass(frozen=True)
class Site:
    """A built site: its directory and what its inventory lists."""

    path: Path
    #: ``(path, role)`` of each documented object (the inventory's primary entries).
    documented: tuple[tuple[str, str], ...]
    #: Every path the inventory lists (documented objects and their aliases).
    names: frozenset[str]
    #: The modules with a section of their own.
    modules: frozenset[str]


def read_inventory(path: Path) -> list[tuple[str, str, int]]:
    """``(name, role, priority)`` of each line of a Sphinx inventory (version 2)."""
    data = path.read_bytes()
    header_end = 0
    for _ in range(4):
        header_end = data.index(b"\n", header_end) + 1
    assert data.startswith(b"# Sphinx inventory version 2"), data[:40]
    lines = zlib.decompress(data[header_end:]).decode().splitlines()
    entries = []
    for line in lines:
        name, role, priority, _rest = line.split(" ", 3)
        entries.append((name, role, int(priority)))
    return entries


def build_site(out: Path) -> str:
    """``mkdocs build --strict`` into ``out``; what it wrote on stderr.

    Fails the calling test when the build fails or warns.
    """
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(ROOT / "mkdocs.yml"),
            "--site-dir",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert build.returncode == 0, f"mkdocs build --strict failed:\n{build.stderr}"
    assert "WARNING" not in build.stderr, build.stderr
    return build.stderr


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Site:
    """The site, built once per test run.

    Under pytest-xdist each worker has its own session, so the build goes into
    the run's shared temporary directory under a file lock: the first worker
    that needs it builds it, the others read it.  A failed build is recorded
    beside it, so every worker reports it without building again.
    """
    if importlib.util.find_spec("mkdocs") is None:
        pytest.fail("the docs extra is not installed (pip install -e '.[docs]')")
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # shared by the workers of this run
    out = base / "docs-site"
    failed = base / "docs-site.failed"
    with FileLock(str(base / "docs-site.lock")):
        if failed.is_file():
            pytest.fail(failed.read_text(encoding="utf-8"))
        if not (out / "objects.inv").is_file():
            try:
                build_site(out)
            except AssertionError as exc:
                failed.write_text(str(exc), encoding="utf-8")
                raise
    entries = read_inventory(out / "objects.inv")
    documented = tuple((name, role) for name, role, priority in entries if priority == 1)
    return Site(
        path=out,
        documented=documented,
        names=frozenset(name for name, _role, _priority in entries),
        modules=frozenset(name for name, role in documented if role == "py:module"),
    )


@pytest.fixture(scope="session")
def descriptions(site: Site) -> dict[str, str]:
    """Anchor id -> description text, over every page of the site."""
    found: dict[str, str] = {}
    for page in site.path.rglob("*.html"):
        parser = Descriptions()
        parser.feed(page.read_text(encoding="utf-8"))
        for anchor, parts in parser.text.items():
            found[anchor] = " ".join("".join(parts).split())
    return found


# --------------------------------------------------------------------------- what is public


def public_modules(site: Site) -> dict[str, ModuleType]:
    """The documented modules, imported."""
    return {name: importlib.import_module(name) for name in sorted(site.modules)}


def public_names(site: Site) -> Iterator[tuple[str, Any]]:
    """``(path, object)`` of every name in a documented module's ``__all__``."""
    for module_name, module in public_modules(site).items():
        for name in getattr(module, "__all__", ()):
            yield f"{module_name}.{name}", getattr(module, name)


def documented_paths(site: Site, obj: Any, path: str) -> list[str]:
    """The paths under which the site documents ``obj`` (public paths and its own)."""
    own = f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', '')}"
    return [p for p in (path, own) if p in site.names]


def is_ours(owner: type) -> bool:
    return owner.__module__ == PACKAGE or owner.__module__.startswith(PACKAGE + ".")


def public_members(cls: type) -> set[str]:
    """Public members a class defines or inherits from firefly_orm classes.

    Methods, properties, class attributes and annotated fields (pydantic model
    and dataclass fields included).  Not ours to document: what a base from
    outside firefly_orm defines (``object``, ``BaseModel``'s ``model_config``,
    ``Exception``, beanie's ``id``...), and what pytest collects from the
    contract suite (``test_*`` methods, ``pytestmark``).
    """
    names: set[str] = set()
    foreign: set[str] = set()
    for owner in cls.__mro__:
        if is_ours(owner):
            names.update(vars(owner))
            names.update(vars(owner).get("__annotations__", {}))
        else:
            foreign.update(dir(owner))
            # a foreign model's fields (beanie's ``id`` / ``revision_id``), which
            # ``init_beanie`` also sets on subclasses as class attributes
            foreign.update(getattr(owner, "model_fields", None) or {})
    return {
        name
        for name in names - foreign
        if not name.startswith(("_", "test_")) and name != "pytestmark"
    }


def public_classes(site: Site) -> Iterator[tuple[list[str], type]]:
    """Each documented class once, with the paths the site documents it under."""
    seen: set[int] = set()
    for path, obj in public_names(site):
        if not isinstance(obj, type) or id(obj) in seen or not is_ours(obj):
            continue
        seen.add(id(obj))
        yield documented_paths(site, obj, path), obj


# --------------------------------------------------------------------------- the HTML


class Descriptions(HTMLParser):
    """The description text of each documented object on a page, by its anchor id.

    mkdocstrings renders an object as a heading (``class="doc doc-heading"``,
    ``id`` = its path), a signature, then ``<div class="doc doc-contents">``
    holding its description and, in ``<div class="doc doc-children">``, its
    members; the description is the text before the members ("Bases: ..."
    lines excluded).
    """

    def __init__(self) -> None:
        super().__init__()
        self.text: dict[str, list[str]] = {}
        self._heading: str | None = None
        self._current: str | None = None
        self._depth = 0
        self._stop_depth = 0
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        classes = (dict(attrs).get("class") or "").split()
        anchor = dict(attrs).get("id")
        if tag in {"h1", "h2", "h3", "h4", "h5", "h6"} and "doc-heading" in classes and anchor:
            self._heading = anchor
        if self._skip:
            self._skip += 1 if tag == "p" else 0
        elif tag == "p" and "doc-class-bases" in classes:
            self._skip = 1
        if tag != "div":
            return
        self._depth += 1
        if "doc-contents" in classes and self._heading is not None:
            self._current, self._heading = self._heading, None
            self._stop_depth = self._depth
            self.text.setdefault(self._current, [])
        elif "doc-children" in classes:
            self._current = None

    def handle_endtag(self, tag: str) -> None:
        if self._skip and tag == "p":
            self._skip -= 1
        if tag != "div":
            return
        if self._current is not None and self._depth == self._stop_depth:
            self._current = None
        self._depth -= 1

    def handle_data(self, data: str) -> None:
        if self._current is not None and not self._skip:
            self.text[self._current].append(data)


# --------------------------------------------------------------------------- tests


def test_every_top_level_name_is_documented(site: Site) -> None:
    missing = [n for n in firefly_orm.__all__ if f"{PACKAGE}.{n}" not in site.names]
    assert not missing, f"in firefly_orm.__all__ but not in the API reference: {missing}"


def test_the_modules_of_top_level_names_are_documented(site: Site) -> None:
    homes = {obj_module(name) for name in firefly_orm.__all__ if name != "__version__"}
    assert homes, "no top-level names found"
    assert PACKAGE in site.modules
    missing = sorted(homes - site.modules)
    assert not missing, f"modules of top-level names without a reference section: {missing}"


def obj_module(name: str) -> str:
    """The public module ``firefly_orm.<name>`` is imported from (lazily)."""
    return firefly_orm._EXPORTS[name]


def test_the_overview_names_every_documented_module(site: Site) -> None:
    overview = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    unnamed = sorted(m for m in site.modules if f"`{m}`" not in overview)
    assert not unnamed, f"documented modules that docs/index.md does not list: {unnamed}"


def test_every_name_of_a_public_module_is_documented(site: Site) -> None:
    names = list(public_names(site))
    assert len(names) > len(firefly_orm.__all__)
    missing = [path for path, obj in names if not documented_paths(site, obj, path)]
    assert not missing, f"in a public module's __all__ but not in the API reference: {missing}"


def test_every_public_member_of_a_public_class_is_documented(site: Site) -> None:
    missing: list[str] = []
    checked = 0
    for paths, cls in public_classes(site):
        assert paths, f"{cls.__qualname__} is not documented"
        for member in sorted(public_members(cls)):
            checked += 1
            if not any(f"{path}.{member}" in site.names for path in paths):
                missing.append(f"{paths[0]}.{member}")
    assert checked > 500, checked
    assert not missing, f"public members missing from the API reference: {missing}"


#: The kinds of documented objects that must say what they are.  Attributes
#: (fields, constants) are not all described yet; see KNOWN_UNDESCRIBED.
DESCRIBED_ROLES = frozenset({"py:class", "py:function", "py:method", "py:property"})

#: Public callables without a docstring today.  The test fails when one of them
#: gets a description, so this list only shrinks.
KNOWN_UNDESCRIBED = frozenset(
    {
        "firefly_orm.conversation.AsyncSummarizer.async_summarize",
        "firefly_orm.mongo.MemoryDocument.Settings",
    }
)


def test_every_documented_callable_says_what_it_is(
    site: Site, descriptions: dict[str, str]
) -> None:
    texts = descriptions
    documented = {
        name
        for name, role in site.documented
        if role in DESCRIBED_ROLES and not name.rsplit(".", 1)[-1].startswith("__")
    }
    assert len(documented) > 500, len(documented)
    assert documented <= set(texts), sorted(documented - set(texts))[:20]
    empty = {name for name in documented if not texts[name]}
    assert not empty - KNOWN_UNDESCRIBED, f"no description: {sorted(empty - KNOWN_UNDESCRIBED)}"
    assert not KNOWN_UNDESCRIBED - empty, (
        f"now described, remove from KNOWN_UNDESCRIBED: {sorted(KNOWN_UNDESCRIBED - empty)}"
    )


def test_conversation_methods_and_turn_fields_are_described(
    descriptions: dict[str, str],
) -> None:
    """Issue 14, item 7: ConversationMemory's methods and ConversationTurn's fields."""
    from firefly_orm.conversation import ConversationMemory, ConversationTurn

    texts = descriptions
    methods = [
        name
        for name in public_members(ConversationMemory)
        if inspect.isfunction(getattr(ConversationMemory, name))
    ]
    assert "add_turn" in methods and "async_get_context" in methods
    for name in methods:
        text = texts.get(f"firefly_orm.conversation.ConversationMemory.{name}", "")
        assert text, f"ConversationMemory.{name} has no description"
    for field in ConversationTurn.model_fields:
        text = texts.get(f"firefly_orm.conversation.ConversationTurn.{field}", "")
        assert text, f"ConversationTurn.{field} has no description"


# --------------------------------------------------------------------------- the guide

#: The README is the front page (and the package's description): the rest is the guide.
README_MAX_LINES = 300

#: A reST role or a literal-block marker, as they read when rendered verbatim.
RAW_REST = re.compile(
    r":(?:py:)?(?:class|meth|func|attr|mod|data|exc|obj|const|ref|doc):|::(?:\s|$)"
)


def test_the_readme_is_a_front_page() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): "
        "move the detail into a page of docs/guide/ and link it from the README's map"
    )


def test_every_guide_page_is_in_the_nav(site: Site) -> None:
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    nav = set(re.findall(r"^\s*- [^:\n]+: (guide/\S+\.md)\s*$", config, flags=re.M))
    pages = {
        path.relative_to(ROOT / "docs").as_posix() for path in (ROOT / "docs/guide").rglob("*.md")
    }
    assert pages, "no guide pages found"
    assert not pages - nav, f"guide pages missing from mkdocs.yml's nav: {sorted(pages - nav)}"
    built = {page for page in pages if (site.path / page).with_suffix(".html").is_file()}
    assert built == pages, f"guide pages not built: {sorted(pages - built)}"


class VisibleText(HTMLParser):
    """A page's text outside code, scripts and styles."""

    HIDDEN = frozenset({"code", "pre", "script", "style"})

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self._hidden = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.HIDDEN:
            self._hidden += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in self.HIDDEN and self._hidden:
            self._hidden -= 1

    def handle_data(self, data: str) -> None:
        if not self._hidden:
            self.parts.append(data)


def test_no_page_shows_raw_rest_markup(site: Site) -> None:
    found: list[str] = []
    pages = sorted(site.path.rglob("*.html"))
    assert len(pages) > 30, len(pages)
    for page in pages:
        parser = VisibleText()
        parser.feed(page.read_text(encoding="utf-8"))
        text = "".join(parser.parts)
        for match in RAW_REST.finditer(text):
            context = " ".join(text[max(0, match.start() - 60) : match.end() + 20].split())
            found.append(f"{page.relative_to(site.path)}: ...{context}...")
    assert not found, "reST markup shown as text (use Markdown):\n" + "\n".join(found[:20])
