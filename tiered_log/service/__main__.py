"""``python -m tiered_log.service``: run the HTTP service (see :mod:`.server`)."""

from __future__ import annotations

import sys

from .server import serve_main

if __name__ == "__main__":
    raise SystemExit(serve_main(sys.argv[1:]))
