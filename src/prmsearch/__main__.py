"""``python -m prmsearch``: the ``prmsearch`` command."""

import sys

from prmsearch.cli import main

if __name__ == "__main__":
    sys.exit(main())
