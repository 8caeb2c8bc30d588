"""A search tree as a graph: node-link data, a ``networkx.DiGraph``, and files of either.

One record per tree node, one edge per parent -> child, so that a tree can be inspected with
networkx, drawn (``prmsearch view``), or kept beside a benchmark's results. networkx is needed
only for :func:`to_networkx` and for GraphML files (``pip install 'prmsearch[viz]'``): the
node-link data and its JSON files are built here without it, so ``import prmsearch``, ``prmsearch
solve --tree t.json`` and ``bench --save-trees`` never need networkx.

Node attributes (:data:`NODE_ATTRIBUTES`; the node's key is its tree id):
    parent, depth: the tree's columns (the root's parent is -1).
    step_text: the step's text ("" for the root).
    token_count, token_ids: the policy's tokens for this step (a whole solution generated in one
        call has all of them on its last node).
    logprob: the policy's summed log-probability of the step's tokens (the tree's per-token
        ``token_logprobs`` are left out of the graph: a float per token would dwarf the rest, and
        :meth:`~prmsearch.SearchTree.to_dict` keeps them).
    score: the PRM's step score (NaN: not scored).
    path_min, path_mean, path_prod, path_last: the path's step scores aggregated by each of the
        four aggregations (:class:`prmsearch.Aggregation`), all of them, so that any strategy's
        ranking can be read off (the graph's ``score`` is the chosen path's under the strategy's
        own aggregation); NaN at the root and wherever a step on the path is unscored.
    visits, value_sum, value: MCTS statistics; ``value = value_sum / visits`` (NaN when unvisited).
    terminal, truncated, finish, answer, answer_group: how the path ended and its answer.
    chosen: the node is on the chosen path (the root included).
    pruned: a leaf that is not terminal: the search stopped expanding it.

Graph attributes: ``question``, ``nodes`` and ``chosen`` always; from a search result also
``strategy``, ``answer``, ``score``, ``ledger``, ``error`` (:func:`result_graph`); callers may add
more (a benchmark adds ``qid``, ``budget``, ``seed``, ``gold``, ``correct``).

Missing values in files. In memory a missing float is NaN and a missing answer is None.
Node-link JSON (``.json``, ``.json.gz``) is strict JSON: every NaN or infinite float is written as
``null``; :func:`read_tree_graph` turns the ``null`` of a float attribute back into NaN (networkx's
own ``node_link_graph`` leaves it None). GraphML has no null: floats stay floats (GraphML reads
``NaN`` back as ``float('nan')``), a missing answer (and any other None) is written as the empty
string, ``token_ids`` as a space-separated string, and dict or list graph attributes (the
ledger) as JSON text.
"""

from __future__ import annotations

import gzip
import json
import math
import os
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

# prmsearch.tree's ROOT and NO_PARENT, not imported: SearchTree.to_networkx imports this module, and
# the house has no import circles. A tree is anything with SearchTree's columns and helpers.
_ROOT = 0
_NO_PARENT = -1

#: File suffixes :func:`write_tree_graph` understands, and what each writes.
TREE_SUFFIXES = {
    ".json": "node-link JSON",
    ".json.gz": "gzip-compressed node-link JSON",
    ".graphml": "GraphML (needs networkx)",
}
#: Float node attributes: NaN in memory, ``null`` in JSON.
FLOAT_ATTRIBUTES = (
    "logprob", "score", "path_min", "path_mean", "path_prod", "path_last", "value_sum", "value",
)  # fmt: skip
#: Every node attribute, in the order they are written.
NODE_ATTRIBUTES = (
    "parent", "depth", "step_text", "token_count", "token_ids", "logprob", "score",
    "path_min", "path_mean", "path_prod", "path_last", "visits", "value_sum", "value",
    "terminal", "truncated", "finish", "answer", "answer_group", "chosen", "pruned",
)  # fmt: skip
#: Written in the graph attributes so that a reader can tell a tree graph from another graph.
FORMAT = "prmsearch-tree"
FORMAT_VERSION = 1
_NAN = float("nan")


def tree_graph(tree: Any, chosen: int | None = None, **attributes: Any) -> dict[str, Any]:
    """The node-link data of ``tree``, a :class:`~prmsearch.SearchTree`, in networkx's node-link
    format (edges under ``"edges"``).

    ``chosen`` is the chosen node (its path, root included, is marked ``chosen``; None: no node
    is). ``attributes`` are added to the graph attributes. Floats stay NaN in memory; see
    :func:`write_tree_graph` for files.
    """
    size = len(tree)
    if chosen is not None and not 0 <= chosen < size:
        raise ValueError(f"chosen must be a node of the tree (0 .. {size - 1}), got {chosen}")
    on_path = set() if chosen is None else {_ROOT, *tree.path(chosen)}
    nodes = []
    for i in range(size):
        depth = tree.depth[i]
        scored = i != _ROOT and not math.isnan(tree.path_sum[i])
        visits = tree.visits[i]
        leaf = not tree.children(i)
        nodes.append({
            "id": i,
            "parent": tree.parent[i],
            "depth": depth,
            "step_text": tree.step_text[i],
            "token_count": len(tree.token_ids[i]),
            "token_ids": list(tree.token_ids[i]),
            "logprob": float(tree.logprob[i]),
            "score": float(tree.score[i]),
            "path_min": float(tree.path_min[i]) if scored else _NAN,
            "path_mean": tree.path_sum[i] / depth if scored else _NAN,
            "path_prod": float(tree.path_prod[i]) if scored else _NAN,
            "path_last": float(tree.score[i]) if scored else _NAN,
            "visits": int(visits),
            "value_sum": float(tree.value_sum[i]),
            "value": tree.value_sum[i] / visits if visits else _NAN,
            "terminal": bool(tree.terminal[i]),
            "truncated": bool(tree.truncated[i]),
            "finish": tree.finish[i],
            "answer": tree.answer[i],
            "answer_group": int(tree.answer_group[i]),
            "chosen": i in on_path,
            "pruned": leaf and not tree.terminal[i],
        })  # fmt: skip
    edges = [{"source": p, "target": i} for i, p in enumerate(tree.parent) if p != _NO_PARENT]
    graph = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "question": tree.question,
        "nodes": size,
        "chosen": _NO_PARENT if chosen is None else int(chosen),
        "answer_groups": list(tree.answer_groups),
        **attributes,
    }
    return {"directed": True, "multigraph": False, "graph": graph, "nodes": nodes, "edges": edges}


def result_graph(result: Any, **attributes: Any) -> dict[str, Any]:
    """The node-link data of a :class:`~prmsearch.SearchResult`'s tree, with its chosen path
    marked and the result's strategy, answer, score, ledger and error as graph attributes."""
    ledger = result.ledger.to_dict() if hasattr(result.ledger, "to_dict") else result.ledger
    return tree_graph(
        result.tree,
        chosen=result.node,
        strategy=result.strategy,
        answer=result.answer,
        score=float(result.score),
        ledger=dict(ledger) if ledger is not None else None,
        error=result.error,
        **attributes,
    )


def to_networkx(tree: Any, chosen: int | None = None, **attributes: Any) -> Any:
    """A ``networkx.DiGraph`` of a :class:`~prmsearch.SearchTree` (``chosen`` and ``attributes``
    as in :func:`tree_graph`) or of node-link data (from :func:`tree_graph` or
    :func:`read_tree_graph`). Node keys are the tree's node ids; edges point parent -> child."""
    nx = _networkx()
    if isinstance(tree, Mapping):
        if chosen is not None or attributes:
            raise ValueError("chosen and graph attributes apply to a SearchTree; node-link data has its own")
        data = tree
    else:
        data = tree_graph(tree, chosen, **attributes)
    return nx.node_link_graph(data, directed=True, multigraph=False, edges="edges")


def tree_suffix(path: str | Path) -> str:
    """The :data:`TREE_SUFFIXES` entry ``path`` ends with; a ValueError naming them otherwise."""
    name = Path(path).name.lower()
    for suffix in sorted(TREE_SUFFIXES, key=len, reverse=True):
        if name.endswith(suffix):
            return suffix
    known = ", ".join(TREE_SUFFIXES)
    raise ValueError(f"cannot tell the tree format of {str(path)!r}: its name must end in one of {known}")


def write_tree_graph(graph: Mapping[str, Any] | Any, path: str | Path) -> Path:
    """Write node-link data (or a ``networkx.DiGraph`` of a tree) to ``path``, in the format its
    suffix names (:data:`TREE_SUFFIXES`); an unknown suffix is a ValueError naming them.

    The file appears whole or not at all (written beside it, then renamed), so a reader never
    sees half a tree, and a killed run never leaves one.
    """
    path = Path(path)
    suffix = tree_suffix(path)
    data = graph if isinstance(graph, Mapping) else _networkx().node_link_data(graph, edges="edges")
    temporary = path.with_name(f".{path.name}.tmp")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        if suffix == ".graphml":
            _networkx().write_graphml(_graphml_graph(data), temporary)
        else:
            text = json.dumps(json_ready(data), allow_nan=False, separators=(",", ":"))
            raw = text.encode("utf-8")
            with temporary.open("wb") as handle:
                handle.write(gzip.compress(raw, mtime=0) if suffix == ".json.gz" else raw)
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)
    return path


def read_tree_graph(path: str | Path) -> dict[str, Any]:
    """Node-link data read back from a ``.json`` or ``.json.gz`` tree file, with the ``null`` of
    every float node attribute turned back into NaN (GraphML: read it with networkx)."""
    path = Path(path)
    suffix = tree_suffix(path)
    if suffix == ".graphml":
        raise ValueError(f"{path}: read GraphML with networkx.read_graphml; this reads node-link JSON files")
    raw = path.read_bytes()
    try:
        text = gzip.decompress(raw) if suffix == ".json.gz" else raw
        data = json.loads(text)
    except (EOFError, OSError, zlib.error) as exc:  # a truncated or damaged gzip stream
        raise ValueError(f"{path} is damaged (its gzip stream: {exc or type(exc).__name__})") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise ValueError(f"{path} is damaged (not JSON: {exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not a prmsearch tree (not a JSON object)")
    return from_json_ready(data)


def json_ready(data: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of node-link data that strict JSON can hold: NaN and infinite floats become None."""
    return cast("dict[str, Any]", _clean(data))  # a Mapping comes back from _clean as a dict


def from_json_ready(data: Mapping[str, Any]) -> dict[str, Any]:
    """Inverse of :func:`json_ready` for the float node attributes: their None becomes NaN."""
    if "nodes" not in data or "graph" not in data:
        raise ValueError("not node-link data of a tree: it has no 'nodes' and 'graph'")
    data = dict(data)
    data["nodes"] = [
        {k: (_NAN if v is None and k in FLOAT_ATTRIBUTES else v) for k, v in node.items()}
        for node in data["nodes"]
    ]
    return data


def _clean(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def _graphml_value(value: Any) -> Any:
    """A value GraphML can hold: None as "", lists as space-separated text, dicts as JSON."""
    if value is None:
        return ""
    if isinstance(value, (list, tuple)) and all(isinstance(v, int) for v in value):
        return " ".join(map(str, value))
    if isinstance(value, (list, tuple, Mapping)):
        return json.dumps(_clean(value), allow_nan=False)
    return value


def _graphml_graph(data: Mapping[str, Any]) -> Any:
    """A DiGraph of ``data`` whose every attribute value GraphML can store, with one type per
    attribute name (networkx writes one key per name and type)."""
    nx = _networkx()
    graph = nx.DiGraph()
    graph.graph.update({k: _graphml_value(v) for k, v in data["graph"].items()})
    for node in data["nodes"]:
        attrs = {k: _graphml_value(v) for k, v in node.items() if k != "id"}
        for name in FLOAT_ATTRIBUTES:
            if name in attrs:
                attrs[name] = float(attrs[name]) if attrs[name] != "" else _NAN
        graph.add_node(node["id"], **attrs)
    graph.add_edges_from((e["source"], e["target"]) for e in data["edges"])
    return graph


def _networkx() -> Any:  # the networkx module; it ships no type hints, so Any
    try:
        import networkx
    except ImportError:
        raise ImportError(
            "tree graphs as networkx objects and GraphML files need networkx: pip install 'prmsearch[viz]' "
            "(node-link JSON files, .json and .json.gz, do not)"
        ) from None
    return networkx
