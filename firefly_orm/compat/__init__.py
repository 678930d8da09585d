"""Compatibility packages for code written against other agent-memory modules.

:mod:`firefly_orm.compat.firefly` mirrors the memory module of the Firefly
framework (``fireflyframework_agentic.memory``, formerly
``fireflyframework_genai.memory``): replace the ``fireflyframework_agentic``
(or ``fireflyframework_genai``) import prefix with ``firefly_orm.compat.firefly``
and the rest of the code stays as it is.  Its data is brought over with
:mod:`firefly_orm.upstream_import`.

:mod:`firefly_orm.compat.flybrowser` is FlyBrowser's ``BrowserMemoryManager``
and :mod:`firefly_orm.compat.definable` definable's ``Memory``, each in its
system's shape on firefly_orm's layers.
"""
