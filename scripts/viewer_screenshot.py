"""Make the viewer's picture for the docs: solve one question on the embedded models, write the
viewer's HTML page, and save a screenshot of it taken by headless Chromium.

    python scripts/viewer_screenshot.py                      # docs/images/viewer.png
    python scripts/viewer_screenshot.py --html /tmp/tree.html --png /tmp/tree.png --strategy mcts

Needs Playwright (the [test] extra) and a Chromium binary on PATH (Debian: ``apt-get install
chromium``); it never downloads a browser.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from prmsearch import Searcher, resolve_policy, resolve_scorer
from prmsearch.tree_graph import result_graph
from prmsearch.viewer import write_html

ROOT = Path(__file__).resolve().parents[1]
QUESTION = "Start with 12. Add 5. Multiply by 3. Subtract 4. What is the result?"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--question", default=QUESTION, help="the question to solve")
    parser.add_argument("--strategy", default="mcts", help="the search strategy (default: mcts)")
    parser.add_argument("--n", type=int, default=16, help="the budget in generations (default: 16)")
    parser.add_argument("--html", default=None, help="also keep the page here (default: a temporary file)")
    parser.add_argument("--png", default=str(ROOT / "docs" / "images" / "viewer.png"),
                        help="the screenshot (default: docs/images/viewer.png)")
    parser.add_argument("--width", type=int, default=1600, help="window width in pixels")
    parser.add_argument("--height", type=int, default=800, help="window height in pixels")
    args = parser.parse_args(argv)

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        print("viewer_screenshot: no Chromium on PATH (apt-get install chromium)", file=sys.stderr)
        return 2
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("viewer_screenshot: needs playwright (pip install playwright)", file=sys.stderr)
        return 2

    result = Searcher(resolve_policy(None), resolve_scorer(None), args.strategy, n=args.n)(args.question)
    with tempfile.TemporaryDirectory() as scratch:
        page_path = write_html(result_graph(result), args.html or Path(scratch) / "tree.html")
        png = Path(args.png)
        png.parent.mkdir(parents=True, exist_ok=True)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, headless=True)
            page = browser.new_page(viewport={"width": args.width, "height": args.height})
            page.goto(page_path.resolve().as_uri())
            page.wait_for_selector("body[data-ready='1']")
            # hover the chosen answer, so the picture shows a node's full step too
            page.hover(f"g.node[data-id='{result.node}']")
            page.screenshot(path=str(png))
            browser.close()
    print(f"{png} ({len(result.tree)} nodes, {args.strategy}, answer {result.answer})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
