"""Moving data in and out of a store (internal; it may change in any release).

* ``_export_file``: the export/import file format of ``firefly-orm export`` /
  ``import`` (shapes, UTF-8, checked before anything is written);
* ``_upstream_plan``, ``_upstream_sources``, ``_upstream_run``: importing the
  Firefly framework memory module's data, imported from its public path
  :mod:`firefly_orm.upstream_import`.

Flyte's directory layout for artifact workspaces is
:mod:`firefly_orm.artifacts._flyte`.
"""
