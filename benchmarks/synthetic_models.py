"""Models of real architectures with random weights, built in place for speed measurement.

A Qwen2ForCausalLM policy and a ``Qwen2ForProcessRewardModel``-layout PRM (Qwen2 base +
Linear-ReLU-Linear head) of any :class:`ModelShape`, and a byte-level BPE tokenizer built here
(every byte is a token, ``"\\n\\n"`` is one token, Qwen special tokens, a Qwen-style chat
template). Random weights would emit near-uniform tokens and almost never the step delimiter, so
the policy's output layer gets a bias (the only change to its weights): special and non-printable
tokens are forbidden and the delimiter token gets the probability that makes steps
``mean_step_tokens`` long on average. Used by the backend benchmark and the GPU script; nothing
is downloaded.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
EOS_TOKEN = "<|im_end|>"
STEP_SEPARATOR = "<extra_0>"
DELIMITER = "\n\n"

#: Qwen-style chat template (a default system turn when none is given).
CHAT_TEMPLATE = (
    "{%- if messages[0]['role'] != 'system' %}"
    "{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

_WORDS = (
    "the", "number", "of", "apples", "is", "then", "so", "we", "find", "that", "each", "box", "holds",
    "more", "than", "twice", "as", "many", "if", "sum", "total", "difference", "product", "ratio", "of",
    "and", "value", "equals", "let", "x", "y", "n", "be", "integer", "remainder", "when", "divided",
    "by", "gives", "therefore", "hence", "subtract", "add", "multiply", "divide", "both", "sides",
    "area", "side", "length", "triangle", "circle", "radius", "angle", "degrees", "prime", "factor",
    "square", "root", "3", "7", "12", "15", "24", "36", "48", "100", "=", "+", "-", "*", "/", "(", ")",
    ",", ".",
)

Log = Callable[[str], None]


def quiet_log(_: str) -> None:
    """A logger that drops messages."""


# ------------------------------------------------------------------------------------ models
@dataclass(frozen=True)
class ModelShape:
    """The size of a Qwen2 transformer.

    Attributes:
        hidden: hidden size.
        layers: decoder layers.
        heads: attention heads.
        kv_heads: key/value heads (grouped-query attention).
        intermediate: MLP inner size.
        vocab: embedding rows (may exceed the tokenizer's size, as in the real Qwen models).
        tie_embeddings: the output layer shares the input embedding.
        max_positions: context length.
    """

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    tie_embeddings: bool = False
    max_positions: int = 4096

    def __post_init__(self) -> None:
        for name in ("hidden", "layers", "heads", "kv_heads", "intermediate", "vocab", "max_positions"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be a multiple of heads ({self.heads})")
        if self.heads % self.kv_heads:
            raise ValueError(f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")

    @property
    def head_dim(self) -> int:
        """Size of one attention head."""
        return self.hidden // self.heads

    def qwen2_config(self, tokenizer: Any | None = None) -> Any:
        """A ``Qwen2Config`` of this shape (special token ids from ``tokenizer`` when given)."""
        from transformers import Qwen2Config

        ids: dict[str, Any] = {}
        if tokenizer is not None:
            ids = {"eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id}
        return Qwen2Config(
            vocab_size=self.vocab,
            hidden_size=self.hidden,
            num_hidden_layers=self.layers,
            num_attention_heads=self.heads,
            num_key_value_heads=self.kv_heads,
            intermediate_size=self.intermediate,
            max_position_embeddings=self.max_positions,
            tie_word_embeddings=self.tie_embeddings,
            attn_implementation="sdpa",
            **ids,
        )


def bench_tokenizer() -> Any:
    """A byte-level BPE ``Qwen2Tokenizer``: 256 byte tokens, ``"\\n\\n"`` as one token, the Qwen
    special tokens (pad ``<|endoftext|>``, eos ``<|im_end|>``, ``<|im_start|>``, ``<extra_0>``)
    and a Qwen-style chat template. Built locally; 261 ids, so any Qwen vocabulary covers it."""
    from transformers import Qwen2Tokenizer

    alphabet = _byte_alphabet()
    vocab = {c: i for i, c in enumerate(alphabet)}
    newline = alphabet[ord("\n")]
    merges = [(newline, newline)]
    vocab[newline * 2] = len(vocab)
    tok = Qwen2Tokenizer(vocab=vocab, merges=merges, unk_token=None, bos_token=None,
                         eos_token=EOS_TOKEN, pad_token=PAD_TOKEN)
    tok.add_special_tokens({"additional_special_tokens": [IM_START, STEP_SEPARATOR]})
    tok.chat_template = CHAT_TEMPLATE
    if tok.encode(DELIMITER, add_special_tokens=False) != [vocab[newline * 2]]:
        raise RuntimeError("the bench tokenizer must encode the step delimiter as one token")
    return tok


def _byte_alphabet() -> list[str]:
    """The byte-level BPE alphabet: the printable symbol of every byte, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    symbols: dict[int, str] = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in symbols:
            symbols[b] = chr(256 + extra)
            extra += 1
    return [symbols[b] for b in range(256)]


def build_policy_model(shape: ModelShape, tokenizer: Any, *, seed: int = 0) -> Any:
    """A ``Qwen2ForCausalLM`` of ``shape`` with random weights, in eval mode, on the default device
    and dtype (wrap the call in ``torch.device(...)`` / a default-dtype context to change them)."""
    import torch
    from transformers import Qwen2ForCausalLM

    torch.manual_seed(seed)
    return Qwen2ForCausalLM(shape.qwen2_config(tokenizer)).eval()


def build_prm_model(shape: ModelShape, tokenizer: Any, *, seed: int = 0) -> Any:
    """A ``Qwen2ForProcessRewardModel``-layout PRM (Qwen2 base + 2-logit head), random weights."""
    from prmsearch.scorers.heads import build_qwen_prm

    return build_qwen_prm(shape.qwen2_config(tokenizer), seed=seed).eval()


def shape_step_lengths(model: Any, tokenizer: Any, mean_step_tokens: float,
                       delimiter: str = DELIMITER) -> int:
    """Give a random policy realistic steps: replace its output layer by one with a bias.

    The bias forbids special tokens, ids beyond the tokenizer and tokens whose text is not
    printable, and lifts the delimiter token so that, with near-uniform random logits, a step
    has ``mean_step_tokens`` tokens on average. The weights are shared, not changed.
    Returns the number of tokens left allowed (the delimiter excluded).
    """
    import torch

    if mean_step_tokens <= 1:
        raise ValueError(f"mean_step_tokens must be > 1, got {mean_step_tokens}")
    head = model.get_output_embeddings()
    vocab, hidden = head.weight.shape
    delim = tokenizer.encode(delimiter, add_special_tokens=False)
    if len(delim) != 1:
        raise ValueError(f"the delimiter {delimiter!r} must be one token, got {delim}")
    special = set(tokenizer.all_special_ids)
    n = min(vocab, len(tokenizer))
    pieces = tokenizer.batch_decode([[i] for i in range(n)], skip_special_tokens=False,
                                    clean_up_tokenization_spaces=False)
    allowed = [i for i, p in enumerate(pieces)
               if i not in special and p and p.isprintable() and "\ufffd" not in p]
    bias = torch.full((vocab,), -1e4, dtype=head.weight.dtype, device=head.weight.device)
    bias[allowed] = 0.0
    bias[delim[0]] = math.log(len(allowed) / mean_step_tokens)
    biased = torch.nn.Linear(hidden, vocab, bias=True, device=head.weight.device,
                             dtype=head.weight.dtype)
    biased.weight = head.weight
    biased.bias = torch.nn.Parameter(bias, requires_grad=False)
    model.set_output_embeddings(biased)
    return len(allowed)


class TextMaker:
    """Random question and step texts from a small math lexicon (seeded, no delimiters)."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def words(self, count: int) -> str:
        """``count`` random lexicon words joined by spaces."""
        picks = self.rng.integers(0, len(_WORDS), size=count)
        return " ".join(_WORDS[i] for i in picks)

    def question(self, count: int) -> str:
        """A question of ``count`` words."""
        return self.words(count).capitalize() + "?"

    def step(self, low: int, high: int) -> str:
        """A step of ``low``..``high`` words."""
        return self.words(int(self.rng.integers(low, high + 1))).capitalize() + "."

    def chars(self, count: int) -> str:
        """Lexicon text of exactly ``count`` characters (one byte token each)."""
        text = ""
        while len(text) < count:
            text += self.words(16) + " "
        return text[:count]


