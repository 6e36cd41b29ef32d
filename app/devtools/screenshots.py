"""Full-page screenshots and text of the live page after one run: what a reader check is given.

    python -m app.devtools.screenshots --out artifacts/reader [--prompt "..."] [--follow-up "..."]

Starts its own Streamlit server, generates once with the default prompt (or the one given) and the
default token cap, waits
until the page reports the run done, then saves the page's text and the page cut into tiles short
enough for an image viewer, the first screen at 1440x900 (first-screen.png), the reading path's
word counts (words.json) and the text with every expander open (page-open.txt). Needs the prepared model and Debian's Chromium.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from app.devtools.bench import free_port, start_server, wait_healthy
from app.devtools.words import lesson_words
from core import settings

ROOT = Path(__file__).resolve().parents[2]
TILE_PX = 1800


def _wait_done(page, previous: str | None) -> None:
    """Until the live view shows a finished run other than `previous`, every step drawn."""
    page.wait_for_function("""(prev) => {const c = document.querySelector('.pd-controls');
                               return c && c.dataset.runId !== prev && c.dataset.status === 'done'
                                   && c.dataset.shown === c.dataset.available;}""", arg=previous, timeout=300_000)


def capture(out: Path, prompt: str | None, width: int = 1440, follow_up: str | None = None) -> list[Path]:
    """Run once in Chromium (and ask `follow_up`, if given) and write page.txt and page-NN.png
    tiles under `out`."""
    from PIL import Image
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    proc = start_server(port, out / "streamlit.log")
    try:
        wait_healthy(port)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=settings.chromium_path())
            page = browser.new_context(viewport={"width": width, "height": 1000}).new_page()
            page.goto(f"http://127.0.0.1:{port}")
            box = page.get_by_label("Prompt")
            box.wait_for(timeout=180_000)
            page.get_by_role("button", name="Generate").wait_for(timeout=180_000)
            if prompt is not None:
                box.fill(prompt)
            # devtool only: a reader reads the opening before pressing Generate; pressed while the
            # browser, on these same two cores, is still drawing the first page, the prefill is timed
            # beside that drawing (seen here: 197 ms against 144-170 ms when pressed later)
            page.wait_for_timeout(5000)
            page.get_by_role("button", name="Generate").click()
            _wait_done(page, None)
            if follow_up:  # a second turn of the same conversation, the first turn's cache kept
                first = page.evaluate("() => document.querySelector('.pd-controls').dataset.runId")
                main = page.get_by_test_id("stMainBlockContainer")
                main.get_by_role("textbox", name="Ask a follow-up").fill(follow_up)
                main.get_by_role("button", name="Ask", exact=True).click()
                _wait_done(page, first)
                page.locator(".st-key-pd_answer_serving").wait_for(timeout=120_000)
            # The after-run sections are drawn once the run's summary reaches the script.
            page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length >= 4",
                                   timeout=120_000)
            page.wait_for_timeout(1500)  # devtool only: let Plotly finish its last relayout
            height = page.evaluate("""() => Math.max(document.body.scrollHeight,
                ...Array.from(document.querySelectorAll('*')).map(e => e.scrollHeight))""")
            page.set_viewport_size({"width": width, "height": int(height)})
            page.wait_for_timeout(1500)
            # the text a screen reader gets: Streamlit's icon ligatures ("keyboard_arrow_right") are aria-hidden
            (out / "page.txt").write_text(page.evaluate("""() => {
                const hidden = Array.from(document.querySelectorAll('[aria-hidden="true"]'));
                const was = hidden.map(e => e.style.display);
                hidden.forEach(e => { e.style.display = 'none'; });
                const text = document.body.innerText;
                hidden.forEach((e, i) => { e.style.display = was[i]; });
                return text; }"""))
            full = out / "page-full.png"
            page.screenshot(path=str(full), full_page=True)
            page.set_viewport_size({"width": width, "height": 900})
            page.evaluate("window.scrollTo(0, 0)")
            page.screenshot(path=str(out / "first-screen.png"))
            words = lesson_words(page)  # opens every expander: after the screenshots
            (out / "words.json").write_text(json.dumps(words) + "\n")
            (out / "page-open.txt").write_text(page.evaluate(
                "() => (document.querySelector('[data-testid=\"stMain\"]') || document.body).innerText"))
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    image = _trim_bottom(Image.open(full))
    tiles = []
    for k, top in enumerate(range(0, image.height, TILE_PX)):
        tile = out / f"page-{k:02d}.png"
        image.crop((0, top, image.width, min(image.height, top + TILE_PX))).save(tile)
        tiles.append(tile)
    full.unlink()
    return tiles


def _trim_bottom(image):
    """The page less the empty space under its last line, so no tile is a blank one."""
    from PIL import Image, ImageChops

    rgb = image.convert("RGB")
    background = Image.new("RGB", rgb.size, rgb.getpixel((rgb.width - 1, rgb.height - 1)))
    box = ImageChops.difference(rgb, background).getbbox()
    return image if box is None else image.crop((0, 0, image.width, min(image.height, box[3] + 40)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "artifacts" / "reader")
    parser.add_argument("--prompt", default=None)
    parser.add_argument("--follow-up", default=None, help="ask this follow-up after the first answer")
    args = parser.parse_args(argv)
    tiles = capture(args.out, args.prompt, follow_up=args.follow_up)
    print(f"{len(tiles)} tiles and page.txt in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
