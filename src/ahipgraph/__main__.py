"""``python -m ahipgraph``: the same command as the ``ahipgraph`` console script."""

from .cli import main

raise SystemExit(main())
