"""One self-contained HTML page that draws a search tree (``prmsearch view``).

The page is the template of this package with its CSS, its JavaScript and the tree inlined: no
network, no CDN, nothing to install, so it opens from a file, an e-mail or a CI artefact. The tree
travels as JSON inside ``<script type="application/json" id="tree-data">``: the graph attributes
(question, answer, strategy, ledger, ...) under ``meta`` and the node attributes as columns under
``nodes`` (one list per attribute, indexed by node id: a few thousand nodes stay compact). The
JavaScript lays the tree out top-down, colours each node by its score, highlights the chosen path,
dims pruned branches, folds a subtree on click, shows a node's full step on hover, and pans and
zooms.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from prmsearch.tree_graph import NODE_ATTRIBUTES, json_ready

#: Node attributes the page reads (token ids are left out: only their count is shown).
PAGE_ATTRIBUTES = tuple(name for name in NODE_ATTRIBUTES if name != "token_ids")
_BOOLEAN = ("terminal", "truncated", "chosen", "pruned")


def page_data(graph: Mapping[str, Any]) -> dict[str, Any]:
    """The page's JSON payload from node-link tree data (:func:`prmsearch.tree_graph.tree_graph`):
    ``{"meta": graph attributes, "nodes": {attribute: [value per node id]}}``, strict-JSON ready.

    Node ids must be 0 .. n-1 (a tree's ids are); a missing attribute is a ValueError naming it.
    """
    nodes = sorted(graph["nodes"], key=lambda node: node["id"])
    ids = [node["id"] for node in nodes]
    if ids != list(range(len(nodes))):
        raise ValueError("the tree's node ids must be 0 .. n-1, as in a prmsearch tree file")
    if not nodes:
        raise ValueError("the tree has no nodes")
    missing = [name for name in PAGE_ATTRIBUTES if name not in nodes[0]]
    if missing:
        raise ValueError(f"not a prmsearch tree: its nodes lack {', '.join(missing)}")
    columns: dict[str, list[Any]] = {}
    for name in PAGE_ATTRIBUTES:
        values = [node.get(name) for node in nodes]
        columns[name] = [int(bool(v)) for v in values] if name in _BOOLEAN else values
    return json_ready({"meta": dict(graph.get("graph", {})), "nodes": columns})


def render_html(graph: Mapping[str, Any], title: str | None = None) -> str:
    """The whole HTML page of a tree (node-link data), as text."""
    data = page_data(graph)
    question = str(data["meta"].get("question") or "search tree")
    title = title or f"prmsearch tree: {question[:80]}"
    payload = json.dumps(data, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
    # inside <script>, "</script>" or "<!--" would end or confuse the block: escape what HTML reads
    payload = payload.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
    page = _asset("template.html")
    for marker, text in (("/*__CSS__*/", _asset("viewer.css")), ("/*__JS__*/", _asset("viewer.js")),
                         ("__TITLE__", html.escape(title)), ("__DATA__", payload)):  # fmt: skip
        page = page.replace(marker, text, 1)
    return page


def write_html(graph: Mapping[str, Any], path: str | Path, title: str | None = None) -> Path:
    """Write the page of a tree (node-link data) to ``path`` (folders made as needed)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(graph, title), encoding="utf-8")
    return path


def _asset(name: str) -> str:
    return resources.files("prmsearch.viewer").joinpath(name).read_text(encoding="utf-8")
