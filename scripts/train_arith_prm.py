"""Label, train, evaluate and (with --ship) ship the embedded arithmetic PRM.

    python scripts/train_arith_prm.py --out runs/prm --ship     # the shipped run
    python scripts/train_arith_prm.py --out /tmp/prm --smoke    # seconds, for CI
"""

from __future__ import annotations

import sys

from prmsearch.arith.prm_pipeline import main

if __name__ == "__main__":
    sys.exit(main())
