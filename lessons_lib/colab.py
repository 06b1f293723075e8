"""Where the course lives, for Colab: the badge, the notebook metadata and the set-up cell.

One place to change if the course is published elsewhere: COURSE_REPO and BRANCH. The format
test (tests/test_notebook_format.py) keeps every notebook in step with this module, and
`python -m tests.test_notebook_format --fix notebooks/*.ipynb notebooks/solutions/*.ipynb`
rewrites badge, metadata and set-up cell from it.

On Colab the set-up cell installs the library from GitHub with pip. Colab already has torch,
matplotlib, tqdm and ipywidgets 7.x; the library accepts those (torch >= the course's floor,
ipywidgets >= 7.6), so pip installs only the library and reinstalls nothing that is loaded
already, and no runtime restart is needed.
"""
from __future__ import annotations

COURSE_REPO = "pytorch-gpu-pitfalls/course"
BRANCH = "main"
BADGE_IMAGE = "https://colab.research.google.com/assets/colab-badge.svg"


def colab_url(path: str) -> str:
    """The Colab address of a notebook, from its path in the repository (e.g. notebooks/01_x.ipynb)."""
    return f"https://colab.research.google.com/github/{COURSE_REPO}/blob/{BRANCH}/{path}"


def badge_markdown(path: str) -> str:
    return f"[![Open In Colab]({BADGE_IMAGE})]({colab_url(path)})"


def install_spec() -> str:
    return f"lessons-lib @ git+https://github.com/{COURSE_REPO}@{BRANCH}"


METADATA = {
    "accelerator": "GPU",
    "colab": {"gpuType": "T4", "provenance": []},
    "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
    "language_info": {"name": "python"},
}


def setup_cell_source() -> str:
    """The first code cell of every notebook."""
    return f'''# NBVAL_IGNORE_OUTPUT
import sys
if "google.colab" in sys.modules:  # Colab: install the course library (Colab's own torch is kept)
    %pip install -q "{install_spec()}"
try:
    from lessons_lib import setup
except ImportError:
    raise SystemExit("The course library `lessons_lib` is not installed. On Colab the line above installs it "
                     "from GitHub (the runtime needs internet access); elsewhere run "
                     "`pip install -r requirements.txt` in the course folder, then restart the kernel.")
device = setup()'''
