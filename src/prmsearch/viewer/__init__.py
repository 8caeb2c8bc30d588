"""The tree viewer: one self-contained HTML page per search tree (``prmsearch view``).

:func:`render_html` and :func:`write_html` take node-link tree data
(:func:`prmsearch.tree_graph.tree_graph`, :func:`~prmsearch.tree_graph.result_graph`, or a file
read back with :func:`~prmsearch.tree_graph.read_tree_graph`). The page's template, CSS and
JavaScript are package data beside this module.
"""

from prmsearch.viewer.page import page_data, render_html, write_html

__all__ = ["page_data", "render_html", "write_html"]
