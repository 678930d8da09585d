"""Benchmarks for firefly_orm: workloads measured against raw-driver baselines.

Run ``python -m bench`` (full, a few minutes) or ``python -m bench --quick``
(about 30 seconds).  See ``bench/README.md`` for what is measured and why.
"""
