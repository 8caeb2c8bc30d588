"""Step labels for any policy and any dataset with gold answers: Monte Carlo estimation, an LLM
judge, and their consensus, as compared in "The Lessons of Developing Process Reward Models in
Mathematical Reasoning" (Zhang et al., 2025).

* ``mc`` (Math-Shepherd style): the policy samples whole solutions; from every distinct step
  prefix, ``rollouts`` fresh completions are drawn through the engine's own tree and batched
  driver (a prefix shared by several samples is rolled out once; the samples' own continuations
  do not count). A step's soft value is the share of completions after it whose answer the
  grader accepts; the last step's value is its own answer's correctness. The first
  step whose value is at or below ``mc_threshold`` (0: no completion was right) is MC's first
  error.
* ``judge``: a policy backend asked, ``judge_samples`` times, to name the earliest wrong
  paragraph of the numbered solution (:data:`JUDGE_PROMPT`, in the style of ProcessBench's
  critique prompt) inside ``\\boxed{}``, with -1 for "no error". The verdict is the most common
  parsable answer (a tie goes to the earliest error); a sample that names no valid index is
  recorded as unparsable and never guessed; when every sample is unparsable, the solution has
  no judge label.
* ``consensus``: both, keeping a solution only when MC's and the judge's first errors are the
  same position (both -1 included); the share kept is the retention rate.

Labels follow the first error: steps before it are right (``True``), the first wrong step and
every step after it are wrong (``False``); a solution with no wrong step has all steps right.
Every solution is written to ``labels.jsonl`` with its soft values, each method's first error,
the judge's votes and the provenance; the labelled ones also go to ``stepwise.jsonl`` in the
stepwise-supervision layout of TRL's PRM trainer and the Hub's PRM datasets (``prompt``,
``completions``, ``labels``).

Why one module over 500 lines: the three methods share the sampling of solutions, the first-
error rule and the output files, and consensus needs both of the others in one pass.
"""

from __future__ import annotations

import enum
import json
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from prmsearch.answers import extract_boxed
from prmsearch.api import Searcher
from prmsearch.benchmarks.sweeps.results import ResultsFolder, problem_digests, write_atomically
from prmsearch.policies.base import GenerationRequest, Policy, SamplingParams
from prmsearch.scorers.scripted import ScriptedScorer
from prmsearch.search.protocol import (
    BoundStrategy,
    Choice,
    Expand,
    SearchGenerator,
    StrategyConfig,
    StrategySpec,
)
from prmsearch.search.strategies.common import require_int
from prmsearch.seeding import mix_seed, problem_seed
from prmsearch.tree import ROOT, SearchTree

LABELS_FILE = "labels.jsonl"
STEPWISE_FILE = "stepwise.jsonl"
SUMMARY_FILE = "summary.json"


class LabelMethod(str, enum.Enum):
    """How steps are labelled."""

    MC = "mc"
    JUDGE = "judge"
    CONSENSUS = "consensus"


@dataclass(frozen=True)
class RolloutConfig(StrategyConfig):
    """Policy samples per problem and Monte Carlo completions per distinct step prefix."""

    samples: int = 4
    rollouts: int = 4

    def __post_init__(self) -> None:
        require_int("samples", self.samples, 1)
        require_int("rollouts", self.rollouts, 0)

    @property
    def needs_scores(self) -> bool:
        return False  # labelling reads no PRM


def sample_then_roll_out(tree: SearchTree, cfg: RolloutConfig, rng: np.random.Generator) -> SearchGenerator:
    """Sample whole solutions, then roll out ``cfg.rollouts`` solutions from each distinct prefix."""
    (leaves,) = yield Expand(((ROOT, cfg.samples),), full_solution=True)
    if cfg.rollouts:
        prefixes: dict[tuple[str, ...], int] = {}
        for leaf in leaves:
            for node in tree.path(leaf):
                if not tree.terminal[node]:
                    prefixes.setdefault(tree.path_steps(node), node)
        if prefixes:
            yield Expand(tuple((node, cfg.rollouts) for node in prefixes.values()), full_solution=True)
    return Choice(leaves[0], tuple(leaves))


ROLLOUTS = StrategySpec("mc_rollouts", RolloutConfig, sample_then_roll_out, "samples plus MC rollouts")


def chain_end(tree: SearchTree, node: int) -> int:
    """The last node of the chain that starts at ``node`` (a whole solution split into steps)."""
    while tree.children(node) and not tree.terminal[node]:
        node = tree.children(node)[0]
    return node


def sample_nodes(tree: SearchTree, samples: int) -> set[int]:
    """Every node on the chains of the first ``samples`` solutions under the root."""
    nodes: set[int] = set()
    for leaf in tree.children(ROOT)[:samples]:
        node = leaf
        nodes.add(node)
        while tree.children(node) and not tree.terminal[node]:
            node = tree.children(node)[0]
            nodes.add(node)
    return nodes


def mc_values(tree: SearchTree, right: Callable[[str | None], bool], samples: int | None = None
              ) -> dict[tuple[str, ...], float]:
    """For every expanded prefix, the share of its completions whose answer is ``right``.

    With ``samples``, only the rollouts count: the sampled solutions' own continuations are left
    out (as in Math-Shepherd's estimate from fresh completions), since counting a solution's own
    continuation would tie every prefix of a right solution to a value above 0."""
    values: dict[tuple[str, ...], float] = {}
    own = sample_nodes(tree, samples) if samples is not None else set()
    for node in tree.iter_nodes():
        if node == ROOT or tree.terminal[node]:
            continue
        ends = [chain_end(tree, child) for child in tree.children(node) if child not in own]
        ends = [end for end in ends if tree.terminal[end]]
        if ends:
            hits = sum(1 for end in ends if right(tree.answer[end]))
            values.setdefault(tree.path_steps(node), hits / len(ends))
    return values


@dataclass(frozen=True)
class LabelConfig:
    """What ``prmsearch label`` does, validated at construction (recorded in the manifest).

    Attributes:
        method: ``mc``, ``judge`` or ``consensus``.
        samples: policy solutions per problem.
        rollouts: MC completions per distinct step prefix (``mc``, ``consensus``).
        mc_threshold: a step whose MC value is at or below this is wrong (0: no completion right).
        judge_samples: judge verdicts per solution, voted (``judge``, ``consensus``).
        temperature: policy sampling temperature for solutions and completions.
        judge_temperature: the judge's temperature (0 with one judge sample is greedy).
        solution_max_tokens: token limit of one solution or completion.
        judge_max_tokens: token limit of one judge critique.
        delimiter: the step delimiter the solutions are split at.
        seed: run seed; each problem's seed derives from it and the question.
        chunk: problems per batched labelling run (and per write to disk).
    """

    method: LabelMethod = LabelMethod.MC
    samples: int = 4
    rollouts: int = 8
    mc_threshold: float = 0.0
    judge_samples: int = 3
    temperature: float = 0.7
    judge_temperature: float = 0.7
    solution_max_tokens: int = 1024
    judge_max_tokens: int = 1024
    delimiter: str = "\n\n"
    seed: int = 0
    chunk: int = 16

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "method", LabelMethod(self.method))
        except ValueError:
            known = [m.value for m in LabelMethod]
            raise ValueError(f"method must be one of {known}, got {self.method!r}") from None
        require_int("samples", self.samples, 1)
        require_int("rollouts", self.rollouts, 1 if self.uses_mc else 0)
        require_int("judge_samples", self.judge_samples, 1)
        require_int("solution_max_tokens", self.solution_max_tokens, 1)
        require_int("judge_max_tokens", self.judge_max_tokens, 1)
        require_int("chunk", self.chunk, 1)
        if not 0.0 <= self.mc_threshold < 1.0:
            raise ValueError(f"mc_threshold must be in [0, 1), got {self.mc_threshold!r}")
        for name in ("temperature", "judge_temperature"):
            if not 0.0 <= getattr(self, name) <= 5.0:
                raise ValueError(f"{name} must be in [0, 5], got {getattr(self, name)!r}")
        if not isinstance(self.delimiter, str) or not self.delimiter:
            raise ValueError(f"delimiter must be a non-empty string, got {self.delimiter!r}")

    @property
    def uses_mc(self) -> bool:
        return self.method in (LabelMethod.MC, LabelMethod.CONSENSUS)

    @property
    def uses_judge(self) -> bool:
        return self.method in (LabelMethod.JUDGE, LabelMethod.CONSENSUS)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "method": self.method.value}


# ----------------------------------------------------------------------------------- the judge

JUDGE_PROMPT = """\
Below is a math problem and a proposed solution. The solution is split into paragraphs, each \
wrapped in tags that carry its index, counting from 0.

Problem:
{question}

Solution:
{paragraphs}

Check the solution one paragraph at a time. A paragraph is wrong if it makes a calculation error, \
a logical error, or relies on an earlier wrong paragraph. Report the index of the EARLIEST wrong \
paragraph, or -1 if every paragraph is correct. End with your verdict in the form \\boxed{{index}}."""


def judge_prompt(question: str, steps: Sequence[str]) -> str:
    """The critique prompt for one solution (paragraphs tagged ``<paragraph_i>``)."""
    paragraphs = "\n\n".join(f"<paragraph_{i}>\n{step}\n</paragraph_{i}>" for i, step in enumerate(steps))
    return JUDGE_PROMPT.format(question=question, paragraphs=paragraphs)


_INDEX = re.compile(r"^\s*(?:paragraph[_\s]*)?(-?\d+)\s*$", re.IGNORECASE)


def parse_verdict(text: str, steps: int) -> int | None:
    """The paragraph index in the critique's last ``\\boxed{}``: -1 or 0..steps-1, else None
    (no box, not an index, or out of range: unparsable, never guessed)."""
    content = extract_boxed(text or "")
    if content is None:
        return None
    match = _INDEX.match(content.replace("$", ""))
    if match is None:
        return None
    index = int(match.group(1))
    return index if -1 <= index < steps else None


def vote_verdicts(verdicts: Sequence[int | None]) -> int | None:
    """The most common parsable verdict; a tie goes to the earliest error (-1 counts as after
    every step); None when no verdict parsed."""
    counts = Counter(v for v in verdicts if v is not None)
    if not counts:
        return None
    top = max(counts.values())
    tied = [v for v, c in counts.items() if c == top]
    return min(tied, key=lambda v: float("inf") if v == -1 else v)


def run_judge(
    judge: Policy, items: Sequence[tuple[str, tuple[str, ...], int]], cfg: LabelConfig
) -> list[tuple[list[int | None], list[str]]]:
    """Ask ``judge`` about every ``(question, steps, seed)`` in one batched call: per item the
    parsed verdicts and the raw critiques."""
    if not items:
        return []
    sampling = SamplingParams(
        temperature=cfg.judge_temperature if cfg.judge_samples > 1 else 0.0,
        max_new_tokens=cfg.judge_max_tokens,
        delimiter=cfg.delimiter,
    )
    requests = [
        GenerationRequest(judge_prompt(q, steps), (), cfg.judge_samples, sampling, seed, stop_at_step=False)
        for q, steps, seed in items
    ]
    generations = judge.generate(requests)
    if len(generations) != len(requests):
        raise ValueError(f"the judge returned {len(generations)} generations for {len(requests)} requests")
    out = []
    for (_, steps, _), gen in zip(items, generations):
        texts = [s.text for s in gen.samples]
        out.append(([parse_verdict(t, len(steps)) for t in texts], texts))
    return out


# ------------------------------------------------------------------------------- the labelling

def first_error_from_values(values: Sequence[float], threshold: float) -> int:
    """The first step whose MC value is at or below ``threshold``, or -1."""
    return next((i for i, v in enumerate(values) if v <= threshold), -1)


def labels_from_first_error(steps: int, first_error: int) -> list[bool]:
    """Right before the first error, wrong from it on; all right when ``first_error`` is -1."""
    return [first_error == -1 or i < first_error for i in range(steps)]


@dataclass(frozen=True)
class LabelProblem:
    """One problem to label: an id, the question and the gold answer."""

    id: str
    question: str
    gold: str


@dataclass
class SolutionLabels:
    """One sampled solution and everything the labelling found out about it (one JSONL row)."""

    id: str
    problem_id: str
    prompt: str
    completions: list[str]
    gold: str
    answer: str | None
    answer_correct: bool
    method: str
    labels: list[bool] | None = None
    status: str = "labelled"  # labelled | unparsable | disagree | error
    mc_values: list[float] | None = None
    mc_first_error: int | None = None
    judge_first_error: int | None = None
    judge_verdicts: list[int | None] | None = None
    judge_critiques: list[str] | None = None
    error: str | None = None
    provenance: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def stepwise(self) -> dict[str, Any]:
        """The TRL stepwise-supervision row (``prompt``, ``completions``, ``labels``)."""
        return {"prompt": self.prompt, "completions": self.completions, "labels": self.labels}


def _decide(row: SolutionLabels, cfg: LabelConfig) -> None:
    """Set the row's labels and status from the first errors its method found."""
    if cfg.method is LabelMethod.MC:
        first = row.mc_first_error
    elif row.judge_first_error is None:
        row.status = "unparsable"
        return
    elif cfg.method is LabelMethod.JUDGE:
        first = row.judge_first_error
    elif row.judge_first_error != row.mc_first_error:
        row.status = "disagree"
        return
    else:
        first = row.mc_first_error
    assert first is not None
    row.labels = labels_from_first_error(len(row.completions), first)


def label_chunk(
    policy: Policy,
    problems: Sequence[LabelProblem],
    cfg: LabelConfig,
    *,
    right: Callable[[str | None, str], bool],
    judge: Policy | None = None,
    provenance: dict[str, Any] | None = None,
) -> list[list[SolutionLabels]]:
    """Sample, roll out and judge one chunk of problems (one batched search, one judge call):
    the labelled solutions of each problem, in order."""
    if cfg.uses_judge and judge is None:
        raise ValueError(f"method {cfg.method.value!r} needs a judge policy")
    searcher = Searcher(
        policy,
        ScriptedScorer({}, default=0.5, num_parameters=0),  # never called: needs_scores is False
        BoundStrategy(ROLLOUTS, RolloutConfig(cfg.samples, cfg.rollouts if cfg.uses_mc else 0)),
        sampling=SamplingParams(temperature=cfg.temperature, max_new_tokens=cfg.solution_max_tokens,
                                delimiter=cfg.delimiter),
        solution_max_tokens=cfg.solution_max_tokens,
        seed=cfg.seed,
    )
    results = searcher.run([p.question for p in problems])
    per_problem: list[list[SolutionLabels]] = []
    to_judge: list[tuple[SolutionLabels, int]] = []
    for problem, result in zip(problems, results, strict=True):
        rows: list[SolutionLabels] = []
        if result.error:
            rows.append(SolutionLabels(
                f"{problem.id}/error", problem.id, problem.question, [], problem.gold, None, False,
                cfg.method.value, status="error", error=result.error, provenance=dict(provenance or {}),
            ))
            per_problem.append(rows)
            continue
        tree = result.tree
        verdict_cache: dict[str | None, bool] = {}

        def is_right(answer: str | None, gold: str = problem.gold, cache=verdict_cache) -> bool:
            if answer not in cache:
                cache[answer] = answer is not None and right(answer, gold)
            return cache[answer]

        values = mc_values(tree, is_right, cfg.samples) if cfg.uses_mc else {}
        for index, leaf in enumerate(tree.children(ROOT)[: cfg.samples]):
            end = chain_end(tree, leaf)
            steps = tree.path_steps(end)
            answer = tree.answer[end]
            correct = is_right(answer)
            row = SolutionLabels(
                f"{problem.id}/{index}", problem.id, problem.question, list(steps), problem.gold, answer,
                correct, cfg.method.value, provenance=dict(provenance or {}),
            )
            if not steps or not all(s.strip() for s in steps):
                row.status, row.error = "error", "the policy wrote an empty solution or step"
            else:
                if cfg.uses_mc:
                    own = 1.0 if correct else 0.0
                    soft = [values.get(steps[: i + 1], own) for i in range(len(steps) - 1)] + [own]
                    row.mc_values = soft
                    row.mc_first_error = first_error_from_values(soft, cfg.mc_threshold)
                if cfg.uses_judge:
                    to_judge.append((row, mix_seed(problem_seed(cfg.seed, problem.question), index)))
            rows.append(row)
        per_problem.append(rows)
    if to_judge:
        assert judge is not None
        _judge_rows(judge, to_judge, cfg)
    for rows in per_problem:
        for row in rows:
            if row.status != "error":
                _decide(row, cfg)
    return per_problem


def _judge_rows(judge: Policy, to_judge: list[tuple[SolutionLabels, int]], cfg: LabelConfig) -> None:
    """Judge the rows in one batched call; when it fails, one call per row, and a row whose own
    call fails records the error (the rest of the run goes on)."""
    items = [(row.prompt, tuple(row.completions), seed) for row, seed in to_judge]
    try:
        verdicts: list[Any] = run_judge(judge, items, cfg)
    except Exception:
        verdicts = []
        for item in items:
            try:
                verdicts.extend(run_judge(judge, [item], cfg))
            except Exception as exc:  # recorded on the row, never raised
                verdicts.append(exc)
    for (row, _), verdict in zip(to_judge, verdicts, strict=True):
        if isinstance(verdict, Exception):
            row.status, row.error = "error", f"judge failed: {type(verdict).__name__}: {verdict}"
            continue
        votes, texts = verdict
        row.judge_verdicts, row.judge_critiques = votes, texts
        row.judge_first_error = vote_verdicts(votes)


def _key(row: Mapping[str, Any]) -> tuple[str]:
    return (str(row["id"]),)


def labels_folder(out: str | Path) -> ResultsFolder:
    """The results folder of a labelling run (``labels.jsonl``, one row per solution)."""
    return ResultsFolder(Path(out), results_name=LABELS_FILE, key=_key)


#: Builds the labelling backends (policy, judge or None) in the process that uses them: a Ray
#: actor calls it once, so backends never cross a process boundary (pass a picklable callable).
LabelBackends = Callable[[], tuple[Policy, Policy | None]]


class LabelWorker:
    """What one Ray actor of a sharded labelling run does: build the policy and the judge once,
    then label whole chunks of problems, returning their rows as plain JSON objects.

    A plain class (``RayRunner.map`` wraps it with ``ray.remote``), so it is testable without Ray.
    """

    def __init__(self, cfg: LabelConfig, backends: LabelBackends,
                 right: Callable[[str | None, str], bool] | None, provenance: dict[str, Any] | None) -> None:
        self.cfg, self.provenance = cfg, provenance
        self.policy, self.judge = backends()
        self.right = right if right is not None else _default_grader()

    def run(self, problems: Sequence[LabelProblem]) -> list[dict[str, Any]]:
        """The rows of one chunk, problem by problem."""
        per_problem = label_chunk(self.policy, problems, self.cfg, right=self.right, judge=self.judge,
                                  provenance=self.provenance)  # fmt: skip
        return [row.to_dict() for rows in per_problem for row in rows]

    def ready(self) -> bool:
        """True once the backends are loaded (the driver waits on it to report load errors)."""
        return True


def _default_grader() -> Callable[[str | None, str], bool]:
    from prmsearch.benchmarks.grading import is_equivalent

    return is_equivalent


def run_labelling(
    cfg: LabelConfig,
    problems: Sequence[LabelProblem],
    out: str | Path,
    *,
    policy: Policy | None = None,
    judge: Policy | None = None,
    backends: LabelBackends | None = None,
    runner: Any = None,
    right: Callable[[str | None, str], bool] | None = None,
    resume: bool = False,
    retry_errors: bool = False,
    provenance: dict[str, Any] | None = None,
    progress: Callable[[int, int], None] | None = None,
    set_aside_damaged: bool = False,
) -> dict[str, Any]:
    """Label every problem, appending each chunk's rows as it finishes, then write
    ``stepwise.jsonl`` and ``summary.json``; returns the summary.

    The backends are ``policy`` and ``judge``, or ``backends()`` called only when something is
    left to label. With a ``runner`` (a :class:`~prmsearch.benchmarks.sweeps.distributed.RayRunner`)
    the chunks are labelled by Ray actors that each call ``backends()`` once; this process stays
    the only writer. A killed run resumes where it stopped with ``resume=True`` (problems with
    rows are not labelled again); ``retry_errors`` also labels again every problem that has a
    row in error (a judge that failed, a policy that timed out), replacing its rows;
    ``set_aside_damaged`` moves damaged lines of ``labels.jsonl`` to its side file (their problems
    are labelled again). The folder is locked against other processes while this runs."""
    if right is None:
        right = _default_grader()
    if runner is not None and backends is None:
        raise ValueError("a runner needs backends: a picklable callable that builds (policy, judge) "
                         "in each actor")
    if runner is None and policy is None and backends is None:
        raise ValueError("run_labelling needs a policy (or a backends callable that builds one)")
    if retry_errors and not resume:
        raise ValueError("retry_errors re-labels the errored problems of an existing run: "
                         "it needs resume=True")
    ids = [p.id for p in problems]
    if len(set(ids)) != len(ids):
        dupes = sorted(i for i, c in Counter(ids).items() if c > 1)[:5]
        raise ValueError(f"problem ids must be unique; repeated: {dupes}")
    folder = labels_folder(out)
    digests = problem_digests((p.id, p.question, p.gold) for p in problems)
    folder.open({"label": cfg.to_dict(), "provenance": provenance or {}}, resume=resume,
                set_aside_damaged=set_aside_damaged, problems=digests)
    try:
        return _label_into(folder, cfg, problems, policy, judge, backends, right, runner, retry_errors,
                           provenance, progress)
    finally:
        folder.close()


def _label_into(folder: ResultsFolder, cfg: LabelConfig, problems: Sequence[LabelProblem], policy, judge,
                backends, right, runner, retry_errors: bool, provenance, progress) -> dict[str, Any]:
    """Label what the open ``folder`` lacks, then write the outputs (``run_labelling``'s body)."""
    if retry_errors:
        errored = {row["problem_id"] for row in folder.rows() if row.get("status") == "error"}
        folder.drop(lambda row: row["problem_id"] in errored)
    done = {row["problem_id"] for row in folder.rows()}
    todo = [p for p in problems if p.id not in done]
    finished = len(problems) - len(todo)
    chunks = [todo[start : start + cfg.chunk] for start in range(0, len(todo), cfg.chunk)]

    def write(rows: Sequence[dict[str, Any]]) -> None:
        nonlocal finished
        for row in rows:
            folder.append(row)
        finished += len({row["problem_id"] for row in rows})
        if progress is not None:
            progress(finished, len(problems))

    if chunks and runner is not None:
        runner.map(LabelWorker, (cfg, backends, right, provenance), [(chunk,) for chunk in chunks], write)
    elif chunks:
        if policy is None:
            assert backends is not None
            policy, judge = backends()
        for chunk in chunks:
            per_problem = label_chunk(policy, chunk, cfg, right=right, judge=judge, provenance=provenance)
            write([row.to_dict() for rows in per_problem for row in rows])
    return write_outputs(folder, cfg, {p.id for p in problems})


def write_outputs(folder: ResultsFolder, cfg: LabelConfig, problem_ids: set[str]) -> dict[str, Any]:
    """``stepwise.jsonl`` (labelled solutions only, TRL layout) and ``summary.json`` from the rows,
    each written whole (a temporary file renamed over the old one)."""
    rows = [row for row in folder.rows() if row["problem_id"] in problem_ids]
    labelled = [row for row in rows if row["status"] == "labelled"]
    write_atomically(folder.path / STEPWISE_FILE, "".join(
        json.dumps({k: row[k] for k in ("prompt", "completions", "labels")}) + "\n" for row in labelled))
    summary = summarize_labels(rows, cfg)
    write_atomically(folder.path / SUMMARY_FILE, json.dumps(summary, indent=2) + "\n")
    return summary


def summarize_labels(rows: Sequence[dict[str, Any]], cfg: LabelConfig) -> dict[str, Any]:
    """Counts by status, retention (labelled / solutions that got a verdict from every method the
    label needs), the share of labelled solutions with a wrong step, and agreement figures."""
    statuses = Counter(row["status"] for row in rows)
    solutions = sum(c for s, c in statuses.items() if s != "error")
    labelled = [row for row in rows if row["status"] == "labelled"]
    steps = sum(len(row["labels"]) for row in labelled)
    summary: dict[str, Any] = {
        "method": cfg.method.value,
        "problems": len({row["problem_id"] for row in rows}),
        "solutions": solutions,
        "statuses": dict(sorted(statuses.items())),
        "labelled": len(labelled),
        "retention": len(labelled) / solutions if solutions else None,
        "steps": steps,
        "negative_steps": sum(1 for row in labelled for label in row["labels"] if not label),
        "with_error": sum(1 for row in labelled if not all(row["labels"])),
        "answer_correct": sum(1 for row in rows if row["status"] != "error" and row["answer_correct"]),
    }
    if cfg.method is LabelMethod.CONSENSUS:
        judged = [row for row in rows if row["judge_first_error"] is not None]
        agree = sum(1 for row in judged if row["judge_first_error"] == row["mc_first_error"])
        summary["mc_judge_agreement"] = agree / len(judged) if judged else None
    return summary
