"""The workshop's deck in Marp, in a real (headless) Chromium: every slide fits on its 1280×720 page.

Marp's CLI (npm's @marp-team/marp-cli) renders workshop/slides.md to HTML as an instructor's `marp` does; Chromium
lays each slide out, and each element's box is compared with the slide's content box (inside its padding, where
Marp's theme keeps the page number): a table row, a **Fix** or a **Rule of thumb** below the slide's bottom edge is
cut off on the projector. Marp keeps a source line break as a line break, so a paragraph hard-wrapped in the
source shows ragged lines: the rendered slides must have none.

Where Marp comes from: $COURSE_MARP (.ci/run installs it there), else `marp` on PATH. Locally:
    npm install --prefix /tmp/marp @marp-team/marp-cli && COURSE_MARP=/tmp/marp/node_modules/.bin/marp pytest ...
Skipped where Marp or Chromium is missing, except in CI (CI=true), where .ci/run installs both: there it fails.
"""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DECK = ROOT / "workshop" / "slides.md"
chromium = shutil.which("chromium") or shutil.which("chromium-browser")
marp = os.environ.get("COURSE_MARP") or shutil.which("marp")
playwright = pytest.importorskip("playwright.sync_api", reason="pip's playwright is not installed")


def _need(what: str | None, why: str) -> None:
    if what and os.path.exists(what):
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI installs it (.ci/run): {why}")
    pytest.skip(why)


pytestmark = pytest.mark.browser

# For each slide: its number, where its content box ends (slide units: the slide is 1280×720 whatever the window),
# the furthest bottom and right edge of anything in it, the element that reaches furthest down, and its line breaks.
MEASURE = """() => [...document.querySelectorAll('svg[data-marpit-svg] > foreignObject > section')].map((s, i) => {
  const box = s.getBoundingClientRect(), scale = box.width / s.offsetWidth, css = getComputedStyle(s);
  const bottom = s.offsetHeight - parseFloat(css.paddingBottom), right = s.offsetWidth - parseFloat(css.paddingRight);
  let low = 0, wide = 0, lowest = '';
  for (const el of s.querySelectorAll('*')) {
    if (getComputedStyle(el).position === 'absolute') continue;  // a theme's decorations, not content
    const r = el.getBoundingClientRect();
    if (!r.width && !r.height) continue;
    const b = (r.bottom - box.top) / scale, w = (r.right - box.left) / scale;
    if (b > low) { low = b; lowest = el.tagName + ': ' + el.textContent.trim().slice(0, 60); }
    wide = Math.max(wide, w);
  }
  return {slide: i + 1, bottom, right, low, wide, lowest, breaks: s.querySelectorAll('p br, li br, td br').length,
          heading: (s.querySelector('h1, h2') || {textContent: ''}).textContent};
})"""


@pytest.fixture(scope="module")
def slides(tmp_path_factory):
    _need(marp, "Marp's CLI is not installed (npm install @marp-team/marp-cli; COURSE_MARP=its bin/marp)")
    _need(chromium, "Debian's chromium is not installed (apt-get install chromium)")
    out = tmp_path_factory.mktemp("deck") / "slides.html"
    # HTML needs no browser; CHROME_PATH keeps Marp on Debian's Chromium should it look for one (never a download)
    env = {**os.environ, "CHROME_PATH": chromium, "CHROME_NO_SANDBOX": "1"}
    done = subprocess.run([marp, "--no-stdin", "--html", "--template", "bare", str(DECK), "-o", str(out)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and out.exists(), done.stdout + done.stderr
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True,
                                    args=["--no-sandbox", "--disable-gpu", "--no-first-run",
                                          "--disable-background-networking", "--disable-component-update"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 720})
            page.goto(out.as_uri())
            page.evaluate("document.fonts.ready")
            measured = page.evaluate(MEASURE)
        finally:
            browser.close()
    assert len(measured) == DECK.read_text().count("\n---\n") + 1, "one rendered slide per `---` of the source"
    return measured


def test_every_slide_fits_on_its_page_in_marp(slides):
    over = [f"slide {s['slide']} ({s['heading']}): content reaches {s['low']:.0f} px down and {s['wide']:.0f} px "
            f"across; its box ends at {s['bottom']:.0f} × {s['right']:.0f} (lowest: {s['lowest']})"
            for s in slides if s["low"] > s["bottom"] + 0.5 or s["wide"] > s["right"] + 0.5]
    assert not over, "slides that overflow in Marp at 1280×720:\n" + "\n".join(over)


def test_no_slide_shows_the_source_line_breaks(slides):
    ragged = [f"slide {s['slide']} ({s['heading']}): {s['breaks']} line breaks" for s in slides if s["breaks"]]
    assert not ragged, "paragraphs hard-wrapped in workshop/slides.md show ragged lines in Marp:\n" + "\n".join(ragged)
