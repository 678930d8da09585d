"""Griffe extension for the API reference: what static analysis alone gets wrong.

Griffe reads the source without running it and knows Google-style docstrings
as griffe defines them; firefly_orm's code and docstrings need six things
more, done here once the whole package is loaded:

* **Derived methods.**  A memory layer writes each operation once (``_add_turn``)
  and derives its public forms with class attributes
  (``add_turn = sync_method(_add_turn)``, ``async_add_turn = async_method(...)``,
  a facade's ``delegate(...)``; see :mod:`firefly_orm.bridges._steps`).  Read
  statically those are undocumented attributes.  At run time they are methods
  with the operation's signature and docstring.  This extension asks the
  running class: every class attribute that is a plain function at run time
  becomes a method carrying that function's docstring and return annotation,
  with the parameters of the operation it was derived from (read statically,
  so their annotations keep their cross-references).  Nothing about how a form
  is derived is repeated here.
* **Sphinx roles.**  Docstrings cross-reference with reST roles
  (``:class:`~firefly_orm.store.InMemoryStore```, ``:meth:`add_turn```), which
  Markdown shows verbatim.  Each role becomes an optional autorefs link, resolved
  the way Python resolves the name from where the docstring is (the object, its
  class, its module's imports); a target that is not in the reference stays
  plain code.
* **"Example:" sections.**  Google style (as Napoleon reads it) takes
  ``Example:`` and ``Examples:`` alike as a section of examples; griffe knows
  only the plural and shows the singular as an admonition, where Markdown reads
  the ``>>>`` lines as prose (``['Hello']`` becomes a broken link).  Such a
  header is read as ``Examples:``.
* **Literal blocks.**  A reST paragraph ending in ``::`` introduces the
  indented block after it (``Usage::``), which Markdown already shows as code;
  the marker itself becomes one colon (``Usage:``), or nothing when it stands
  alone on its line or after a space, as reST renders it.
* **``#:`` comments.**  Constants and class attributes are described with
  Sphinx's ``#:`` comments (on the lines just above, or at the end of the
  line), which griffe does not read; they become the attribute's docstring.
* **Attributes sections.**  Fields are described in their class's
  ``Attributes:`` section (pydantic models, dataclasses, SQLModel tables), not
  next to each field.  Each description is given to the field it names, so the
  field's own entry says what it is (``show_docstring_attributes: false`` then
  drops the duplicate table); a described name griffe did not find as a member
  gets an entry of its own.
"""

from __future__ import annotations

import ast
import html
import importlib
import inspect
import re
from collections.abc import Iterator
from typing import Any

import griffe

#: A reST cross-reference role: ``:class:`target```, ``:meth:`~a.b.c```,
#: ``:func:`title <target>```.
ROLE = re.compile(r":(?:py:)?(?:class|meth|func|attr|mod|data|exc|obj|const):`(?P<body>[^`]+)`")
#: A Google-style section header "Example:" (a line of its own).
_EXAMPLE_HEADER = re.compile(r"^(?P<indent>[ \t]*)Example:[ \t]*$", flags=re.MULTILINE)
#: A line ending in a reST literal-block marker (``text::``, ``text ::`` or
#: ``::`` alone), followed by a blank line.
_LITERAL_MARKER = re.compile(
    r"^(?P<text>[^\n]*?)(?P<space>[ \t]?)::[ \t]*$(?=\n[ \t]*\n)", flags=re.MULTILINE
)
#: ``title <target>`` inside a role.
_TITLED = re.compile(r"^(?P<title>.+?)\s*<(?P<target>[^<>]+)>$")


class FireflyDocs(griffe.Extension):
    """Fill in what static analysis misses (see the module docstring)."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        """Rewrite the package once it is fully loaded (every module visited)."""
        if pkg.name != "firefly_orm":
            return
        for obj in list(_walk(pkg)):
            if isinstance(obj, griffe.Class):
                _derive_methods(obj, loader)
        for obj in _walk(pkg):
            if isinstance(obj, griffe.Attribute) and not obj.has_docstring:
                _describe_from_comment(obj)
        for obj in _walk(pkg):
            if obj.docstring is not None:
                text = _EXAMPLE_HEADER.sub(r"\g<indent>Examples:", obj.docstring.value)
                text = _literal_markers(text)
                obj.docstring.value = _link_roles(text, obj)
        for obj in _walk(pkg):
            if isinstance(obj, griffe.Class):
                _drop_special_members(obj)
        for obj in _walk(pkg):
            if isinstance(obj, (griffe.Class, griffe.Module)):
                _describe_attributes(obj)


def _walk(obj: griffe.Object) -> Iterator[griffe.Object]:
    """``obj`` and every object defined in it (imports, i.e. aliases, skipped)."""
    yield obj
    for member in list(obj.members.values()):
        if not member.is_alias and isinstance(member, griffe.Object):
            yield from _walk(member)


# --------------------------------------------------------------------------- derived methods


def _runtime_class(cls: griffe.Class) -> type | None:
    """The class object ``cls`` describes, or ``None`` if its module fails to import.

    The failure is logged as a warning, so a strict build stops on it.
    """
    try:
        module = importlib.import_module(cls.module.path)
    except Exception as exc:  # any import failure: say which module and why
        griffe.logger.warning(
            "%s: cannot import it to document derived methods: %r", cls.module.path, exc
        )
        return None
    value: Any = module
    for part in cls.path.removeprefix(cls.module.path + ".").split("."):
        value = getattr(value, part, None)
    return value if isinstance(value, type) else None


def _derive_methods(cls: griffe.Class, loader: griffe.GriffeLoader) -> None:
    """Replace each class attribute that is a function at run time by a method."""
    candidates = [
        member
        for name, member in cls.members.items()
        if not member.is_alias
        and isinstance(member, griffe.Attribute)
        and isinstance(member.value, griffe.ExprCall)
        and not name.startswith("_")
    ]
    if not candidates:
        return
    runtime = _runtime_class(cls)
    if runtime is None:
        return
    for attribute in candidates:
        function = vars(runtime).get(attribute.name)
        if inspect.isfunction(function):
            cls.set_member(attribute.name, _method(cls, attribute, function, loader))


def _method(
    cls: griffe.Class, attribute: griffe.Attribute, function: Any, loader: griffe.GriffeLoader
) -> griffe.Function:
    """The method ``attribute`` is at run time (``function``)."""
    source = _source_operation(cls, attribute, loader)
    scope = source.parent if source is not None and source.parent is not None else cls
    signature = inspect.signature(function)
    if source is not None:
        parameters = griffe.Parameters(
            *(
                griffe.Parameter(
                    p.name,
                    annotation=p.annotation,
                    kind=p.kind,
                    default=p.default,
                    docstring=p.docstring,
                )
                for p in source.parameters
            )
        )
    else:
        parameters = griffe.Parameters(
            *(
                griffe.Parameter(
                    p.name,
                    annotation=_annotation(p.annotation, scope),
                    kind=griffe.ParameterKind(p.kind.description),
                    default=None if p.default is p.empty else repr(p.default),
                )
                for p in signature.parameters.values()
            )
        )
    method = griffe.Function(
        attribute.name,
        lineno=attribute.lineno,
        endlineno=attribute.endlineno,
        parameters=parameters,
        returns=_annotation(signature.return_annotation, scope),
        parent=cls,
        runtime=True,
        analysis="static",
    )
    if inspect.iscoroutinefunction(function):
        method.labels.add("async")
    if function.__doc__:
        method.docstring = _docstring(
            inspect.cleandoc(function.__doc__),
            method,
            (source.docstring if source is not None else None) or cls.docstring,
        )
    return method


def _docstring(
    text: str, owner: griffe.Object, template: griffe.Docstring | None
) -> griffe.Docstring:
    """A docstring for ``owner``, parsed like ``template`` (the configured style)."""
    return griffe.Docstring(
        text,
        lineno=owner.lineno,
        endlineno=owner.endlineno,
        parent=owner,
        parser=template.parser if template is not None else None,
        parser_options=template.parser_options if template is not None else None,
    )


def _source_operation(
    cls: griffe.Class, attribute: griffe.Attribute, loader: griffe.GriffeLoader
) -> griffe.Function | None:
    """The function a derived attribute was made from, followed through its calls.

    ``add_turn = sync_method(_add_turn)`` leads to the method ``_add_turn``;
    ``_add_turn = delegate(ConversationMemory._add_turn, ...)`` leads on to
    ``ConversationMemory._add_turn``.
    """
    value = attribute.value
    owner: griffe.Object = cls
    for _ in range(8):
        if not isinstance(value, griffe.ExprCall) or not value.arguments:
            return None
        target = value.arguments[0]
        found: Any = None
        if isinstance(target, griffe.ExprName) and target.name in owner.members:
            found = owner.members[target.name]
        elif isinstance(target, (griffe.ExprName, griffe.ExprAttribute)):
            try:
                found = loader.modules_collection[target.canonical_path]
            except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
                return None
        if found is None:
            return None
        if found.is_alias:
            try:
                found = found.final_target
            except (griffe.AliasResolutionError, griffe.CyclicAliasError):
                return None
        if isinstance(found, griffe.Function):
            return found
        if not isinstance(found, griffe.Attribute) or found.parent is None:
            return None
        value, owner = found.value, found.parent
    return None


def _annotation(annotation: Any, scope: griffe.Object) -> str | griffe.Expr | None:
    """A run-time annotation as a griffe expression resolved in ``scope``."""
    if annotation is inspect.Signature.empty:
        return None
    text = annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)
    try:
        node = ast.parse(text, mode="eval").body
    except SyntaxError:
        return text
    parent = scope if isinstance(scope, (griffe.Module, griffe.Class)) else scope.module
    return griffe.safe_get_annotation(node, parent) or text


# --------------------------------------------------------------------------- special members

#: The special members a reader of the reference needs: the protocols callers
#: use (``with store:``, ``async with uow:``, calling, iterating).  ``__init__``
#: is shown with its class (``merge_init_into_class``).  Every other special
#: member (``__repr__``, ``__init_subclass__``, SQLAlchemy's ``__tablename__``...)
#: is left out of the reference.
_SHOWN_SPECIAL = frozenset(
    {
        "__init__",
        "__call__",
        "__enter__",
        "__exit__",
        "__aenter__",
        "__aexit__",
        "__iter__",
        "__aiter__",
        "__len__",
        "__contains__",
        "__getitem__",
    }
)


def _drop_special_members(cls: griffe.Class) -> None:
    """Remove the special members nobody calls by name from ``cls``."""
    for name in list(cls.members):
        if name.startswith("__") and name.endswith("__") and name not in _SHOWN_SPECIAL:
            cls.del_member(name)


# --------------------------------------------------------------------------- descriptions


def _describe_from_comment(attribute: griffe.Attribute) -> None:
    """Give ``attribute`` the text of its ``#:`` comment, if it has one."""
    if attribute.lineno is None or attribute.parent is None:
        return
    try:
        lines = attribute.module.lines
    except (OSError, ValueError):
        return
    index = attribute.lineno - 1
    if index >= len(lines):
        return
    comment: list[str] = []
    _code, marker, trailing = lines[index].partition("#:")
    if marker:
        comment.append(trailing.strip())
    else:
        above = index - 1
        while above >= 0 and lines[above].strip().startswith("#:"):
            comment.insert(0, lines[above].strip().removeprefix("#:").strip())
            above -= 1
    text = "\n".join(comment).strip()
    if not text:
        return
    template = attribute.parent.docstring or attribute.module.docstring
    attribute.docstring = _docstring(text, attribute, template)


def _describe_attributes(obj: griffe.Class | griffe.Module) -> None:
    """Give each entry of ``obj``'s ``Attributes:`` section to the member it names."""
    docstring = obj.docstring
    if docstring is None:
        return
    for section in griffe.parse_google(docstring, warnings=False):
        if section.kind is not griffe.DocstringSectionKind.attributes:
            continue
        for item in section.value:
            found = obj.members.get(item.name)
            if isinstance(found, griffe.Alias) or (found is not None and found.has_docstring):
                continue
            member = found
            if member is None:
                member = griffe.Attribute(
                    item.name,
                    annotation=item.annotation,
                    lineno=docstring.lineno,
                    endlineno=docstring.lineno,
                    parent=obj,
                    analysis="static",
                )
                member.labels.add("instance-attribute")
                obj.set_member(item.name, member)
            member.docstring = _docstring(item.description, member, docstring)


# --------------------------------------------------------------------------- reST literal blocks


def _literal_markers(text: str) -> str:
    """``text`` with each reST literal-block marker rendered as reST renders it.

    ``Usage::`` becomes ``Usage:``; ``Usage ::`` becomes ``Usage``; a line
    holding only ``::`` becomes empty.  The indented block below is left as it
    is (Markdown shows it as code).
    """

    def render(match: re.Match[str]) -> str:
        before = match["text"]
        if not before.strip() or match["space"]:
            return before.rstrip()
        return before + ":"

    return _LITERAL_MARKER.sub(render, text)


# --------------------------------------------------------------------------- reST roles


def _link_roles(text: str, obj: griffe.Object) -> str:
    """``text`` with each reST role replaced by an optional autorefs link."""

    def link(match: re.Match[str]) -> str:
        title, target = role_parts(match["body"])
        identifier = _resolve(target, obj)
        code = f"<code>{html.escape(title)}</code>"
        if identifier is None:
            return code
        return f'<autoref identifier="{identifier}" optional>{code}</autoref>'

    return ROLE.sub(link, text)


def role_parts(body: str) -> tuple[str, str]:
    """The title a role shows and the target it names (Sphinx's rules).

    ``~a.b.c`` shows ``c``; ``title <a.b.c>`` shows ``title``; anything else
    shows itself.
    """
    body = body.strip()
    titled = _TITLED.match(body)
    if titled is not None:
        return titled["title"], titled["target"].strip()
    target = body.removeprefix("~").removeprefix(".")
    return (target.rsplit(".", 1)[-1] if body.startswith("~") else target), target


def _resolve(target: str, obj: griffe.Object) -> str | None:
    """The full path ``target`` names where ``obj`` is documented, if any."""
    if target.startswith("firefly_orm.") or target == "firefly_orm":
        return target
    head, _, rest = target.partition(".")
    scope: griffe.Object | None = obj
    while scope is not None and not isinstance(scope, (griffe.Class, griffe.Module)):
        scope = scope.parent
    if scope is None:
        return None
    try:
        path = scope.resolve(head)
    except griffe.NameResolutionError:
        return None
    if not path.startswith("firefly_orm"):
        return None
    return f"{path}.{rest}" if rest else path
