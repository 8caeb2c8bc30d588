"""The transformers backends measured side by side, in one run, on models built in place.

What one run measures (issue 3, "Measure"):

1. PRM scoring throughput: the same step sequences scored in one batched call vs. one call
   per sequence, with every cache off (tokens/s of real, unpadded tokens).
2. Incremental PRM scoring: a batched beam search runs twice over the same problems and seeds,
   (A) with the backends' reuse on (PRM score + KV prefix caches, policy prefix KV cache) and
   (B) with all reuse off (PRM re-scores every full path, policy re-prefills every prompt).
   A's PRM tokens computed vs. B's; B must equal A's ``computed + cached``, and both runs must
   give the same step scores.
3. Policy prefix reuse over the same two runs: prompt tokens computed by A vs. B, and vs. the
   naive count of a loop that prefills the full prompt for every one of the ``n`` samples.
   The two runs must give the same samples (sampling is counter-based, so they do unless
   float rounding flips a near-tie); the output says whether they did.

Models: a Qwen2ForCausalLM policy and a ``Qwen2ForProcessRewardModel``-layout PRM (Qwen2 base +
Linear-ReLU-Linear head) with random weights, and a byte-level BPE tokenizer built here (every
byte is a token, ``"\\n\\n"`` is one token, Qwen special tokens, a Qwen-style chat template).
Random weights would emit near-uniform tokens and almost never the step delimiter, so the
policy's output layer gets a bias (the only change to its weights): special and non-printable
tokens are forbidden and the delimiter token gets the probability that makes steps
``mean_step_tokens`` long on average. Paths never produce an answer, so every search runs to
``max_depth`` (the driver cuts paths there): the tree depth is real, the text is noise.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from prmsearch.perf.batching import CountingPolicy
from prmsearch.policies.base import Policy, SamplingParams
from prmsearch.scorers.base import ScoreRequest

__all__ = [
    "BackendBenchConfig",
    "BackendFigures",
    "ModelShape",
    "bench_tokenizer",
    "build_policy_model",
    "build_prm_model",
    "run_backend_bench",
]

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


# ------------------------------------------------------------------------------------ config
@dataclass(frozen=True)
class BackendBenchConfig:
    """One run of the backend benchmark.

    Attributes:
        policy: policy model shape.
        prm: PRM model shape.
        problems: questions searched together (one batched search).
        n: beam search budget per step; ``n / width`` beams are kept.
        width: children per beam.
        max_depth: steps per path (the driver cuts paths there); the search depth.
        max_new_tokens: token limit per step.
        mean_step_tokens: target mean step length of the shaped random policy.
        question_words: words per question (a word is ~5 byte tokens).
        score_requests: step sequences in the throughput measurement.
        score_max_steps: steps per throughput sequence are drawn from 1..this.
        step_words: (min, max) words per throughput step.
        max_batch_tokens: padded-token budget per forward, policy and PRM.
        seed: seeds the weights, the texts and the search.
    """

    policy: ModelShape
    prm: ModelShape
    problems: int = 4
    n: int = 16
    width: int = 4
    max_depth: int = 10
    max_new_tokens: int = 256
    mean_step_tokens: float = 40.0
    question_words: int = 40
    score_requests: int = 256
    score_max_steps: int = 8
    step_words: tuple[int, int] = (8, 20)
    max_batch_tokens: int = 16384
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("problems", "n", "width", "max_depth", "max_new_tokens", "question_words",
                     "score_requests", "score_max_steps", "max_batch_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if self.n % self.width:
            raise ValueError(f"n must be a multiple of width ({self.width}), got n={self.n}")
        if not 1 < self.mean_step_tokens < self.max_new_tokens:
            raise ValueError(
                f"mean_step_tokens must be in (1, max_new_tokens={self.max_new_tokens}), got "
                f"{self.mean_step_tokens}"
            )
        low, high = self.step_words
        if not 1 <= low <= high:
            raise ValueError(f"step_words must be (min, max) with 1 <= min <= max, got {self.step_words}")

    @classmethod
    def full(cls) -> BackendBenchConfig:
        """The default run (about two minutes on one CPU thread)."""
        return cls(
            policy=ModelShape(hidden=128, layers=4, heads=4, kv_heads=2, intermediate=384, vocab=320),
            prm=ModelShape(hidden=192, layers=4, heads=4, kv_heads=2, intermediate=512, vocab=320),
        )

    @classmethod
    def quick(cls) -> BackendBenchConfig:
        """A small run for tests (well under a minute on one CPU thread), still depth 8."""
        return cls(
            policy=ModelShape(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128, vocab=320),
            prm=ModelShape(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128, vocab=320),
            problems=2,
            n=8,
            width=2,
            max_depth=8,
            max_new_tokens=96,
            mean_step_tokens=20.0,
            question_words=20,
            score_requests=64,
            score_max_steps=4,
            step_words=(4, 12),
        )


# ------------------------------------------------------------------------------- measurements
@dataclass(frozen=True)
class ScoringFigures:
    """PRM throughput, batched vs. one request per call, every cache off."""

    requests: int
    tokens: int
    batched_s: float
    single_s: float
    max_abs_diff: float

    @property
    def batched_tps(self) -> float:
        """Tokens/s of the batched call."""
        return self.tokens / self.batched_s

    @property
    def single_tps(self) -> float:
        """Tokens/s of one call per request."""
        return self.tokens / self.single_s


@dataclass(frozen=True)
class SearchFigures:
    """What one batched beam search cost (ledger totals plus driver timings)."""

    prompt_computed: int
    prompt_cached: int
    prompt_naive: int
    generations: int
    generated_tokens: int
    prm_computed: int
    prm_cached: int
    wall_s: float
    policy_s: float
    scorer_s: float
    depth: int
    nodes: int


@dataclass(frozen=True)
class BackendFigures:
    """The figures of one run and the checks that make them comparable."""

    config: BackendBenchConfig
    policy_parameters: int
    prm_parameters: int
    scoring: ScoringFigures
    reuse: SearchFigures
    baseline: SearchFigures
    same_samples: bool
    nodes_compared: int
    score_max_abs_diff: float

    def table(self) -> str:
        """The one side-by-side table, then what was measured and the checks."""
        s, a, b, cfg = self.scoring, self.reuse, self.baseline, self.config
        rows = [
            (f"PRM scoring tokens/s, {s.requests} step sequences ({s.tokens:,} tokens)",
             "batched", f"{s.batched_tps:,.0f}", "one by one", f"{s.single_tps:,.0f}",
             s.batched_tps / s.single_tps),
            (f"PRM tokens computed, beam search depth {a.depth}",
             "incremental", f"{a.prm_computed:,}", "full re-score", f"{b.prm_computed:,}",
             b.prm_computed / max(1, a.prm_computed)),
            ("policy prompt tokens computed, same search",
             "prefix reuse", f"{a.prompt_computed:,}", "no reuse", f"{b.prompt_computed:,}",
             b.prompt_computed / max(1, a.prompt_computed)),
            ("policy prompt tokens computed, same search",
             "prefix reuse", f"{a.prompt_computed:,}", "naive n x prompt", f"{a.prompt_naive:,}",
             a.prompt_naive / max(1, a.prompt_computed)),
            ("search wall s (policy s + PRM s)",
             "all reuse", f"{a.wall_s:.1f} ({a.policy_s:.1f}+{a.scorer_s:.1f})",
             "no reuse", f"{b.wall_s:.1f} ({b.policy_s:.1f}+{b.scorer_s:.1f})",
             b.wall_s / a.wall_s),
        ]
        lines = ["| measure | A | A value | B | B value | A's gain |", "|---|---|---|---|---|---|"]
        lines += [f"| {m} | {an} | {av} | {bn} | {bv} | {r:.2f}x |" for m, an, av, bn, bv, r in rows]
        full_match = b.prm_computed == a.prm_computed + a.prm_cached
        lines += [
            "",
            f"Models: random-weight Qwen2 policy ({self.policy_parameters:,} parameters) and "
            f"Qwen2-PRM ({self.prm_parameters:,}), float32 on CPU, byte-level tokenizer; search: "
            f"beam n={cfg.n} width={cfg.width} over {cfg.problems} problems batched, max_depth="
            f"{cfg.max_depth}, {a.nodes} nodes, {a.generations} steps of mean "
            f"{a.generated_tokens / max(1, a.generations):.1f} tokens (policy output biased to "
            f"~{cfg.mean_step_tokens:g}-token steps).",
            "Throughput: the same requests scored with every PRM cache off, one call vs. one call "
            "per request; tokens are real (unpadded) tokens.",
            "Search: run A (PRM score + KV caches, policy prefix KV cache) and run B (every cache "
            "off) with the same seeds; token counts are the ledger's.",
            f"Check: B's full re-score = A's computed + cached ({a.prm_computed + a.prm_cached:,}): "
            f"{full_match}; same samples in A and B: {self.same_samples} ({self.nodes_compared} "
            f"nodes); max |score A - score B| = {self.score_max_abs_diff:.1e}; batched vs one by "
            f"one max |diff| = {s.max_abs_diff:.1e}.",
        ]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """All figures as plain data."""
        return asdict(self)


def make_score_requests(cfg: BackendBenchConfig, rng: np.random.Generator) -> list[ScoreRequest]:
    """``cfg.score_requests`` step sequences over 16 questions, 1..``score_max_steps`` steps each."""
    texts = TextMaker(rng)
    questions = [texts.question(cfg.question_words) for _ in range(16)]
    out = []
    for k in range(cfg.score_requests):
        count = int(rng.integers(1, cfg.score_max_steps + 1))
        steps = tuple(texts.step(*cfg.step_words) for _ in range(count))
        out.append(ScoreRequest(questions[k % len(questions)], steps))
    return out


def measure_scoring(scorer: Any, requests: Sequence[ScoreRequest]) -> ScoringFigures:
    """Score ``requests`` in one call, then one call each (``scorer`` must cache nothing)."""
    scorer.score(list(requests[:2]))  # warm-up
    start = time.perf_counter()
    batched = scorer.score(list(requests))
    batched_s = time.perf_counter() - start
    start = time.perf_counter()
    single = [scorer.score([r])[0] for r in requests]
    single_s = time.perf_counter() - start
    tokens = sum(r.tokens_computed for r in batched)
    if tokens != sum(r.tokens_computed for r in single):
        raise RuntimeError("batched and one-by-one scoring computed different token counts")
    diff = max(float(np.max(np.abs(b.scores - s.scores))) for b, s in zip(batched, single))
    return ScoringFigures(len(requests), tokens, batched_s, single_s, diff)


def run_search(policy: Policy, scorer: Any, questions: Sequence[str], cfg: BackendBenchConfig
               ) -> tuple[SearchFigures, list[Any]]:
    """One batched beam search; returns its figures and the search results."""
    from prmsearch.api import Searcher

    recording = CountingPolicy(policy)
    sampling = SamplingParams(temperature=1.0, max_new_tokens=cfg.max_new_tokens, delimiter=DELIMITER)
    searcher = Searcher(recording, scorer, "beam", n=cfg.n, width=cfg.width, sampling=sampling,
                        max_depth=cfg.max_depth, seed=cfg.seed)
    results = searcher.run(list(questions))
    errors = [r.error for r in results if r.error]
    if errors:
        raise RuntimeError(f"the search failed: {errors[0]}")
    ledger, stats = searcher.last_ledger, searcher.last_stats
    assert ledger is not None and stats is not None
    figures = SearchFigures(
        prompt_computed=ledger.prompt_tokens_computed,
        prompt_cached=ledger.prompt_tokens_cached,
        prompt_naive=recording.naive_prompt_tokens,
        generations=ledger.generations,
        generated_tokens=ledger.generated_tokens,
        prm_computed=ledger.prm_tokens_computed,
        prm_cached=ledger.prm_tokens_cached,
        wall_s=stats.wall_s,
        policy_s=stats.policy_s,
        scorer_s=stats.scorer_s,
        depth=max(int(max(r.tree.depth)) for r in results),
        nodes=sum(len(r.tree) for r in results),
    )
    return figures, results


def compare_trees(first: Sequence[Any], second: Sequence[Any]) -> tuple[bool, int, float]:
    """(same nodes and step texts?, nodes compared, max |score difference| over shared nodes)."""
    same, count, diff = True, 0, 0.0
    for a, b in zip(first, second, strict=True):
        ta, tb = a.tree, b.tree
        if list(ta.parent) != list(tb.parent) or list(ta.step_text) != list(tb.step_text):
            same = False
        shared = min(len(ta), len(tb))
        for node in range(1, shared):
            if ta.step_text[node] == tb.step_text[node]:
                diff = max(diff, abs(ta.score[node] - tb.score[node]))
        count += shared - 1
    return same, count, diff


def run_backend_bench(cfg: BackendBenchConfig, log: Log = quiet_log) -> BackendFigures:
    """Build the models, then measure throughput, run A (reuse) and run B (no reuse)."""
    from prmsearch.policies.hf import HFPolicy
    from prmsearch.scorers.hf import HFPRMScorer

    tok = bench_tokenizer()
    policy_model = build_policy_model(cfg.policy, tok, seed=cfg.seed)
    shape_step_lengths(policy_model, tok, cfg.mean_step_tokens)
    prm_model = build_prm_model(cfg.prm, tok, seed=cfg.seed + 1)
    budget = {"max_batch_tokens": cfg.max_batch_tokens}
    no_cache = {"prefix_cache_tokens": 0, "score_cache_entries": 0, **budget}
    fresh_prm = HFPRMScorer.from_model(prm_model, tok, "qwen-prm", **no_cache)

    rng = np.random.default_rng(cfg.seed)
    log(f"PRM throughput: {cfg.score_requests} requests, batched vs one by one")
    scoring = measure_scoring(fresh_prm, make_score_requests(cfg, rng))
    texts = TextMaker(rng)
    questions = [texts.question(cfg.question_words) for _ in range(cfg.problems)]

    log(f"run A: beam search depth {cfg.max_depth}, all reuse on")
    policy_a = HFPolicy.from_model(policy_model, tok, prompt_format="qwen25-math-cot", **budget)
    prm_a = HFPRMScorer.from_model(prm_model, tok, "qwen-prm", **budget)
    reuse, results_a = run_search(policy_a, prm_a, questions, cfg)
    log("run B: the same search, every cache off")
    policy_b = HFPolicy.from_model(policy_model, tok, prompt_format="qwen25-math-cot",
                                   prefix_cache_tokens=0, **budget)
    baseline, results_b = run_search(policy_b, fresh_prm, questions, cfg)
    same, nodes, diff = compare_trees(results_a, results_b)
    return BackendFigures(
        config=cfg,
        policy_parameters=policy_a.num_parameters,
        prm_parameters=prm_a.num_parameters,
        scoring=scoring,
        reuse=reuse,
        baseline=baseline,
        same_samples=same,
        nodes_compared=nodes,
        score_max_abs_diff=diff,
    )
