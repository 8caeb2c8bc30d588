"""Other ways people phrase the arithmetic problems: "Double it.", "Take away 5.", "What do you get?".

The canonical question ("Start with 12. Add 5. Multiply by 3. What is the result?") is one phrasing
among many. A *sentence form* is a connective ("", "Then ", "Now ", ...), an operation template
("Increase {it} by {k}", "Double {it}", ...) and a pronoun for ``{it}``. The forms are split once,
by a hash of their text, into the training bank (the policy learns from these) and the held-out
bank (new combinations of the same words that the policy never saw, plus starts and closing
questions of their own), so that a test on the held-out bank measures whether the policy learned
to read phrasings rather than memorised them.

`parse_phrased` reads every phrasing of both banks, the canonical one, more forms users type that
no bank holds (``READ_*``: "Cut it in half", "Take 3 away", "What's the result?"), and loose
variants (any letter case, commas or "and then" between clauses), so the exact checker, the
oracle, the domain note and the PRM's canonical view understand all of them (the domain note
still flags a form outside the banks: the policy never trained on it). Rendering is deterministic
per problem id and bank.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass, replace
from functools import cache

from prmsearch.arith.problems import ArithProblem, Op, format_question, load_split

__all__ = [
    "BANKS",
    "HELDOUT_BANK",
    "TRAIN_BANK",
    "ParsedQuestion",
    "PhraseBank",
    "SentenceForm",
    "parse_phrased",
    "phrase_question",
    "phrased_problem",
    "phrased_split",
]

#: words that may open an operation's sentence (the empty one included)
CONNECTIVES: tuple[str, ...] = ("", "Then ", "Now ", "Next, ", "After that, ")
#: what ``{it}`` stands for in a template
PRONOUNS: tuple[str, ...] = ("it", "that", "the result")


@dataclass(frozen=True)
class OpTemplate:
    """How one operation can be said: ``template`` with ``{k}`` (the operand) and/or ``{it}``.

    ``operand`` is set for templates that name it implicitly ("Double {it}" means ``* 2``).
    """

    symbol: str
    template: str
    operand: int | None = None

    def fits(self, op: Op) -> bool:
        return op.symbol == self.symbol and (self.operand is None or self.operand == op.operand)


OP_TEMPLATES: tuple[OpTemplate, ...] = (
    OpTemplate("+", "Add {k}"),
    OpTemplate("+", "Plus {k}"),
    OpTemplate("+", "Add {k} to {it}"),
    OpTemplate("+", "Increase {it} by {k}"),
    OpTemplate("-", "Subtract {k}"),
    OpTemplate("-", "Minus {k}"),
    OpTemplate("-", "Take away {k}"),
    OpTemplate("-", "Subtract {k} from {it}"),
    OpTemplate("-", "Decrease {it} by {k}"),
    OpTemplate("*", "Multiply by {k}"),
    OpTemplate("*", "Times {k}"),
    OpTemplate("*", "Multiply {it} by {k}"),
    OpTemplate("*", "Double {it}", 2),
    OpTemplate("*", "Triple {it}", 3),
    OpTemplate("/", "Divide by {k}"),
    OpTemplate("/", "Divide {it} by {k}"),
    OpTemplate("/", "Halve {it}", 2),
)
#: the templates of the canonical question (always in the training bank, without a connective)
CANONICAL_TEMPLATES = frozenset({"Add {k}", "Subtract {k}", "Multiply by {k}", "Divide by {k}"})
#: sentences users are known to type (the PRM-kit issue's examples): always in the training bank
ALWAYS_TRAINED = frozenset({"|Take away {k}|", "|Double {it}|it", "Then |Divide {it} by {k}|that"})


@dataclass(frozen=True)
class SentenceForm:
    """One way to say an operation: a connective, a template and the pronoun for ``{it}``."""

    connective: str
    op: OpTemplate
    pronoun: str

    def render(self, operand: int) -> str:
        body = self.op.template.format(k=operand, it=self.pronoun)
        if self.connective:
            body = body[0].lower() + body[1:]
        return f"{self.connective}{body}."

    @property
    def key(self) -> str:
        return f"{self.connective}|{self.op.template}|{self.pronoun}"


@dataclass(frozen=True)
class PhraseBank:
    """The starts, operation sentences and closing questions that one bank draws from."""

    name: str
    starts: tuple[str, ...]
    sentences: tuple[SentenceForm, ...]
    ends: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.starts or not self.sentences or not self.ends:
            raise ValueError(f"bank {self.name!r} needs starts, sentences and ends")
        for symbol in "+-*/":
            if not any(s.op.symbol == symbol and s.op.operand is None for s in self.sentences):
                raise ValueError(f"bank {self.name!r} has no general form for {symbol!r}")

    def forms_for(self, op: Op) -> dict[str, list[SentenceForm]]:
        """The bank's forms that can say ``op``, grouped by template."""
        groups: dict[str, list[SentenceForm]] = {}
        for form in self.sentences:
            if form.op.fits(op):
                groups.setdefault(form.op.template, []).append(form)
        return groups


def _all_forms() -> list[SentenceForm]:
    forms = []
    for op in OP_TEMPLATES:
        pronouns = PRONOUNS if "{it}" in op.template else ("",)
        forms += [SentenceForm(c, op, p) for c in CONNECTIVES for p in pronouns]
    return forms


def _held_out(form: SentenceForm) -> bool:
    """A fixed quarter of the forms, by hash; canonical and known user sentences always train."""
    if (form.connective == "" and form.op.template in CANONICAL_TEMPLATES) or form.key in ALWAYS_TRAINED:
        return False
    digest = hashlib.sha256(f"prmsearch.arith.phrasing/{form.key}".encode()).digest()
    return digest[0] % 4 == 0


TRAIN_BANK = PhraseBank(
    name="train",
    starts=("Start with {n}.", "Begin with {n}.", "You have {n}.", "Take {n}.", "Start with the number {n}."),
    sentences=tuple(f for f in _all_forms() if not _held_out(f)),
    ends=("What is the result?", "What do you get?", "What is the answer?", "What is the result now?"),
)
HELDOUT_BANK = PhraseBank(
    name="heldout",
    starts=("Begin with the number {n}.", "Take the number {n}."),
    sentences=tuple(f for f in _all_forms() if _held_out(f)),
    ends=("What do you get now?", "What is the answer now?"),
)
BANKS: dict[str, PhraseBank] = {b.name: b for b in (TRAIN_BANK, HELDOUT_BANK)}


def phrase_question(start: int, ops: tuple[Op, ...], bank: PhraseBank, rng: random.Random) -> str:
    """A question for ``start`` and ``ops`` in the bank's phrasings.

    Each operation draws a template uniformly among those that can say it (so ``* 2`` is often
    "Double it"), then a connective and pronoun among the bank's forms of that template.
    """
    parts = [rng.choice(bank.starts).format(n=start)]
    for op in ops:
        groups = bank.forms_for(op)
        template = rng.choice(sorted(groups))
        parts.append(rng.choice(groups[template]).render(op.operand))
    parts.append(rng.choice(bank.ends))
    return " ".join(parts)


def phrased_problem(problem: ArithProblem, bank: PhraseBank, salt: str = "") -> ArithProblem:
    """``problem`` with its question rephrased from ``bank`` (deterministic per id, bank, salt)."""
    seed = hashlib.sha256(f"{problem.id}/{bank.name}/{salt}".encode()).digest()[:8]
    rng = random.Random(int.from_bytes(seed, "little"))
    return replace(problem, question=phrase_question(problem.start, problem.ops, bank, rng))


def phrased_split(split: str, bank: str | PhraseBank = "heldout", n: int | None = None) -> list[ArithProblem]:
    """The problems of ``split`` with their questions in ``bank``'s phrasings (same ids, answers)."""
    chosen = _bank(bank)
    return [phrased_problem(p, chosen) for p in load_split(split, n)]


def _bank(bank: str | PhraseBank) -> PhraseBank:
    if isinstance(bank, PhraseBank):
        return bank
    if bank not in BANKS:
        raise ValueError(f"phrase bank must be one of {sorted(BANKS)}, got {bank!r}")
    return BANKS[bank]


# ---- parsing ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ParsedQuestion:
    """The start value and operations read from a question in any known phrasing."""

    start: int
    ops: tuple[Op, ...]

    @property
    def canonical(self) -> str:
        return format_question(self.start, self.ops)


_NUMBER = r"(\d+)"


#: Forms the parser also reads (users type them; the policy never trained on them): pronouns,
#: starts, operations and closing questions beyond the two banks.
READ_PRONOUNS = (*PRONOUNS, "this", "that number", "this number", "the number", "the total")
READ_STARTS = ("Start at {n}", "Begin at {n}", "Think of {n}", "Think of the number {n}",
               "Let the number be {n}", "The number is {n}", "Take the number {n}")
READ_OPS = (
    OpTemplate("+", "Add on {k}"),
    OpTemplate("+", "Increase by {k}"),
    OpTemplate("+", "Raise {it} by {k}"),
    OpTemplate("-", "Take {k} away"),
    OpTemplate("-", "Take off {k}"),
    OpTemplate("-", "Take away {k} from {it}"),
    OpTemplate("-", "Decrease by {k}"),
    OpTemplate("-", "Reduce {it} by {k}"),
    OpTemplate("-", "Less {k}"),
    OpTemplate("*", "Times by {k}"),
    OpTemplate("*", "Twice {it}", 2),
    OpTemplate("*", "Quadruple {it}", 4),
    OpTemplate("/", "Cut {it} in half", 2),
    OpTemplate("/", "Split {it} into {k} equal parts"),
    OpTemplate("/", "Divide {it} into {k} equal parts"),
)
READ_ENDS = (
    "What's the result",
    "What's the answer",
    "What is the final result",
    "What is the final answer",
    "What do you end up with",
    "What do you have now",
    "What number do you get",
    "What is left",
    "What number is it now",
    "What is it now",
)


def _pattern(template: str, pronouns: tuple[str, ...]) -> str:
    """A case-insensitive regex body for a template: ``{k}``/``{n}`` capture, ``{it}`` any of
    ``pronouns``."""
    pronoun = "(?:" + "|".join(re.escape(p) for p in sorted(pronouns, key=len, reverse=True)) + ")"
    text = re.escape(template).replace(r"\{k\}", _NUMBER).replace(r"\{n\}", _NUMBER)
    return text.replace(r"\{it\}", pronoun).replace(r"\ ", r"\s+")


@cache
def _grammar(
    read_extra: bool,
) -> tuple[list[re.Pattern], list[tuple[re.Pattern, OpTemplate]], list[re.Pattern]]:
    starts = {s.rstrip(".") for b in BANKS.values() for s in b.starts}
    ends = {e.rstrip("?") for b in BANKS.values() for e in b.ends}
    ops = OP_TEMPLATES
    pronouns = READ_PRONOUNS if read_extra else PRONOUNS
    if read_extra:
        starts |= set(READ_STARTS)
        ends |= set(READ_ENDS)
        ops = (*OP_TEMPLATES, *READ_OPS)
    start_res = [re.compile(_pattern(s, pronouns), re.I) for s in sorted(starts)]
    op_res = [(re.compile(_pattern(t.template, pronouns), re.I), t) for t in ops]
    end_res = [re.compile(_pattern(e, pronouns), re.I) for e in sorted(ends)]
    return start_res, op_res, end_res


_CLAUSE_SPLIT = re.compile(r"\s*(?:[.;!]|,|\band\b)\s*", re.I)
_LEADING_CONNECTIVE = re.compile(r"^(?:(?:then|now|next|after\s+that|and)\s+)+", re.I)
_BARE_CONNECTIVE = re.compile(r"^(?:then|now|next|after\s+that)$", re.I)


def parse_phrased(question: str, *, read_extra: bool = True) -> ParsedQuestion | None:
    """The start and operations of a question in any known phrasing; None when it is not one.

    Clauses may be separated by ``.``, ``;``, ``!``, commas or "and (then)"; letter case and
    spaces are free; the question must end with a known closing question (its ``?`` may be
    missing). With ``read_extra=False`` only the two banks' forms count (what the policy was
    evaluated on).
    """
    text = " ".join(question.split())
    text = text.rstrip("?").rstrip()  # a closing question typed without its "?" still counts
    clauses = [c for c in _CLAUSE_SPLIT.split(text) if c and not _BARE_CONNECTIVE.match(c)]
    if len(clauses) < 3:
        return None
    start_res, op_res, end_res = _grammar(read_extra)
    end = _LEADING_CONNECTIVE.sub("", clauses[-1])
    if not any(r.fullmatch(end) for r in end_res):
        return None
    start = next((m for r in start_res if (m := r.fullmatch(clauses[0]))), None)
    if start is None:
        return None
    ops = []
    for clause in clauses[1:-1]:
        body = _LEADING_CONNECTIVE.sub("", clause)
        op = _parse_op(body, op_res)
        if op is None:
            return None
        ops.append(op)
    return ParsedQuestion(int(start.group(1)), tuple(ops))


def _parse_op(clause: str, op_res: list[tuple[re.Pattern, OpTemplate]]) -> Op | None:
    for regex, template in op_res:
        match = regex.fullmatch(clause)
        if match is None:
            continue
        operand = template.operand if template.operand is not None else int(match.group(1))
        return Op(template.symbol, operand)
    return None
