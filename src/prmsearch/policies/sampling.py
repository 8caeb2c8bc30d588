"""Batch-independent token sampling: counter-based random numbers and inverse-CDF selection.

Every row of a decode batch is one sample of one request. Its random number at decode step
``t`` is a pure function of ``(seed, sample index, t)`` (SplitMix64 hashing), so a sample never
depends on which other rows share its batch: batched and one-at-a-time runs agree. The row
then picks its token by inverse-CDF over the temperature- and top-p-adjusted distribution.
"""

from __future__ import annotations

import numpy as np
import torch

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_MASK63 = (1 << 63) - 1


def splitmix64(x: np.ndarray) -> np.ndarray:
    """The SplitMix64 finaliser applied elementwise to a uint64 array (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = x.astype(np.uint64) + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


def row_keys(seeds: np.ndarray, sample_indices: np.ndarray) -> np.ndarray:
    """One uint64 stream key per row from its request seed and sample index."""
    seeds = np.asarray(seeds, dtype=np.uint64)
    idx = np.asarray(sample_indices, dtype=np.uint64)
    return splitmix64(splitmix64(seeds) ^ splitmix64(idx + np.uint64(0x5851F42D4C957F2D)))


def uniforms(keys: np.ndarray, step: int) -> np.ndarray:
    """Uniform floats in [0, 1) for every row at decode step ``step`` (53-bit resolution)."""
    with np.errstate(over="ignore"):
        bits = splitmix64(keys + np.uint64(step) * _GOLDEN)
    return (bits >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def normalise_seed(seed: int) -> int:
    """Map any Python int seed onto a non-negative 63-bit value."""
    return int(seed) & _MASK63


def choose_tokens(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_p: torch.Tensor,
    u: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick one token per row and return ``(tokens, raw_logprobs)``.

    Args:
        logits: ``[rows, vocab]`` next-token logits (any float dtype; upcast to fp32).
        temperature: ``[rows]``; 0 means greedy (argmax).
        top_p: ``[rows]`` nucleus mass in (0, 1].
        u: ``[rows]`` uniforms in [0, 1) from :func:`uniforms`.

    The returned log-probability is the model's own (temperature 1, no top-p) log-probability
    of the chosen token, which is what search methods and the ledger need.
    """
    logits = logits.float()
    logprobs = torch.log_softmax(logits, dim=-1)
    greedy = temperature <= 0
    tokens = logits.argmax(dim=-1)
    if not bool(greedy.all()):
        temp = torch.where(greedy, torch.ones_like(temperature), temperature).float()
        probs = torch.softmax(logits / temp[:, None], dim=-1)
        sorted_p, order = torch.sort(probs, dim=-1, descending=True, stable=True)
        before = torch.cumsum(sorted_p, dim=-1) - sorted_p
        keep = before < top_p.float()[:, None]
        keep[:, 0] = True
        kept = sorted_p * keep
        cdf = torch.cumsum(kept, dim=-1)
        target = (u.to(cdf.dtype) * cdf[:, -1])[:, None]
        pos = torch.searchsorted(cdf, target, right=True).squeeze(1)
        last_kept = keep.sum(dim=-1) - 1
        pos = torch.minimum(pos, last_kept)
        sampled = order.gather(1, pos[:, None]).squeeze(1)
        tokens = torch.where(greedy, tokens, sampled)
    chosen = logprobs.gather(1, tokens[:, None]).squeeze(1)
    return tokens, chosen
