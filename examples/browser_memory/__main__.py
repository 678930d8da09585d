"""``python -m examples.browser_memory [--db URL] [--schema NAME] [--session ID] [--reset]``."""

from examples.browser_memory.demo import main

raise SystemExit(main())
