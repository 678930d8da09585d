"""Entry point of ``python -m bench``."""

from __future__ import annotations

import sys

from bench.runner import main

if __name__ == "__main__":
    sys.exit(main())
