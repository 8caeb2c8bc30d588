"""``python -m training.arith COMMAND ...``: the embedded models' training commands
(:mod:`training.arith.commands`)."""

import sys

from training.arith.commands import main

sys.exit(main())
