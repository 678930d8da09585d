"""Upstream's ``content`` package: only what the memory module uses (``compression``)."""
