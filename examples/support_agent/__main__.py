"""``python -m examples.support_agent``: see :mod:`examples.support_agent.demo`."""

from examples.support_agent.demo import main

raise SystemExit(main())
