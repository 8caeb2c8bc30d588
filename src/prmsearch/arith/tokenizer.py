"""The small BPE tokenizer shared by the arithmetic policy and (later) its PRM.

Why these choices:
- Trained with the Qwen2 pre-tokenizer pipeline (NFC, the Qwen2 split regex, ByteLevel), because
  transformers 5 rebuilds exactly that pipeline from vocab and merges for any ``model_type: qwen2``
  folder; any other pipeline would give different ids at run time than at training time.
  `save_tokenizer` asserts that ``AutoTokenizer.from_pretrained(folder)`` round-trips the ids.
- The alphabet is only the characters of the training corpus (no 256-byte alphabet) and the model's
  ``vocab_size`` equals ``len(tokenizer)``: no id exists that the model never saw as a symbol of
  the domain, so temperature sampling cannot emit padding ids. Characters outside the alphabet are
  dropped by the encoder; the domain never produces them.
- ``"\\n\\n"`` (the step delimiter) is one token; `train_tokenizer` checks it.
- Special tokens in the Qwen2.5-Math-PRM layout: ``<|endoftext|>`` (pad), ``<|im_start|>``,
  ``<|im_end|>`` (eos), ``<extra_0>`` (the PRM's step separator), plus a Qwen-style chat template.

The corpus (gold solutions of the first train problems, in the policy's "plain" format and in the
chat format) is fixed, so training is deterministic.
"""

from __future__ import annotations

import json
from pathlib import Path

from prmsearch.arith.phrasing import BANKS, TRAIN_BANK, phrased_problem
from prmsearch.arith.problems import load_split, solution_text

__all__ = [
    "CHAT_TEMPLATE",
    "DELIMITER",
    "EOS_TOKEN",
    "PAD_TOKEN",
    "PHRASED_VOCAB_SIZE",
    "PLAIN_CHAT_TEMPLATE",
    "QWEN2_SPLIT_REGEX",
    "SPECIAL_TOKENS",
    "STEP_SEPARATOR",
    "SYSTEM_PROMPT",
    "load_tokenizer",
    "save_tokenizer",
    "train_tokenizer",
]

QWEN2_SPLIT_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
EOS_TOKEN = "<|im_end|>"
STEP_SEPARATOR = "<extra_0>"
SPECIAL_TOKENS = (PAD_TOKEN, IM_START, EOS_TOKEN, STEP_SEPARATOR)
DELIMITER = "\n\n"
SYSTEM_PROMPT = "Please reason step by step, and put your final answer within \\boxed{}."

#: Qwen-style chat template; a default system prompt is added when none is given.
CHAT_TEMPLATE = (
    "{%- if messages[0]['role'] != 'system' %}"
    "{{- '<|im_start|>system\\n" + SYSTEM_PROMPT.replace("\\", "\\\\") + "<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

#: The plain layout the policy was trained on, as a chat template: the question, the step
#: delimiter, then the assistant's text (the system prompt is not shown). The arithmetic PRM
#: ships it so that its ``qwen-prm`` input is exactly the text its base model was trained on
#: (with ``<extra_0>`` for the delimiter), as Qwen2.5-Math-PRM reads the chat layout of its base.
PLAIN_CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{%- if message['role'] == 'user' %}{{- message['content'] + '\n\n' }}"
    "{%- elif message['role'] == 'assistant' %}{{- message['content'] }}"
    "{%- endif %}"
    "{%- endfor %}"
)

#: total size of the BPE vocabulary, special tokens included
DEFAULT_VOCAB_SIZE = 160
#: the vocabulary of the phrased policy (more words to merge)
PHRASED_VOCAB_SIZE = 256
_PRINTABLE_ASCII = "".join(chr(c) for c in range(32, 127))
_CORPUS_PROBLEMS = 4000


def _corpus(phrased: bool = False) -> list[str]:
    """Plain-format texts (as the policy sees them) plus a few chat-format renderings.

    With ``phrased``, every problem's question also appears in a phrasing of the training bank.
    """
    problems = load_split("train", _CORPUS_PROBLEMS)
    texts = [p.question + DELIMITER + solution_text(p.gold_steps) for p in problems]
    if phrased:
        texts += [phrased_problem(p, TRAIN_BANK).question + DELIMITER for p in problems]
    for p in problems[:200]:  # chat format, without the special tokens (they are added tokens)
        texts.append(f"system\n{SYSTEM_PROMPT}\n")
        texts.append(f"user\n{p.question}\n")
        texts.append("assistant\n" + "".join(s for s in p.gold_steps) + "\n")
    return texts


def train_tokenizer(vocab_size: int = DEFAULT_VOCAB_SIZE, phrased: bool = False):
    """Train the BPE vocabulary; returns a `tokenizers.Tokenizer` of exactly ``vocab_size`` ids.

    ``phrased`` (the policy that reads other phrasings) adds phrased questions to the corpus and
    every printable ASCII character to the alphabet, so no character a user types is dropped.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    texts = _corpus(phrased)
    alphabet = sorted({c for t in texts for c in t} | (set(_PRINTABLE_ASCII) if phrased else set()))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    # the ByteLevel alphabet of the corpus characters (UTF-8 bytes mapped to printable symbols)
    initial = sorted({s for c in alphabet for s, _ in byte_level.pre_tokenize_str(c)})
    n_bpe = vocab_size - len(SPECIAL_TOKENS)
    if n_bpe < len(initial) + 1:
        raise ValueError(f"vocab_size must be > {len(initial) + len(SPECIAL_TOKENS)}, got {vocab_size}")
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(QWEN2_SPLIT_REGEX), behavior="isolated", invert=False), byte_level]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=n_bpe,
        min_frequency=1,
        show_progress=False,
        special_tokens=[],
        initial_alphabet=initial,
        limit_alphabet=len(initial),
    )
    tok.train_from_iterator(texts, trainer=trainer)
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    if tok.get_vocab_size() != vocab_size:
        raise RuntimeError(f"trained vocabulary has {tok.get_vocab_size()} ids, wanted {vocab_size}")
    delim = tok.encode(DELIMITER, add_special_tokens=False).ids
    if len(delim) != 1:
        raise RuntimeError(f"the step delimiter must be one token, got ids {delim}")
    return tok


def save_tokenizer(tok, folder: str | Path) -> None:
    """Write the HF tokenizer files into ``folder`` and check that AutoTokenizer round-trips.

    The folder must already hold (or will hold) a ``config.json`` with ``model_type: qwen2``; the
    round-trip check is run against a temporary config when there is none yet.
    """
    from transformers import AutoTokenizer
    from transformers.models.qwen2.tokenization_qwen2 import Qwen2Tokenizer

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model = json.loads(tok.to_str())["model"]
    hf_tok = Qwen2Tokenizer(
        vocab=dict(model["vocab"]) | {t: tok.token_to_id(t) for t in SPECIAL_TOKENS},
        # transformers annotates merges as list[str] and unk_token as str; the BPE it builds
        # takes merge pairs and no unknown token
        merges=[tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]],  # type: ignore[misc]
        unk_token=None,  # type: ignore[arg-type]
        bos_token=None,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        additional_special_tokens=[IM_START, STEP_SEPARATOR],
    )
    hf_tok.chat_template = CHAT_TEMPLATE
    hf_tok.save_pretrained(str(folder))
    _check_round_trip(tok, folder, AutoTokenizer)


def _check_round_trip(tok, folder: Path, auto_tokenizer) -> None:
    """AutoTokenizer on the folder (as a qwen2 model folder) must give the trained ids exactly."""
    import tempfile

    config = folder / "config.json"
    with tempfile.TemporaryDirectory() as tmp:
        if config.exists():
            loaded = auto_tokenizer.from_pretrained(str(folder))
        else:  # load as a qwen2 folder, the way the policy folder will be loaded
            for f in folder.iterdir():
                (Path(tmp) / f.name).write_bytes(f.read_bytes())
            (Path(tmp) / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
            loaded = auto_tokenizer.from_pretrained(tmp)
        problems = load_split("validation", 20)
        samples = [p.question + DELIMITER + solution_text(p.gold_steps) for p in problems]
        samples += ["12 +5 = 9x?\n\n\n  \\boxed{-3}  ", DELIMITER, "".join(SPECIAL_TOKENS)]
        if tok.token_to_id("k") is not None:  # a phrased tokenizer: its questions must round-trip too
            samples += [phrased_problem(p, bank).question for p in problems for bank in BANKS.values()]
        for text in samples:
            want = tok.encode(text, add_special_tokens=False).ids
            got = loaded(text, add_special_tokens=False)["input_ids"]
            if want != got:
                raise RuntimeError(f"AutoTokenizer ids differ from the trained ones on {text!r}")
            if loaded.decode(got) != text:
                raise RuntimeError(f"decode does not invert encode on {text!r}")
        if len(loaded) != tok.get_vocab_size():
            raise RuntimeError(f"len(AutoTokenizer)={len(loaded)} != {tok.get_vocab_size()}")
        if loaded.eos_token != EOS_TOKEN or loaded.pad_token != PAD_TOKEN:
            raise RuntimeError(f"eos/pad are {loaded.eos_token!r}/{loaded.pad_token!r}")


def load_tokenizer(folder: str | Path):
    """The HF tokenizer of a saved folder (a thin wrapper, for symmetry)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))
