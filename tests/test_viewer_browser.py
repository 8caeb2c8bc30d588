"""The viewer page in a real headless Chromium (Playwright): it loads without errors, draws one
node element per tree node, marks the chosen path, folds and unfolds a subtree on click, shows a
node's full step on hover, paints a non-blank picture, and copes with a 3000-node tree.

Skipped when Playwright or a Chromium binary is missing, unless ``PRMSEARCH_REQUIRE_BROWSER=1``
(CI sets it): then a missing browser fails. ``playwright install`` is never run.
"""

from __future__ import annotations

import io
import os
import shutil

import pytest
from tree_helpers import QUESTION, synthetic_tree

from prmsearch import Searcher, resolve_policy, resolve_scorer
from prmsearch.tree_graph import result_graph, tree_graph
from prmsearch.viewer import write_html

REQUIRED = os.environ.get("PRMSEARCH_REQUIRE_BROWSER") == "1"


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _unavailable() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install playwright; the [test] extra has it)"
    if _chromium() is None:
        return "no Chromium binary on PATH (apt-get install chromium)"
    return None


@pytest.fixture(scope="module")
def browser():
    why = _unavailable()
    if why:
        if REQUIRED:
            pytest.fail(f"PRMSEARCH_REQUIRE_BROWSER=1 but the browser tests cannot run: {why}")
        pytest.skip(why)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=_chromium(), headless=True)
        yield chromium
        chromium.close()


class Page:
    """An open viewer page with the console and page errors it raised."""

    def __init__(self, browser, path):
        self.errors: list[str] = []
        self.page = browser.new_page(viewport={"width": 1280, "height": 800})
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.goto(path.resolve().as_uri())
        self.page.wait_for_selector("body[data-ready='1']", timeout=30_000)
        self.page.click("#fit")  # the whole tree in the window, so that every node can be clicked

    def visible(self, ids) -> list[bool]:
        return self.page.evaluate(
            "ids => ids.map(i => document.querySelector(`g.node[data-id='${i}']`).style.display !== 'none')",
            list(ids),
        )


@pytest.fixture(scope="module")
def solved(tmp_path_factory):
    result = Searcher(resolve_policy(None), resolve_scorer(None), "beam", n=16)(QUESTION)
    path = write_html(result_graph(result), tmp_path_factory.mktemp("view") / "beam.html")
    return result, path


@pytest.fixture(scope="module")
def solved_page(browser, solved):
    page = Page(browser, solved[1])
    yield page
    page.page.close()


def test_page_loads_without_errors_and_draws_every_node(solved, solved_page):
    result, _ = solved
    page = solved_page.page
    assert page.locator("g.node").count() == len(result.tree)
    assert page.locator("path.edge").count() == len(result.tree) - 1
    ids = page.eval_on_selector_all("g.node", "gs => gs.map(g => Number(g.dataset.id))")
    assert sorted(ids) == list(range(len(result.tree)))
    assert QUESTION in page.locator("#question").inner_text()
    assert "47" in page.locator("#facts").inner_text()
    assert "generations" in page.locator("#ledger").inner_text()
    assert solved_page.errors == []


def test_chosen_path_is_marked(solved, solved_page):
    result, _ = solved
    chosen = solved_page.page.eval_on_selector_all("g.node.chosen", "gs => gs.map(g => Number(g.dataset.id))")
    assert sorted(chosen) == [0, *result.tree.path(result.node)]  # root included
    assert solved_page.page.locator("path.edge.chosen").count() == len(result.steps)
    pruned = [i for i in result.tree.leaves() if not result.tree.terminal[i]]
    assert solved_page.page.locator("g.node.pruned").count() == len(pruned)
    assert solved_page.page.locator("g.node.dim").count() >= len(pruned)


def test_click_folds_a_subtree_and_click_again_unfolds_it(solved, solved_page):
    result, _ = solved
    tree, page = result.tree, solved_page.page
    node = tree.path(result.node)[0]  # the chosen path's first step: it has descendants
    below = [i for i in tree.iter_nodes() if node in tree.path(i) and i != node]
    assert below
    page.click(f"g.node[data-id='{node}']")
    assert not any(solved_page.visible(below)) and all(solved_page.visible([0, node]))
    badge = page.locator(f"g.node[data-id='{node}'] g.badge")
    assert badge.get_attribute("display") == "inline" and badge.text_content() == f"+{len(below)}"
    page.click(f"g.node[data-id='{node}']")
    assert all(solved_page.visible(below))
    assert solved_page.errors == []


def test_hover_shows_the_full_step(solved, solved_page):
    result, _ = solved
    page = solved_page.page
    node = result.node  # a long step: its box shows it shortened
    text = result.tree.step_text[node]
    box = page.locator(f"g.node[data-id='{node}'] text.step").text_content()
    assert box != text and box.endswith("…")
    page.hover(f"g.node[data-id='{node}']")
    tip = page.locator("#tooltip")
    assert tip.is_visible() and text in tip.inner_text()
    assert "chosen path" in tip.inner_text()
    page.mouse.move(2, 790)
    assert not tip.is_visible()


def test_screenshot_is_not_blank(solved_page):
    from PIL import Image, ImageStat

    png = solved_page.page.locator("#stage").screenshot()
    image = Image.open(io.BytesIO(png)).convert("RGB")
    assert min(image.size) > 100
    assert max(ImageStat.Stat(image).var) > 50, "the tree area is one flat colour"
    colours = image.getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 20


def test_a_3000_node_tree_loads_and_folds(browser, tmp_path):
    tree, chosen = synthetic_tree(3000)
    path = write_html(tree_graph(tree, chosen), tmp_path / "big.html")
    view = Page(browser, path)
    page = view.page
    try:
        assert page.locator("g.node").count() == 3000
        assert page.locator("g.node.chosen").count() == tree.depth[chosen] + 1
        page.click("#fold-off-path")
        shown = page.eval_on_selector_all("g.node", "gs => gs.filter(g => g.style.display !== 'none').length")
        assert 0 < shown < 3000
        page.click("#unfold-all")
        shown = page.eval_on_selector_all("g.node", "gs => gs.filter(g => g.style.display !== 'none').length")
        assert shown == 3000
        page.select_option("#colour-by", "path_min")
        assert view.errors == []
    finally:
        page.close()
