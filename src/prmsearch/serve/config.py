"""The search server's settings, validated once when the server starts."""

from __future__ import annotations

from dataclasses import dataclass

#: Where the bearer key is read from by default (never logged, never echoed).
API_KEY_ENV = "PRMSEARCH_API_KEY"


@dataclass(frozen=True)
class ServeConfig:
    """How ``prmsearch serve`` listens and what it accepts.

    Attributes:
        host, port: where it listens (loopback by default: expose it on purpose).
        budgets: the budgets listed as model ids (``beam-4``, ``beam-16``, ...); any budget can
            still be asked for in a request body (``"budget": 32``).
        policy_id: the model id of plain decoding (greedy, no search), e.g. the policy's name.
        api_key_env: the environment variable holding the bearer key; unset or empty = no key.
        max_prompt_chars: a question longer than this is refused before any search (400).
        max_prompt_tokens: a question whose prompt (the policy's prompt format applied) has more
            tokens than this is refused before any search (400), since every step of every path
            reads the whole prompt again; counted with the policy's tokenizer where it has one
            (transformers, vLLM, SGLang), else only ``max_prompt_chars`` applies.
        max_choices: the most choices (``n``) one request may ask for.
        max_questions: the most prompts one ``/v1/completions`` request may carry.
        progress_every_s: seconds between progress comments in a streamed response.
        max_budget: the largest budget (generations) one request may ask for; larger is refused
            with 400 naming the cap, since every path of a search is held in memory.
        max_in_flight: the most search requests answered at once (their questions share the
            backends' calls); more wait in arrival order for a place.
        max_queued: the most requests waiting for a place; one more gets 429 with
            ``Retry-After``, so a burst from one client cannot pile up work without end.
        request_timeout_s: a request's deadline in seconds (None: none); past it the client gets
            504 and the request's remaining work is dropped.
        drain_timeout_s: on SIGTERM, seconds that requests in flight get to finish before their
            connections are closed and the server exits.
    """

    host: str = "127.0.0.1"
    port: int = 8000
    budgets: tuple[int, ...] = (4, 16, 64)
    policy_id: str = "policy"
    api_key_env: str = API_KEY_ENV
    max_prompt_chars: int = 32_000
    max_prompt_tokens: int = 4096
    max_choices: int = 64
    max_questions: int = 64
    progress_every_s: float = 1.0
    max_budget: int = 256
    max_in_flight: int = 64
    max_queued: int = 256
    request_timeout_s: float | None = 600.0
    drain_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if not isinstance(self.port, int) or not 0 <= self.port <= 65535:
            raise ValueError(f"port must be an int in 0..65535, got {self.port!r}")
        if not self.budgets or any(not isinstance(b, int) or b < 1 for b in self.budgets):
            raise ValueError(f"budgets must be one or more ints >= 1, got {self.budgets!r}")
        if not isinstance(self.policy_id, str) or not self.policy_id.strip():
            raise ValueError(f"policy_id must be a non-empty model id, got {self.policy_id!r}")
        caps = ("max_prompt_chars", "max_prompt_tokens", "max_choices", "max_questions", "max_budget",
                "max_in_flight")
        for name in caps:
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if not isinstance(self.max_queued, int) or self.max_queued < 0:
            raise ValueError(f"max_queued must be an int >= 0, got {self.max_queued!r}")
        if isinstance(self.max_budget, int) and max(self.budgets) > self.max_budget:
            raise ValueError(f"budgets {self.budgets} go above max_budget {self.max_budget}; raise "
                             "max_budget")
        if self.request_timeout_s is not None and not self.request_timeout_s > 0:
            raise ValueError(f"request_timeout_s must be > 0 or None, got {self.request_timeout_s!r}")
        if not self.drain_timeout_s >= 0:
            raise ValueError(f"drain_timeout_s must be >= 0, got {self.drain_timeout_s!r}")
        if not self.progress_every_s > 0:
            raise ValueError(f"progress_every_s must be > 0, got {self.progress_every_s!r}")
