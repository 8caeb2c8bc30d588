"""Tiny local models and tokenizers for the backend tests (random weights, no downloads).

The tokenizer is byte-level BPE with the Qwen2 pre-tokenizer (what transformers 5 rebuilds for
any Qwen2Tokenizer), a handful of merges chosen to exercise the delimiter logic ("\\n\\n" as one
token, ".\\n\\n" as one token, " ки" as one token), and each family's special tokens.
"""

from __future__ import annotations

from pathlib import Path

CHATML_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

LLAMA3_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>"
    "\n\n{{ m['content'] }}<|eot_id|>{% endfor %}"
    "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)


def byte_alphabet() -> list[str]:
    """The GPT-2 byte-to-unicode alphabet, in byte order."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(
        range(ord("®"), ord("ÿ") + 1)
    )
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs))
    return [chr(table[b]) for b in range(256)]


MERGES = [
    ("Ċ", "Ċ"),          # "\n\n"
    (".", "ĊĊ"),         # ".\n\n"
    ("Ð", "º"),          # к
    ("Ð", "¸"),          # и
    ("Ðº", "Ð¸"),        # ки
    ("Ġ", "ÐºÐ¸"),       # " ки"
    ("Ġ", "+"),
    ("Ġ", "-"),
    ("Ġ", "="),
]


def build_tokenizer(special: list[str], *, eos: str, bos: str | None = None,
                    pad: str | None = None, chat_template: str | None = None):
    """A byte-level BPE ``Qwen2Tokenizer`` with ``special`` added as special tokens."""
    from transformers import Qwen2Tokenizer

    vocab = {c: i for i, c in enumerate(byte_alphabet())}
    for a, b in MERGES:
        vocab[a + b] = len(vocab)
    tok = Qwen2Tokenizer(
        vocab=vocab, merges=list(MERGES), unk_token=None,
        eos_token=eos, pad_token=pad or eos, bos_token=bos,
    )
    tok.add_special_tokens({"additional_special_tokens": special})
    if chat_template is not None:
        tok.chat_template = chat_template
    return tok


def save_and_reload_tokenizer(tok, folder: Path):
    """Save ``tok`` and load it back through ``AutoTokenizer`` (the real loading path)."""
    from transformers import AutoTokenizer

    tok.save_pretrained(folder)
    return AutoTokenizer.from_pretrained(folder)
