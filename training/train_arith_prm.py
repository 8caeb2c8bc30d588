"""Label, train, evaluate and (with --ship) ship the embedded arithmetic PRM.

    python -m training.train_arith_prm --out runs/prm-final --ship   # the shipped run (~1.5 h, 2 cores)
    python -m training.train_arith_prm --out /tmp/prm --smoke        # seconds, for CI

It first trains the PRM's base model into OUT/base (skip with --base DIR), then labels policy
samples, trains one PRM per label source, evaluates them and ships the best.
"""

from __future__ import annotations

import sys

from training.arith.commands import train_prm_main as main

if __name__ == "__main__":
    sys.exit(main())
