"""A test plugin for the server tests: the embedded policy, failing on purpose for some questions.

``flaky-arith`` is the real embedded arithmetic policy; a batch holding a question that contains
``BREAK`` raises, as a backend that fails would. Loaded with ``prmsearch --plugin``.
"""

from __future__ import annotations

from collections.abc import Sequence

from prmsearch.policies.base import make_policy, register_policy

FAIL_WORD = "BREAK"


class FlakyPolicy:
    """The embedded policy, except that a request whose question holds ``BREAK`` fails its call."""

    def __init__(self) -> None:
        self.inner = make_policy("arith")

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    @property
    def num_parameters(self) -> int:
        return self.inner.num_parameters

    def generate(self, requests: Sequence) -> list:
        for request in requests:
            if FAIL_WORD in request.question:
                raise RuntimeError(f"backend failure on purpose ({FAIL_WORD} in the question)")
        return self.inner.generate(requests)


register_policy("flaky-arith", FlakyPolicy, "the embedded policy, failing for questions with BREAK",
                replace=True)
