"""Issue 32 §4: `python -m lessons_lib.diagnose` on files nobody here wrote: any file name (io.py, types.py and
inspect.py shadow the standard library's modules), one line and exit 2 when it cannot run, a terminal that cannot
print the report's marks, and nothing of the reader's written."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import lessons_lib

ROOT = str(Path(lessons_lib.__file__).resolve().parents[1])
STEP = """
    import torch
    def step(x=torch.randn(8, 8)):
        return (x @ x).sum().item()
    """


def _cli(folder: Path, name: str, source: str, *args, env=None):
    (folder / name).write_text(textwrap.dedent(source), encoding="utf-8")
    return subprocess.run([sys.executable, "-m", "lessons_lib.diagnose", *args], cwd=folder, capture_output=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": ROOT, **(env or {})})


@pytest.mark.parametrize("name", ["io.py", "types.py", "inspect.py"])
@pytest.mark.own_process
def test_a_file_named_like_a_standard_module_loads_under_a_private_name(tmp_path, name):
    done = _cli(tmp_path, name, STEP, f"{name}:step")
    out = done.stdout.decode()
    assert done.returncode == 1 and done.stderr.decode() == "" and f"at {name}:4: return (x @ x).sum().item()" in out


@pytest.mark.parametrize("source, words", [
    ("def step(:\n    pass\n", "mystep.py line 1: syntax error"),
    ("import a_module_nobody_installed\n", "mystep.py at line 1: ModuleNotFoundError: No module named "
                                          "'a_module_nobody_installed'"),
    ("import torch\ndef step(x): return x\ndef example_inputs():\n    return 1 / 0\n",
     "example_inputs() at line 4 raised ZeroDivisionError: division by zero."),
    ("import torch\ndef step(x):\n    return x.cuda(\n", "mystep.py line 3: syntax error"),
    ("def step(x):\n    yield x\ndef example_inputs():\n    return (1,)\n", "is a generator function"),
], ids=["syntax error", "import error", "example_inputs raises", "unclosed", "generator step"])
@pytest.mark.own_process
def test_what_cannot_run_is_one_line_and_exit_2(tmp_path, source, words):
    done = _cli(tmp_path, "mystep.py", source, "mystep.py:step")
    err, out = done.stderr.decode(), done.stdout.decode()
    assert done.returncode == 2, (out, err)
    assert words in err + out and (err + out).strip().count("\n") == 0, err + out


@pytest.mark.own_process
def test_a_step_that_raises_its_own_error_prints_its_traceback_and_exits_2(tmp_path):
    done = _cli(tmp_path, "mystep.py", """
        import torch
        def step(x=torch.randn(3)):
            raise RuntimeError("my own bug")
        """, "mystep.py:step")
    err = done.stderr.decode()
    assert done.returncode == 2 and "mystep.py\", line 4, in step" in err and "RuntimeError: my own bug" in err
    assert "collect.py" not in err and err.rstrip().endswith("the step raised this itself (above), so nothing was "
                                                             "diagnosed.")


@pytest.mark.own_process
def test_a_terminal_that_cannot_print_the_marks_gets_plain_text(tmp_path):
    ascii_only = _cli(tmp_path, "mystep.py", STEP, "mystep.py:step", env={"PYTHONIOENCODING": "ascii"})
    assert ascii_only.returncode == 1 and ascii_only.stderr.decode() == "", ascii_only.stderr.decode()
    text = ascii_only.stdout.decode("ascii")  # strict: every byte is ASCII
    assert text.startswith("x 1 pitfall found") and "lesson 06, S1 Keep data on the GPU" in text
    c_locale = _cli(tmp_path, "mystep.py", STEP, "mystep.py:step", env={"LANG": "C", "LC_ALL": "C",
                                                                      "PYTHONIOENCODING": ""})
    assert c_locale.returncode == 1 and c_locale.stderr.decode() == "", c_locale.stderr.decode()


def test_a_stream_without_an_encoding_keeps_the_marks(tmp_path, capsys):
    """main() printing into a StringIO (workshop/kit_outputs.py quotes the report that way): it has no encoding and
    holds any text, so the report is the one a UTF-8 terminal shows, not the plain-ASCII fallback."""
    import contextlib
    import io

    from lessons_lib.diagnose.__main__ import main

    (tmp_path / "mystep.py").write_text(textwrap.dedent(STEP), encoding="utf-8")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main([f"{tmp_path / 'mystep.py'}:step"])
    assert rc == 1 and out.getvalue().startswith("✗ 1 pitfall found") and "§1 Keep data on the GPU" in out.getvalue()


@pytest.mark.own_process
def test_loading_a_script_writes_nothing_and_a_loop_at_import_is_stopped(tmp_path):
    done = _cli(tmp_path, "mystep.py", """
        import torch
        torch.save({}, "written_at_import.pt")
        def step(x=torch.randn(4)):
            torch.save(x, "written_by_the_step.pt")
            return x.sum()
        """, "mystep.py:step")
    assert done.returncode == 0 and not list(tmp_path.glob("*.pt"))
    assert "written_by_the_step.pt" in done.stdout.decode()
    stuck = _cli(tmp_path, "loops.py", "while True:\n    pass\n", "loops.py:step",
                 env={"LESSONS_LIB_SANDBOX_SECONDS": "3"})
    assert stuck.returncode == 2 and "loops.py did not finish loading" in stuck.stderr.decode()
    assert "while True:" in stuck.stderr.decode()
