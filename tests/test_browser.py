"""A real JupyterLab in a real (headless) Chromium: the explorer renders and its Run button works.

nbval checks what notebooks print; only a browser shows that the widgets render and
respond. Skipped, with the reason, where Chromium or playwright is missing.
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

chromium = shutil.which("chromium") or shutil.which("chromium-browser")
playwright = pytest.importorskip("playwright.sync_api", reason="pip's playwright is not installed")
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(chromium is None, reason="Debian's chromium is not installed (apt-get install chromium)"),
]

CELLS = [
    "from lessons_lib import setup\nfrom lessons_lib import lesson01_broadcast_matmul as L\ndevice = setup()",
    "ex = L.explorer(device)\nex",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# A refusal, a run, a stop, an unexpected error and a replay, in a real kernel: the explorer's work
# runs on a thread there, and an exception inside an Output widget would be swallowed; this is
# where that shows.
CELLS_ACTIONS = [
    CELLS[0],
    "ex = L.explorer(device)\nex",
    'ex.sliders["embed_dims"].value, ex.sliders["num_modules"].value = 8192, 256  # far too big',
]
SMALL_AGAIN = 'ex.sliders["embed_dims"].value, ex.sliders["num_modules"].value = 64, 4'
SLOW_SWEEP = "ex.min_run_time = 0.5  # a sweep of about a minute: long enough to stop"
BROKEN = "ex.lesson.variants[0].fn = None  # a bug inside the library, as a reader would meet one"


@pytest.fixture
def lab(tmp_path, request):
    cells = getattr(request, "param", CELLS)
    if cells == "committed explorer":  # built here, not at collection: it imports the library
        cells = [_committed_explorer_cell()]
    nb = {"cells": [c if isinstance(c, dict) else
                    {"cell_type": "code", "metadata": {}, "source": c, "outputs": [], "execution_count": None}
                    for c in cells],
          "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "explorer.ipynb").write_text(json.dumps(nb))
    port, token = _free_port(), "course-test"
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root", f"--port={port}",
         "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={tmp_path}",
         "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "MPLBACKEND": "module://matplotlib_inline.backend_inline"},
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
            break
        except OSError:
            time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail("JupyterLab did not start within 60 s")
    yield f"{base}/lab/tree/explorer.ipynb?token={token}"
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


def _browser(p):
    return p.chromium.launch(
        executable_path=chromium, headless=True,
        args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
              "--disable-background-networking", "--disable-component-update", "--disable-sync"],
    )


def _open_and_run_all(page, lab):
    page.goto(lab, timeout=60_000)
    page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=60_000)
    page.wait_for_selector(".jp-StatusBar-TextItem:has-text('Idle')", timeout=90_000)
    page.click(".jp-NotebookPanel .jp-Cell .jp-InputArea-editor >> nth=0")
    page.keyboard.press("Escape")  # command mode, the notebook focused
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()


def _shots_dir(tmp_path):
    d = os.environ.get("COURSE_SCREENSHOTS")  # keep screenshots somewhere to look at them
    return Path(d) if d else tmp_path


def test_explorer_renders_and_runs_in_jupyterlab(lab, tmp_path):
    with playwright.sync_playwright() as p:
        browser = _browser(p)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        shot = _shots_dir(tmp_path) / "explorer.png"
        try:
            _open_and_run_all(page, lab)
            # the explorer: one slider per shape parameter, and its Run button
            page.wait_for_selector(".widget-slider", timeout=180_000)
            assert page.locator(".widget-slider").count() == 4
            run = page.locator(".jupyter-widgets button", has_text="Run").first
            run.click()
            # a figure appears in the explorer's output area, and no Python error anywhere
            page.wait_for_selector(".jupyter-widgets .jp-OutputArea-output img", timeout=120_000)
            errors = page.locator("[data-mime-type='application/vnd.jupyter.error']").count()
            page.screenshot(path=str(shot), full_page=True)
            assert errors == 0, "a cell raised an error"
        except Exception:
            page.screenshot(path=str(shot), full_page=True)
            print(f"screenshot of the failure: {shot}")
            raise
        finally:
            browser.close()


def _status(page) -> list[str]:
    """The explorer's status line(s): the widget HTML that carries a mark (⚠, ■, ✓)."""
    return [t for t in page.locator(".widget-html").all_inner_texts() if any(m in t for m in "⚠■✓")]


def _wait_status(page, text: str, timeout_ms: int):
    page.wait_for_function(f"() => [...document.querySelectorAll('.widget-html')].some("
                           f"e => e.textContent.includes({json.dumps(text)}))", timeout=timeout_ms)


def _run_code(page, code: str):
    """Type code into the last cell and run it, as a reader would."""
    page.locator(".jp-NotebookPanel .jp-Cell .jp-InputArea-editor").last.click()
    page.keyboard.press("Control+A")
    page.keyboard.type(code)
    page.keyboard.press("Shift+Enter")
    time.sleep(0.5)
    page.wait_for_selector(".jp-StatusBar-TextItem:has-text('Idle')", timeout=60_000)


def _button(page, name: str):
    return page.locator(".jupyter-widgets button", has_text=name).first


def _no_traceback(page):
    assert page.locator("[data-mime-type='application/vnd.jupyter.error']").count() == 0
    assert page.get_by_text("Traceback").filter(visible=True).count() == 0


@pytest.mark.parametrize("lab", [CELLS_ACTIONS], indirect=True)
def test_explorer_refuses_runs_stops_reports_and_replays_in_a_real_kernel(lab, tmp_path):
    with playwright.sync_playwright() as p:
        browser = _browser(p)
        page = browser.new_page(viewport={"width": 1400, "height": 1300})
        shots = _shots_dir(tmp_path)
        try:
            _open_and_run_all(page, lab)
            page.wait_for_selector(".widget-slider", timeout=180_000)
            page.wait_for_selector(".jp-StatusBar-TextItem:has-text('Idle')", timeout=120_000)
            # 1. a shape far too big: one line of status, no traceback anywhere
            _button(page, "Run").click()
            _wait_status(page, "⚠", 60_000)
            page.screenshot(path=str(shots / "explorer-refusal.png"), full_page=True)
            (refusal,) = _status(page)
            assert "needs about" in refusal
            assert "\n" not in refusal.strip()
            _no_traceback(page)
            assert _button(page, "Run").is_enabled()
            # 2. a small shape runs, estimated first, and draws its figure
            _run_code(page, SMALL_AGAIN)
            _button(page, "Run").click()
            _wait_status(page, "✓ done", 120_000)
            assert page.locator(".jupyter-widgets .jp-OutputArea-output img").count() == 1
            assert "estimated" in _status(page)[0]
            page.screenshot(path=str(shots / "explorer-run.png"), full_page=True)
            # 3. a long sweep: the kernel stays idle while it runs, and Stop ends it
            _run_code(page, SLOW_SWEEP)
            _button(page, "Sweep").click()
            _wait_status(page, "sweep of", 60_000)
            assert page.locator(".jp-StatusBar-TextItem:has-text('Idle')").count() == 1
            t0 = time.time()
            _button(page, "Stop").click()
            _wait_status(page, "stopped", 60_000)
            stop_seconds = time.time() - t0
            page.screenshot(path=str(shots / "explorer-stopped.png"), full_page=True)
            assert stop_seconds < 30, f"Stop took {stop_seconds:.0f} s to take effect"
            assert _button(page, "Sweep").is_enabled()
            # 4. an unexpected error: one line naming it, the traceback folded under "details"
            _run_code(page, BROKEN)
            _button(page, "Run").click()
            _wait_status(page, "unexpected", 60_000)
            page.screenshot(path=str(shots / "explorer-unexpected.png"), full_page=True)
            (line,) = _status(page)
            assert "unexpected TypeError" in line
            _no_traceback(page)
            page.locator(".widget-html details summary").first.click()
            page.screenshot(path=str(shots / "explorer-unexpected-details.png"), full_page=True)
            # 5. a recorded GPU source replays, labelled with its kind
            select = page.locator(".widget-dropdown:has(label:text('results from')) select")
            model = next(o for o in select.locator("option").all_inner_texts() if "model" in o)
            select.select_option(label=model)
            page.wait_for_selector(".jupyter-widgets .jp-OutputArea-output img", timeout=60_000)
            page.wait_for_function("() => [...document.querySelectorAll('.jupyter-widgets button')].some("
                                   "b => b.textContent.includes('Run') && !b.disabled)", timeout=60_000)
            time.sleep(1)  # the images finish loading
            page.screenshot(path=str(shots / "explorer-replay.png"), full_page=True)
            assert page.locator(".jupyter-widgets .jp-OutputArea-output", has_text="not a measurement").count() >= 1
        except Exception:
            page.screenshot(path=str(shots / "explorer-failure.png"), full_page=True)
            print(f"screenshots in {shots}")
            raise
        finally:
            browser.close()


def _committed_explorer_cell() -> dict:
    """The explorer's cell as a committed notebook holds it: executed, its output saved."""
    from lessons_lib import lesson01_broadcast_matmul as L

    data = L.explorer("cpu")._repr_mimebundle_()
    return {"cell_type": "code", "metadata": {}, "source": "ex = L.explorer(device)\nex", "execution_count": 2,
            "outputs": [{"output_type": "display_data", "data": data, "metadata": {}}]}


@pytest.mark.parametrize("lab", ["committed explorer"], indirect=True)
def test_a_committed_explorer_shows_a_picture_before_running(lab, tmp_path):
    """Opened, not run: the saved widget view has no model and the notebook is not trusted,
    so JupyterLab renders the next type in the bundle, the picture, instead of `VBox(children=…)`."""
    with playwright.sync_playwright() as p:
        browser = _browser(p)
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        try:
            page.goto(lab, timeout=60_000)
            page.wait_for_selector(".jp-OutputArea-output img", timeout=90_000)
            page.screenshot(path=str(_shots_dir(tmp_path) / "explorer-before-running.png"), full_page=True)
            assert page.get_by_text("VBox(").count() == 0
            assert page.get_by_text("model not found").count() == 0
        finally:
            browser.close()
