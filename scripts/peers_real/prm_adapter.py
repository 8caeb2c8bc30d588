"""The verifier every library of the real-model side-by-side calls in its own process.

``PRMCore``: any Qwen2ForProcessRewardModel-layout folder (``--prm DIR``: base weights under
``model.*``, head ``score.0`` Linear -> ReLU -> ``score.2`` Linear(2), single or sharded
safetensors) as a plain transformers scorer, with EXACTLY the input that prmsearch's ``qwen-prm``
scorer builds (prmsearch.scorers.formats.QwenPRMFormat):

    the PRM folder's OWN tokenizer and chat template, messages = [system: Qwen math system prompt,
    user: question, assistant: "<extra_0>".join(steps) + "<extra_0>"], tokenised without added
    special tokens, cut after the last <extra_0>; P(good) = softmax(head)[1] at each tag.

The policy's tokenizer is never used here: the PRM may have another vocabulary (the embedded
arithmetic PRM used for smoke tests does; the project's trained 0.5B PRM shares Qwen2.5's).
An input longer than the PRM's context is an error, as in prmsearch's scorer (the embedded PRM
has 256 positions: smoke tests use a scratch copy with max_position_embeddings raised).
No caching of any kind: each call is one right-padded forward over whole paths, which is how
its_hub and ThinkBooster use a PRM (whole answers handed over at every step). float32, as the
headline's trained-PRM recipe runs the hf scorer.

``InstantCore``: the zero-cost verifier with the same interface (sbs_common.instant_score per
path prefix, nothing computed), for isolating each library plus the engine from PRM compute.

    python prm_adapter.py --check --prm DIR [--problems-json P]   # prmsearch venv: parity
"""
import json
import math
import os
import sys
import threading
import time

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sbs_common as C

QWEN_MATH_SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}."
SEP = "<extra_0>"


def _head_state(prm_dir):
    """The ``score.*`` tensors of a folder's safetensors (one file or an index of shards)."""
    from safetensors import safe_open

    index = os.path.join(prm_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        files = sorted({f for k, f in C.read_json(index)["weight_map"].items()
                        if k.startswith("score.")})
    else:
        files = ["model.safetensors"]
    state = {}
    for name in files:
        with safe_open(os.path.join(prm_dir, name), framework="pt") as f:
            names = list(f.keys())  # a safetensors handle is not iterable
            state.update({k[len("score."):]: f.get_tensor(k) for k in names if k.startswith("score.")})
    return state


class CoreStats:
    """What both verifiers count (calls, items, tokens, padded tokens, busy seconds), their path
    aggregation and the lock that serialises their calls from the libraries' threads."""

    def __init__(self, aggregation="last"):
        self.aggregation = aggregation
        self.lock = threading.Lock()
        self.reset_stats()

    def reset_stats(self):
        self.calls = self.items = self.tokens = self.padded_tokens = 0
        self.busy_s = 0.0


class PRMCore(CoreStats):
    """A qwen-prm-layout PRM in this process: whole paths in, P(good) per step out."""

    def __init__(self, prm_dir, aggregation="last", threads=1):
        from transformers import AutoConfig, AutoModel, AutoTokenizer

        if threads:
            torch.set_num_threads(threads)
        archs = getattr(AutoConfig.from_pretrained(prm_dir), "architectures", None) or []
        if "Qwen2ForProcessRewardModel" not in archs:
            raise ValueError(f"{prm_dir}: architectures {archs}, not Qwen2ForProcessRewardModel")
        self.prm_dir = prm_dir
        self.tok = AutoTokenizer.from_pretrained(prm_dir)
        if not getattr(self.tok, "chat_template", None):
            raise ValueError(f"{prm_dir}: the PRM's tokenizer has no chat template")
        self.base = AutoModel.from_pretrained(prm_dir, dtype=torch.float32,
                                              attn_implementation="sdpa").eval()
        h = self.base.config.hidden_size
        self.head = nn.Sequential(nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 2))
        self.head.load_state_dict(_head_state(prm_dir))
        self.head.eval()
        sep = self.tok(SEP, add_special_tokens=False)["input_ids"]
        if len(sep) != 1:
            raise ValueError(f"{prm_dir}: {SEP!r} is not one token of the PRM's tokenizer ({sep})")
        self.sep_id = sep[0]
        self.pad_id = self.tok.pad_token_id if self.tok.pad_token_id is not None else 0
        self.max_length = int(getattr(self.base.config, "max_position_embeddings", 0) or 0)
        CoreStats.__init__(self, aggregation)

    def encode(self, question, steps):
        messages = [{"role": "system", "content": QWEN_MATH_SYSTEM},
                    {"role": "user", "content": question},
                    {"role": "assistant", "content": SEP.join(steps) + SEP}]
        text = self.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
        ids = self.tok(text, add_special_tokens=False)["input_ids"]
        last = max(i for i, t in enumerate(ids) if t == self.sep_id)
        if self.max_length and last + 1 > self.max_length:  # as prmsearch's scorer: never truncate
            raise ValueError(f"PRM input of {last + 1} tokens exceeds the PRM context {self.max_length}")
        return ids[: last + 1]

    @torch.inference_mode()
    def step_scores(self, items):
        """items: [(question, [step, ...])] -> [[P(good) per step]] in one padded forward."""
        t0 = time.perf_counter()
        out = [[] for _ in items]
        todo = [(i, self.encode(q, s)) for i, (q, s) in enumerate(items) if s]
        if todo:
            width = max(len(ids) for _, ids in todo)
            input_ids = torch.full((len(todo), width), self.pad_id, dtype=torch.long)
            mask = torch.zeros((len(todo), width), dtype=torch.long)
            for r, (_, ids) in enumerate(todo):
                input_ids[r, : len(ids)] = torch.tensor(ids)
                mask[r, : len(ids)] = 1
            hidden = self.base(input_ids=input_ids, attention_mask=mask).last_hidden_state
            is_tag = (input_ids == self.sep_id) & mask.bool()
            probs = torch.softmax(self.head(hidden[is_tag]).float(), dim=-1)[:, 1].tolist()
            k = 0
            for r, (i, _) in enumerate(todo):
                n = int(is_tag[r].sum())
                out[i] = probs[k: k + n]
                k += n
            self.tokens += int(mask.sum())
            self.padded_tokens += input_ids.numel()
        self.calls += 1
        self.items += len(items)
        self.busy_s += time.perf_counter() - t0
        return out

    def aggregate(self, s):
        return aggregate(s, self.aggregation)


class InstantCore(CoreStats):
    """The zero-cost verifier behind the same interface (stats stay 0 except calls/items)."""

    def step_scores(self, items):
        self.calls += 1
        self.items += len(items)
        return [[C.instant_score(q, s[: k + 1]) for k in range(len(s))] for q, s in items]

    def aggregate(self, s):
        return aggregate(s, self.aggregation)


def aggregate(s, how):
    """Path score from step scores: last (prmsearch's beam/PF default), min or prod; 0.5 for none."""
    if not s:
        return 0.5
    if how == "prod":
        return float(math.prod(s))
    if how == "min":
        return float(min(s))
    return float(s[-1])


def make_core(prm, aggregation="last", threads=1):
    """``--prm instant`` -> InstantCore, else PRMCore(folder)."""
    return InstantCore(aggregation) if prm == "instant" else PRMCore(prm, aggregation, threads)


def _check(prm_dir, n=8):
    """Parity with prmsearch's own qwen-prm scorer (as the prmsearch side builds it: transformers,
    cpu, float32) on GSM8K gold solutions cut into steps, half of the paths with one result
    corrupted: same PRM token count, step scores within 1e-3 (prmsearch's scorer packs sequences
    for wide models, so float sums run in another order)."""
    import random

    from prmsearch.benchmarks.datasets import dataset_spec, default_data_dir, load_dataset
    from prmsearch.scorers.base import ScoreRequest, make_scorer

    torch.set_num_threads(1)
    core = PRMCore(prm_dir, threads=1)
    ref = make_scorer("qwen-prm", model=prm_dir, device="cpu", dtype="float32")
    rng = random.Random(0)
    probs = load_dataset("gsm8k", split="test", shuffle_seed=0, limit=n)
    # the worked solutions (one step a line) of the same problems, from the same file
    with open(os.path.join(default_data_dir(), dataset_spec("gsm8k").filename)) as f:
        worked = {r["question"]: r["answer"] for r in map(json.loads, f)}
    items = []
    for p in probs:
        lines = worked.get(p.question, "").split("\n")
        steps = [ln.strip() for ln in lines if ln.strip() and not ln.startswith("####")]
        steps.append(f"The answer is \\boxed{{{p.answer}}}.")
        for k in range(1, len(steps) + 1):
            part = steps[:k]
            if rng.random() < 0.5:
                j = rng.randrange(k)
                part[j] = part[j].replace("=", "= 1", 1)
            items.append((p.question, part))
    mine = core.step_scores(items)
    theirs = ref.score([ScoreRequest(q, tuple(s)) for q, s in items])
    diff = max(abs(a - b) for m, t in zip(mine, theirs) for a, b in zip(m, t.scores))
    counts = all(len(m) == len(t.scores) for m, t in zip(mine, theirs))
    tok_ref = sum(t.tokens_computed + t.tokens_cached for t in theirs)
    tok_mine = sum(len(core.encode(q, s)) for q, s in items)
    print(f"{prm_dir}: {len(items)} paths: max |score diff| = {diff:.2e}; step counts equal {counts}; "
          f"tokens (adapter) {tok_mine} vs (prmsearch computed+cached) {tok_ref}; "
          f"PRM tokenizer {type(core.tok).__name__} vocab {len(core.tok)}")
    assert counts and diff < 1e-3 and tok_mine == tok_ref


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--prm", required=True, help="qwen-prm-layout PRM folder")
    ap.add_argument("--n", type=int, default=8, help="GSM8K problems in the check")
    a = ap.parse_args()
    if a.check:
        _check(a.prm, n=a.n)
