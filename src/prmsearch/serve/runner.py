"""Running the search server: the app over a `Searcher`, served by uvicorn until stopped."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prmsearch.api import Searcher
from prmsearch.serve.app import build_app
from prmsearch.serve.catalog import ModelCatalog
from prmsearch.serve.config import ServeConfig
from prmsearch.serve.service import SearchService


def server_parts(searcher: Searcher, config: ServeConfig) -> tuple[SearchService, ModelCatalog]:
    """The service over ``searcher`` and its model catalogue; the searcher's strategy options
    (all but the budget) become that strategy's defaults for every model id that names it."""
    bound = searcher.strategy
    options: Mapping[str, Any] = {k: v for k, v in bound.options().items() if k != "n"}
    catalog = ModelCatalog(config.policy_id, config.budgets, {bound.name: options})
    return SearchService(searcher), catalog


def serve(searcher: Searcher, config: ServeConfig | None = None, log_level: str = "info") -> None:
    """Serve ``searcher`` on ``config.host:config.port`` until interrupted (Ctrl-C, SIGTERM)."""
    import uvicorn

    config = config or ServeConfig()
    service, catalog = server_parts(searcher, config)
    app = build_app(service, catalog, config)
    try:
        uvicorn.run(app, host=config.host, port=config.port, log_level=log_level,
                    access_log=log_level == "debug",
                    # SIGTERM: drain, then close. uvicorn annotates this int | None; it is the
                    # float seconds of an asyncio.timeout
                    timeout_graceful_shutdown=config.drain_timeout_s)  # type: ignore[arg-type]
    finally:
        searcher.close()  # a server that stops leaves no engine behind
