"""``python -m agent_adapter.cli``: the same as the ``agent-adapter`` script."""

from . import main

raise SystemExit(main())
