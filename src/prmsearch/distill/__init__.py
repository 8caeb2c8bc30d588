"""Distil search into the policy (``prmsearch train-policy``): SFT and DPO with TRL on exported
search data, for any Hugging Face causal LM, the embedded policy included.

The output folder is a model folder that ``--policy DIR`` loads as it loaded the base: weights,
tokenizer, chat template and the base's ``prmsearch.json`` (prompt format, delimiter, EOS), with
how it was trained added.
"""

from prmsearch.distill.config import PolicyTrainConfig
from prmsearch.distill.data import load_training_data
from prmsearch.distill.trainer import train_policy

__all__ = ["PolicyTrainConfig", "load_training_data", "train_policy"]
