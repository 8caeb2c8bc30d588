"""Search trees as training data (``prmsearch export``): SFT rows, DPO pairs and stepwise labels
in the formats TRL's trainers read.

A search spends many generations to find one good path; the tree it leaves holds the good path,
the wrong ones and, at each branching point, which continuation paid. This package reads saved
trees (a bench run with ``--save-trees``, a ``label`` run, tree files), grades their paths against
the gold answer or, without one, against the PRM-weighted vote (TTRL's pseudo-label), and writes
JSONL, a ``datasets`` folder and Parquet with a small card.
"""

from prmsearch.export.config import ExportConfig
from prmsearch.export.problems import ProblemTree
from prmsearch.export.records import scorer_checker
from prmsearch.export.run import ExportReport, build_rows, export_dataset
from prmsearch.export.sources import ExportError, SourceFilter

__all__ = [
    "ExportConfig",
    "ExportError",
    "ExportReport",
    "ProblemTree",
    "SourceFilter",
    "build_rows",
    "export_dataset",
    "scorer_checker",
]
