"""``python -m prmsearch.cli``: the ``prmsearch`` command, as the console script runs it."""

from __future__ import annotations

import sys

from prmsearch.cli import main

if __name__ == "__main__":
    sys.exit(main())
