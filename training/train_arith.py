"""Train the embedded arithmetic policy (thin wrapper over `training.arith.train_policy_main`).

Example (the shipped policy): see ``trained_with`` in src/prmsearch/arith/models/policy/prmsearch.json.
Smoke run (seconds): ``python -m training.train_arith policy --smoke --out /tmp/arith-smoke``.
"""

import sys

from training.arith.commands import train_policy_main as main

if __name__ == "__main__":
    sys.exit(main())
