"""The one FLOP formula: what a transformer forward pass costs, per token, for every backend.

Per token run through a model (a prefilled prompt token, a decoded token, a PRM input token):

    2 x non-embedding parameters  +  2 x layers x context x attention width

where *context* is the number of positions the token attends to (its own position: the tokens
before it plus itself) and *attention width* is query heads x head size (Kaplan et al., 2020,
"Scaling Laws for Neural Language Models", Table 1). Non-embedding parameters leave out the input
embedding and the output head: an embedding lookup multiplies nothing, and the output head is
charged only where logits are computed, as ``2 x hidden x vocab`` per decoded token for a policy and
as the PRM head's own size per scored step for a PRM. The shape comes from the model's
``config.json`` and its weight names (safetensors headers or the loaded module), the same files for
the transformers, vLLM, OpenAI-server and SGLang backends, so the same search with the same tokens
costs the same FLOPs on all of them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import compress
from operator import mul
from pathlib import Path
from typing import Any

#: Weight-name fragments of input embeddings and output heads (not multiplied per token).
EMBEDDING_NAMES = ("embed_tokens", "wte", "wpe", "word_embeddings", "embed_positions", "embeddings.")
OUTPUT_HEAD_NAMES = ("lm_head",)


@dataclass(frozen=True)
class ModelCost:
    """What the FLOP formula needs to know about one model.

    Attributes:
        non_embedding_params: weights multiplied for every token (all but embeddings and the
            output head; a PRM's small score head is counted in ``head_flops`` instead).
        layers: transformer layers (0: attention not counted, e.g. a backend of unknown shape).
        attention_width: query heads x head size.
        head_flops: FLOPs of the output head at one position where its output is read (a policy:
            2 x hidden x vocab; a PRM: its head at a step's read position).
    """

    non_embedding_params: int
    layers: int = 0
    attention_width: int = 0
    head_flops: int = 0

    def __post_init__(self) -> None:
        for name in ("non_embedding_params", "layers", "attention_width", "head_flops"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"ModelCost.{name} must be an int >= 0, got {value!r}")

    @classmethod
    def dense(cls, parameters: int) -> ModelCost:
        """A model known only by its parameter count (attention and head not counted)."""
        return cls(non_embedding_params=int(parameters))

    def forward_flops(self, start: int, count: int) -> int:
        """FLOPs of running ``count`` tokens at positions ``start + 1 .. start + count`` (each
        attends to itself and every position before it), without the output head."""
        if count <= 0:
            return 0
        attended = count * start + count * (count + 1) // 2
        return 2 * self.non_embedding_params * count + 2 * self.layers * self.attention_width * attended

    def generation_flops(
        self, *, cached: int, computed: int, sample_tokens: Iterable[int], recomputed: int = 0
    ) -> int:
        """One generation request: prefill ``computed`` prompt tokens after ``cached`` ones, decode
        each sample's tokens after the prompt (with the output head at every decoded token), and
        ``recomputed`` prompt tokens prefilled again (e.g. continuing a blank step) at the end."""
        prompt = cached + computed
        prefill_cached, prefill_computed = [cached], [computed]
        if recomputed > 0:
            prefill_cached.append(prompt)
            prefill_computed.append(recomputed)
        tokens = [t for t in sample_tokens if t > 0]
        return self.generation_flops_columns(prefill_cached, prefill_computed, tokens, [prompt] * len(tokens))

    def generation_flops_columns(
        self, prefill_cached: list[int], prefill_computed: list[int], sample_tokens: list[int],
        sample_prompts: list[int],
    ) -> int:
        """The sum of :meth:`generation_flops` over a round's requests, given as columns: one
        prefill entry per request (and one per re-prefilled prompt: ``cached`` = the prompt,
        ``computed`` = the tokens recomputed), one decode entry per sample (its tokens and its
        prompt's length). Exact, as the per-request sum (every term is a sum over requests),
        in C-level passes: the driver charges each problem's round this way."""
        prefill = sum(prefill_computed)
        prefill_attended = sum(map(mul, prefill_computed, prefill_cached)) + (
            sum(map(mul, prefill_computed, prefill_computed)) + prefill
        ) // 2
        decode = sum(sample_tokens)
        decode_attended = sum(map(mul, sample_tokens, sample_prompts)) + (
            sum(map(mul, sample_tokens, sample_tokens)) + decode
        ) // 2
        return (
            2 * self.non_embedding_params * (prefill + decode)
            + self.head_flops * decode
            + 2 * self.layers * self.attention_width * (prefill_attended + decode_attended)
        )

    def scoring_flops(self, *, cached: int, computed: int, steps: int) -> int:
        """One PRM request: ``computed`` input tokens after ``cached`` reused ones, and the score
        head at each of ``steps`` read positions (none when the whole input was reused)."""
        return self.forward_flops(cached, computed) + (self.head_flops * steps if computed else 0)

    def scoring_flops_total(self, requests: Iterable[tuple[int, int, int]]) -> int:
        """The sum of :meth:`scoring_flops` over ``(cached, computed, steps)`` triples (the
        driver charges a problem's score requests of a round at once); a request with nothing
        computed costs nothing."""
        kept = [(cached, computed, steps) for cached, computed, steps in requests if computed > 0]
        if not kept:
            return 0
        cached, computed, steps = (list(column) for column in zip(*kept))
        return self.scoring_flops_columns(cached, computed, steps)

    def scoring_flops_columns(self, cached: list[int], computed: list[int], steps: list[int]) -> int:
        """:meth:`scoring_flops_total` of requests given as three aligned columns (cached,
        computed, steps), summed by C-level passes: the driver's one-step rounds charge this way."""
        if min(computed, default=0) < 0:  # never from a real scorer; dropped as the triples are
            return self.scoring_flops_total(zip(cached, computed, steps))
        total = sum(computed)
        squares = sum(map(mul, computed, computed))
        across = sum(map(mul, computed, cached))
        heads = sum(compress(steps, computed))  # a request with nothing computed reads no head
        attended = across + (squares + total) // 2
        return 2 * self.non_embedding_params * total + 2 * self.layers * self.attention_width * attended + \
            self.head_flops * heads


def is_embedding(name: str) -> bool:
    """Whether a weight name belongs to an input embedding."""
    return any(part in name for part in EMBEDDING_NAMES)


def is_output_head(name: str) -> bool:
    """Whether a weight name belongs to the language-model output head."""
    return any(part in name for part in OUTPUT_HEAD_NAMES)


def attention_shape(config: Mapping[str, Any]) -> tuple[int, int, int]:
    """(layers, attention width, hidden size) from a Hugging Face ``config.json`` dict."""
    text = config.get("text_config")
    if isinstance(text, Mapping):  # multimodal wrappers keep the language model's shape here
        config = {**config, **text}
    layers = int(config.get("num_hidden_layers") or config.get("n_layer") or 0)
    hidden = int(config.get("hidden_size") or config.get("n_embd") or 0)
    heads = int(config.get("num_attention_heads") or config.get("n_head") or 0)
    head_dim = config.get("head_dim")
    width = heads * int(head_dim) if head_dim else hidden
    return layers, width, hidden


def cost_from_shapes(
    config: Mapping[str, Any], shapes: Mapping[str, tuple[int, ...]], *, score_head: str | None = None
) -> ModelCost:
    """A model's cost from its config and its weight shapes (name -> shape).

    ``score_head``: the weight-name prefix of a PRM's score head (e.g. ``"score"``), whose
    parameters are charged per read position instead of per token. Without it, the output head
    is the LM head (``2 x hidden x vocab`` per decoded token).
    """
    layers, width, hidden = attention_shape(config)
    body = head = 0
    for name, shape in shapes.items():
        size = 1
        for dim in shape:
            size *= int(dim)
        if is_embedding(name):
            continue
        if score_head is not None and (name.startswith(score_head + ".") or f".{score_head}." in name):
            head += size
        elif is_output_head(name):
            continue
        else:
            body += size
    if score_head is None:
        vocab = int(config.get("vocab_size") or 0)
        head_flops = 2 * hidden * vocab
    else:
        head_flops = 2 * head
    return ModelCost(non_embedding_params=body, layers=layers, attention_width=width, head_flops=head_flops)


def safetensors_shapes(folder: str | Path) -> dict[str, tuple[int, ...]]:
    """Weight name -> shape from a folder's ``*.safetensors`` headers (no weights are read)."""
    shapes: dict[str, tuple[int, ...]] = {}
    for path in sorted(Path(folder).glob("*.safetensors")):
        with path.open("rb") as handle:
            length = int.from_bytes(handle.read(8), "little")
            header = json.loads(handle.read(length))
        for name, entry in header.items():
            if name != "__metadata__":
                shapes[name] = tuple(int(d) for d in entry["shape"])
    return shapes


def safetensors_parameter_count(folder: str | Path) -> int:
    """How many values a folder's ``*.safetensors`` hold, from their headers (no weights read)."""
    total = 0
    for shape in safetensors_shapes(folder).values():
        size = 1
        for dim in shape:
            size *= dim
        total += size
    return total


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from ``path`` (empty when missing)."""
    if not path.is_file():
        return {}
    with path.open(encoding="utf-8") as handle:
        data = json.load(handle)
    return data if isinstance(data, dict) else {}


def folder_cost(folder: str | Path | None, *, score_head: str | None = None) -> ModelCost | None:
    """The cost of the model in a local folder, from ``config.json`` and safetensors headers
    (None when the folder is unknown or has no safetensors weights)."""
    if folder is None:
        return None
    folder = Path(folder)
    shapes = safetensors_shapes(folder) if folder.is_dir() else {}
    if not shapes:
        return None
    return cost_from_shapes(read_json(folder / "config.json"), shapes, score_head=score_head)


def backend_cost(backend: object) -> ModelCost:
    """A policy's or scorer's :class:`ModelCost`: its ``cost`` attribute, else (a backend of
    unknown shape, e.g. a scripted one) its ``num_parameters`` as a dense model."""
    cost = getattr(backend, "cost", None)
    if isinstance(cost, ModelCost):
        return cost
    return ModelCost.dense(int(getattr(backend, "num_parameters", 0) or 0))
