"""The planner's registration: importing :mod:`prmsearch.planner.strategy` registers the
``planner`` strategy (with its ``plan`` file option). Loaded through the ``prmsearch.plugins`` entry
point (``pyproject.toml``) on the first lookup of a strategy the registry does not know, so that
the search core, which sits below this room, never names it."""

from prmsearch.planner import strategy

__all__ = ["strategy"]
