"""``prmsearch serve``: PRM-guided search behind an OpenAI-compatible API.

One `prmsearch.Searcher` session serves every request, so concurrent requests share the backends'
batches. `build_app` gives the ASGI app (FastAPI); `serve` runs it with uvicorn. FastAPI and
uvicorn are the ``serve`` extra: importing this package needs them, importing prmsearch does not.
"""

from prmsearch.serve.app import build_app
from prmsearch.serve.catalog import ModelCatalog, ModelRoute
from prmsearch.serve.config import API_KEY_ENV, ServeConfig
from prmsearch.serve.errors import ApiError
from prmsearch.serve.runner import serve
from prmsearch.serve.service import SearchService

__all__ = [
    "API_KEY_ENV",
    "ApiError",
    "ModelCatalog",
    "ModelRoute",
    "SearchService",
    "ServeConfig",
    "build_app",
    "serve",
]
