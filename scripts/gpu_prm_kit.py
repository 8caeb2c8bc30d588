"""The PRM development kit end to end at real model size on one GPU: label, train, evaluate
(thin entry point; the work is :mod:`prmsearch.perf.prm_kit`, the flags :mod:`prmsearch.cli.gpu_prm_kit`).

    python scripts/gpu_prm_kit.py --out gpu_prm_kit.json            # on the GPU machine, < 10 minutes
    python scripts/gpu_prm_kit.py --small --out /tmp/kit.json       # tiny models on CPU (CI), < 60 s
"""

from prmsearch.cli.gpu_prm_kit import main

if __name__ == "__main__":
    main()
