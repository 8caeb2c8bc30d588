"""PRM scoring and policy decode throughput at Qwen2.5-Math sizes on a GPU (the work is
:mod:`benchmarks.gpu_bench`; this path runs it without ``-m``).

    python scripts/gpu_bench.py --out gpu_bench.json          # on the GPU machine, < 8 minutes
    python scripts/gpu_bench.py --small --out /tmp/small.json # tiny models on CPU (CI), < 60 s
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.gpu_bench import main

if __name__ == "__main__":
    main()
