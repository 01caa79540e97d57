"""``python -m tiered_log.cli``: the ``tiered-log`` command."""

from __future__ import annotations

from . import main

raise SystemExit(main())
