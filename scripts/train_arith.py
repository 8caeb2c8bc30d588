"""Train the embedded arithmetic policy (thin wrapper over `prmsearch.prm.policy_train.main`).

Example (the shipped policy): see ``trained_with`` in src/prmsearch/arith/models/policy/prmsearch.json.
Smoke run (seconds): ``python scripts/train_arith.py policy --smoke --out /tmp/arith-smoke``.
"""

import sys

from prmsearch.prm.policy_train import main

if __name__ == "__main__":
    sys.exit(main())
