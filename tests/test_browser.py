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


@pytest.fixture
def lab(tmp_path):
    nb = {"cells": [{"cell_type": "code", "metadata": {}, "source": c, "outputs": [], "execution_count": None}
                    for c in CELLS],
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


def test_explorer_renders_and_runs_in_jupyterlab(lab, tmp_path):
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=chromium, headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"],
        )
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        shot = tmp_path / "explorer.png"
        try:
            page.goto(lab, timeout=60_000)
            page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=60_000)
            page.wait_for_selector(".jp-StatusBar-TextItem:has-text('Idle')", timeout=90_000)
            page.click(".jp-NotebookPanel .jp-Cell .jp-InputArea-editor >> nth=0")
            page.keyboard.press("Escape")  # command mode, the notebook focused
            page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
            page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
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
