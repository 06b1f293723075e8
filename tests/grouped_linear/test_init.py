"""GroupedLinear's package (__init__.py): every name the course uses as `GL.<name>` or imports from it resolves."""
import re
import subprocess
from pathlib import Path

import lessons_lib.grouped_linear as GL

ROOT = Path(__file__).parents[2]


def test_every_name_the_course_uses_resolves():
    uses = subprocess.run(["git", "grep", "-hoE", r"\bGL\.[A-Za-z_]\w*", "--", "*.py", "*.ipynb"], cwd=ROOT,
                          capture_output=True, text=True).stdout
    imported = subprocess.run(["git", "grep", "-hoE", r"from lessons_lib\.grouped_linear import \w+", "--", "*.py", "*.ipynb"],
                              cwd=ROOT, capture_output=True, text=True).stdout
    names = set(re.findall(r"GL\.(\w+)", uses)) | set(re.findall(r"import (\w+)", imported))
    assert names, "found no uses: is this a git checkout?"
    assert not sorted(n for n in names if not hasattr(GL, n))
    assert all(hasattr(GL, n) for n in GL.__all__)
