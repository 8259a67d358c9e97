"""``python -m kquota``: the ``kquota`` command line."""

from kquota.cli import main

raise SystemExit(main())
