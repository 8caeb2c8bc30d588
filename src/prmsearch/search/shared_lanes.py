"""A lane whose calls are bounded and shared: big rounds go in pieces, problems take turns.

A plain batching lane sends everything waiting in one call, so a small problem that arrives
behind a huge one (a server's beam-16 behind a best-of-20000) waits for the huge round's whole
call, round after round. A `SharedLane` cuts each waiting round into chunks of at most
``chunk`` samples (generation) or paths (scoring), and fills each call with at most ``size`` of
them, one chunk per problem in turn: a small problem's round rides in the next call, and a
cancelled problem's chunks that were not sent yet are never computed. Chunks are cut at fixed
places (never where other problems happen to be), so a problem's samples do not depend on
what else is running.
"""

from __future__ import annotations

import queue
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from prmsearch.policies.base import Generation, GenerationRequest
from prmsearch.search.events import Event
from prmsearch.search.lanes import Lane
from prmsearch.seeding import mix_seed

if TYPE_CHECKING:
    from prmsearch.search.job import Job


def generation_pieces(requests: list[GenerationRequest], chunk: int) -> list[tuple[int, GenerationRequest]]:
    """Each request as pieces of at most ``chunk`` samples, with the index of the request it
    came from; a request that fits stays as it is (same seed), a larger one's later pieces get
    seeds derived from its own."""
    pieces: list[tuple[int, GenerationRequest]] = []
    for index, request in enumerate(requests):
        if request.n <= chunk:
            pieces.append((index, request))
            continue
        for part, start in enumerate(range(0, request.n, chunk)):
            seed = request.seed if part == 0 or request.seed is None else mix_seed(request.seed, part, 0)
            pieces.append((index, replace(request, n=min(chunk, request.n - start), seed=seed)))
    return pieces


def merge_generations(parts: list[Generation]) -> Generation:
    """One request's generation from the generations of its pieces (samples in piece order,
    each piece's prompt cost charged)."""
    if len(parts) == 1:
        return parts[0]
    counted = [p.generated_tokens for p in parts]
    generated = None
    if any(c is not None for c in counted):
        generated = sum(c if c is not None else sum(len(s.token_ids) for s in p.samples)
                        for c, p in zip(counted, parts))
    return Generation(
        samples=tuple(s for p in parts for s in p.samples),
        prompt_tokens_computed=sum(p.prompt_tokens_computed for p in parts),
        prompt_tokens_cached=sum(p.prompt_tokens_cached for p in parts),
        generated_tokens=generated,
        prompt_tokens_recomputed=sum(p.prompt_tokens_recomputed for p in parts),
    )


class Split:
    """One lane entry ``(job, what, requests)`` in chunks, and the chunks' results as they return.

    ``owners[k]`` holds, for each request of chunk ``k``, the index of the entry's request it
    belongs to (one piece each for scoring; several for a generation request cut in pieces).
    """

    __slots__ = ("chunks", "entry", "failed", "in_flight", "owners", "results", "waiting", "weights")

    def __init__(
        self,
        entry: tuple[Job, Any, list[Any]],
        pieces: list[tuple[int, Any]],
        chunk: int,
        units: Callable[[Any], int],
    ) -> None:
        self.entry = entry
        self.chunks: list[list[Any]] = []
        self.owners: list[list[int]] = []
        self.weights: list[int] = []  # each chunk's samples or paths
        for owner, piece in pieces:
            weight = units(piece)
            if not self.weights or self.weights[-1] + weight > chunk:
                self.chunks.append([])
                self.owners.append([])
                self.weights.append(0)
            self.chunks[-1].append(piece)
            self.owners[-1].append(owner)
            self.weights[-1] += weight
        self.results: list[list[Any] | None] = [None] * len(self.chunks)
        self.waiting: deque[int] = deque(range(len(self.chunks)))
        self.in_flight = 0
        self.failed = False

    @property
    def job(self) -> Job:
        return self.entry[0]

    @property
    def done(self) -> bool:
        return not self.waiting and not self.in_flight

    def assemble(self, merge: Callable[[list[Any]], Any] | None) -> list[Any]:
        """The entry's results in its requests' order (pieces of one request merged)."""
        grouped: dict[int, list[Any]] = {}
        for owners, results in zip(self.owners, self.results):
            for owner, result in zip(owners, results or ()):
                grouped.setdefault(owner, []).append(result)
        return [merge(grouped[i]) if merge is not None else grouped[i][0] for i in range(len(grouped))]


class SharedLane(Lane):
    """A `Lane` whose calls hold at most ``size`` samples or paths, shared by the waiting problems
    in turns, each problem's round cut in chunks of at most ``chunk`` (see the module's doc).

    Args:
        pieces: an entry's requests and the chunk size as ``(request index, piece)`` pairs
            (`generation_pieces`, or one piece per request).
        units: a piece's weight (its samples, or 1 per path).
        merge: joins one request's piece results (`merge_generations`; None: one piece each).
    """

    def __init__(self, kind: str, call: Callable[[list[Any]], Any],
                 events: queue.SimpleQueue[Event], pool: Executor, parallel: bool, size: int,
                 pieces: Callable[[list[Any], int], list[tuple[int, Any]]],
                 units: Callable[[Any], int], merge: Callable[[list[Any]], Any] | None = None) -> None:
        super().__init__(kind, call, events, pool, parallel)
        if size < 1:
            raise ValueError(f"a shared lane's call size must be >= 1, got {size!r}")
        self.size = size
        self.chunk = max(1, size // 4)
        self.pieces, self.units, self.merge = pieces, units, merge
        self.waiting: list[Split] = []  # problems with chunks not sent yet, least recently served first

    def put(self, item: Any) -> None:
        self.waiting.append(Split(item, self.pieces(item[2], self.chunk), self.chunk, self.units))

    def drop(self, dropped: Callable[[Any], bool]) -> None:
        """Leave out the chunks not sent yet of problems whose callers stopped waiting; a problem
        with chunks in flight ends when they return (``dropped`` finishes the others now)."""
        kept = []
        for split in self.waiting:
            if not split.job.cancelled:
                kept.append(split)
            elif split.in_flight:
                split.waiting.clear()
                split.job.fail("cancelled: the caller stopped waiting", "cancelled")
            else:
                dropped(split.job)
        self.waiting = kept

    def pump(self) -> int:
        if not self.waiting or (self.in_flight and not self.parallel):
            return 0
        return self._start(self._parallel_calls() if self.parallel else [self._shared_call()])

    def _item(self, split: Split, chunk_ids: list[int]) -> tuple[Job, tuple[Split, list[int]], list[Any]]:
        split.in_flight += len(chunk_ids)
        requests = [r for k in chunk_ids for r in split.chunks[k]]
        return (split.job, (split, chunk_ids), requests)

    def _parallel_calls(self) -> list[list[Any]]:
        """Every waiting chunk as its own call, at once (a server batches them itself)."""
        calls = []
        for split in self.waiting:
            while split.waiting:
                calls.append([self._item(split, [split.waiting.popleft()])])
        self.waiting = []
        return calls

    def _shared_call(self) -> list[Any]:
        """One call of at most ``size`` units: one chunk per waiting problem in turn (at least one
        chunk); the problems served go to the back of the queue."""
        taken: dict[int, list[int]] = {}
        room = self.size
        while room > 0:
            took = False
            for position, split in enumerate(self.waiting):
                if not split.waiting:
                    continue
                weight = split.weights[split.waiting[0]]
                if weight > room and taken:
                    continue  # it does not fit beside what the call holds
                taken.setdefault(position, []).append(split.waiting.popleft())
                room -= weight
                took = True
                if room <= 0:
                    break
            if not took:
                break
        served = [self.waiting[p] for p in sorted(taken)]
        items = [self._item(self.waiting[p], ids) for p, ids in sorted(taken.items())]
        rest = [s for i, s in enumerate(self.waiting) if i not in taken]
        self.waiting = rest + [s for s in served if s.waiting]
        return items

    def finished(
        self, items: list[Any], results: dict[int, list[Any]]
    ) -> tuple[list[Any], dict[int, list[Any]]]:
        """Count the call and file its chunks' results; the entries whose every chunk is back (or
        that failed, with nothing more in flight) and their assembled results, keyed by job."""
        super().finished(items, results)
        entries, assembled = [], {}
        for job, (split, chunk_ids), _ in items:
            split.in_flight -= len(chunk_ids)
            got = results.get(id(job))
            if got is None or job.error is not None:
                split.failed = True
                split.waiting.clear()
                if split in self.waiting:
                    self.waiting.remove(split)
            else:
                offset = 0
                for k in chunk_ids:
                    count = len(split.chunks[k])
                    split.results[k] = got[offset : offset + count]
                    offset += count
            if split.done:
                entries.append(split.entry)
                if not split.failed:
                    assembled[id(job)] = split.assemble(self.merge)
        return entries, assembled
