"""The readiness check: each missing piece simulated by replacing a probe, never read off this machine.

Under the simulated GPU (`-p tests.simgpu --simulate-gpu=t4`) the GPU tests at the end run the
real GPU probes against the simulated card, with another tenant's memory added to it.
"""
from __future__ import annotations

import contextlib
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lessons_lib import doctor, doctor_probes

ROOT = Path(__file__).resolve().parents[1]
GIB = 2**30
SIMULATED = getattr(torch.cuda, "_course_simulated", None)


PLACES = {"the course folder": "/course", "the Python environment": "/venv", "pip's cache": "/cache/pip"}


@pytest.fixture
def healthy(monkeypatch):
    """A correctly installed CPU laptop, whatever machine runs the test."""
    probes = {
        "probe_python": lambda: (3, 11, 7),
        "probe_torch": lambda: {"version": "2.13.0+cpu", "cuda": None, "hip": None},
        "probe_colab": lambda: False,
        "probe_nvidia_hardware": lambda: False,
        "probe_gpu": lambda: None,
        "probe_widgets": lambda: {"ipywidgets": "8.1.9", "jupyterlab_widgets": "3.0.17", "wanted": "~=3.0.17",
                                  "extension": "5.0.16", "jupyterlab": "4.4.0"},
        "probe_compiler": lambda quick: "/usr/bin/g++",
        "probe_triton": lambda: False,
        "probe_compile": lambda device, timeout=300: {"seconds": 12.5, "error": None},
        "probe_disk_free": lambda path=".": 50 * GIB,
        "probe_disk_places": lambda: dict(PLACES),
        "probe_memory_available": lambda: 16 * GIB,
        "probe_cpu": lambda: {"cores": 8, "load": 0.5},
        "probe_threads": lambda fit: {"threads": 8, "default": 8, "sentence": ""},
    }
    for name, fn in probes.items():
        monkeypatch.setattr(doctor, name, fn)
    return monkeypatch


def _by_name(checks, name):
    found = [c for c in checks if c.name == name]
    assert found, f"no check named {name!r} in {[c.name for c in checks]}"
    return found[0]


def _exit_status(capsys, *args):
    status = doctor.main(list(args))
    return status, capsys.readouterr().out


def test_a_healthy_cpu_machine_is_ready(healthy, capsys):
    status, out = _exit_status(capsys)
    assert status == 0
    assert "FAIL" not in out and "fix:" not in out
    assert "compiled and ran on cpu in 12.5 s" in out
    from lessons_lib.compile_notice import BUSY_LOAD, BUSY_S  # the figure measured at load, not a hope (issue 34)
    assert f"up to {max(BUSY_S.values()):.0f} s on a 2-core machine with {BUSY_LOAD}" in out and "15 s" not in out
    assert "52 s on a student's laptop at load 6-7, reported" in out
    assert out.strip().splitlines()[-1].startswith("Course check: ready")
    assert "no CUDA GPU" in out  # a note, not a problem


def test_no_ipywidgets_blocks_with_a_fix(healthy, capsys):
    healthy.setattr(doctor, "probe_widgets", lambda: {"ipywidgets": None, "jupyterlab_widgets": None, "wanted": None,
                                                      "extension": None, "jupyterlab": "4.4.0"})
    status, out = _exit_status(capsys, "--quick")
    assert status == 1
    assert re.search(r"FAIL\s+widgets: ipywidgets is not installed", out)
    assert 'fix: pip install -U "ipywidgets>=8"' in out
    assert "NOT READY" in out.splitlines()[-1]


def test_missing_widget_extension_blocks_and_names_the_matching_package(healthy, capsys):
    healthy.setattr(doctor, "probe_widgets", lambda: {"ipywidgets": "8.1.9", "jupyterlab_widgets": None,
                                                      "wanted": "~=3.0.17", "extension": None, "jupyterlab": "4.4.0"})
    status, out = _exit_status(capsys, "--quick")
    assert status == 1
    assert "widget extension" in out and "HBox(...)" in out
    assert 'pip install --force-reinstall "jupyterlab_widgets~=3.0.17"' in out


def test_an_extension_that_does_not_match_ipywidgets_blocks(healthy, capsys):
    healthy.setattr(doctor, "probe_widgets", lambda: {"ipywidgets": "8.1.9", "jupyterlab_widgets": "1.1.7",
                                                      "wanted": "~=3.0.17", "extension": "3.1.7", "jupyterlab": "4.4"})
    status, out = _exit_status(capsys, "--quick")
    assert status == 1
    assert "needs jupyterlab_widgets~=3.0.17, found 1.1.7" in out
    assert 'fix: pip install "jupyterlab_widgets~=3.0.17"' in out


def test_an_old_torch_blocks_with_the_upgrade(healthy, capsys):
    healthy.setattr(doctor, "probe_torch", lambda: {"version": "2.5.1+cu121", "cuda": "12.1", "hip": None})
    healthy.setattr(doctor, "probe_nvidia_hardware", lambda: True)  # a GPU machine: no lean-build advice
    status, out = _exit_status(capsys, "--quick")
    assert status == 1
    assert "2.5.1+cu121 (CUDA 12.1 build) is older than the course's 2.9" in out
    assert 'fix: pip install -U "torch>=2.9"' in out


def test_an_old_torch_on_colab_says_how_to_restart(healthy):
    healthy.setattr(doctor, "probe_torch", lambda: {"version": "2.6.0+cu124", "cuda": "12.4", "hip": None})
    healthy.setattr(doctor, "probe_nvidia_hardware", lambda: True)
    check = doctor.check_torch(colab=True)[0]
    assert check.status == doctor.FAIL and "Restart session" in check.fix and "colab.py" in check.fix


def test_a_cuda_build_without_a_gpu_gets_the_lean_install(healthy, capsys):
    healthy.setattr(sys, "platform", "linux")  # the advice is Linux's (pip's default build elsewhere has no CUDA)
    healthy.setattr(doctor, "probe_torch", lambda: {"version": "2.13.0+cu128", "cuda": "12.8", "hip": None})
    status, out = _exit_status(capsys, "--quick")
    assert status == 0  # wasteful, not blocking
    assert "a CUDA build on a machine without an NVIDIA GPU" in out
    assert f"fix: {doctor.LEAN_INSTALL}" in out
    assert "--index-url https://download.pytorch.org/whl/cpu" in doctor.LEAN_INSTALL


def test_a_cpu_build_on_a_gpu_machine_is_flagged(healthy):
    healthy.setattr(doctor, "probe_nvidia_hardware", lambda: True)
    checks = doctor.check_torch(colab=False)
    assert _by_name(checks, "torch build").status == doctor.WARN


def test_no_compiler_warns_with_the_install_command(healthy, capsys):
    healthy.setattr(sys, "platform", "linux")  # Windows' fix is Visual Studio's build tools
    healthy.setattr(doctor, "probe_compiler", lambda quick: None)
    status, out = _exit_status(capsys)
    assert status == 0
    assert re.search(r"warn\s+torch.compile: no working C\+\+ compiler", out)
    assert "apt-get install g++" in out


def test_a_failing_compile_warns_with_its_error(healthy, capsys):
    healthy.setattr(doctor, "probe_compile", lambda device, timeout=300: {"seconds": None,
                                                                          "error": "InductorError: boom"})
    status, out = _exit_status(capsys)
    assert status == 0 and "failed to compile on cpu: InductorError: boom" in out


def test_quick_never_compiles(healthy, capsys):
    def no(*a, **k):
        raise AssertionError("the quick check must not compile")

    healthy.setattr(doctor, "probe_compile", no)
    assert _exit_status(capsys, "--quick")[0] == 0


def test_no_gpu_on_colab_says_how_to_get_one(healthy):
    healthy.setattr(doctor, "probe_colab", lambda: True)
    check = doctor.check_gpu(colab=True)[0]
    assert check.status == doctor.WARN and "Runtime > Change runtime type > T4 GPU" in check.fix
    assert doctor.check_widgets(colab=True)[0].status == doctor.OK  # Colab's widget manager, no extension


T4 = {"name": "Tesla T4", "total": int(14.74 * GIB), "capability": (7, 5), "bf16_hardware": False, "tf32_on": False}


def test_a_gpu_is_described(healthy):
    healthy.setattr(doctor, "probe_gpu", lambda: T4)
    healthy.setattr(doctor, "probe_gpu_users", lambda: {"processes": [], "used_by_others": 0})
    gpu, alone = doctor.check_gpu(colab=False)
    assert gpu.detail == ("Tesla T4, 14.7 GiB, compute capability 7.5, bf16 emulated only (slow; use float16), "
                          "no TF32 (needs compute capability 8.0+)")
    assert alone.status == doctor.OK


def test_tf32_is_described_for_matmuls_and_convolutions_from_compute_capability_8(healthy):
    a100 = dict(T4, name="NVIDIA A100", capability=(8, 0), bf16_hardware=True, tf32_on=False, tf32_conv=True)
    healthy.setattr(doctor, "probe_gpu", lambda: a100)
    healthy.setattr(doctor, "probe_gpu_users", lambda: {"processes": [], "used_by_others": 0})
    assert doctor.check_gpu(colab=False)[0].detail.endswith(
        "TF32 available, off for float32 matmuls (PyTorch's default), on for cuDNN convolutions")


def test_one_other_process_is_one_process(healthy):
    healthy.setattr(doctor, "probe_gpu", lambda: T4)
    healthy.setattr(doctor, "probe_gpu_users", lambda: {"processes": [(4242, 6144)], "used_by_others": 6 * GIB})
    assert "1 other process on this GPU (pid 4242" in doctor.check_gpu(colab=False)[1].detail


def test_another_process_on_the_gpu_warns(healthy):
    healthy.setattr(doctor, "probe_gpu", lambda: T4)
    healthy.setattr(doctor, "probe_gpu_users", lambda: {"processes": [(4242, 6144)], "used_by_others": 6 * GIB})
    busy = doctor.check_gpu(colab=False)[1]
    assert busy.status == doctor.WARN and "pid 4242: 6.0 GiB" in busy.detail and "nvidia-smi" in busy.fix


def test_memory_held_by_an_unseen_tenant_warns(healthy):
    healthy.setattr(doctor, "probe_gpu", lambda: T4)
    healthy.setattr(doctor, "probe_gpu_users", lambda: {"processes": None, "used_by_others": 3 * GIB})
    busy = doctor.check_gpu(colab=False)[1]
    assert busy.status == doctor.WARN and "3.0 GiB" in busy.detail and "MIG" in busy.fix


def test_no_triton_on_a_gpu_warns(healthy):
    healthy.setattr(doctor, "probe_gpu", lambda: T4)
    check = doctor.check_compile(quick=True)
    assert check.status == doctor.WARN and check.fix == "pip install triton"


@pytest.mark.parametrize("free, status", [(GIB // 4, doctor.FAIL), (GIB, doctor.WARN), (10 * GIB, doctor.OK)])
def test_disk(healthy, free, status):
    healthy.setattr(doctor, "probe_disk_free", lambda path=".": free)
    assert doctor.check_disk().status == status


@pytest.mark.parametrize("avail, status", [(GIB // 4, doctor.FAIL), (GIB, doctor.WARN), (8 * GIB, doctor.OK)])
def test_memory(healthy, avail, status):
    healthy.setattr(doctor, "probe_memory_available", lambda: avail)
    assert doctor.check_memory().status == status


def test_an_old_python_blocks(healthy):
    healthy.setattr(doctor, "probe_python", lambda: (3, 9, 18))
    assert doctor.check_python().status == doctor.FAIL


def test_every_problem_comes_with_a_fix(healthy):
    healthy.setattr(doctor, "probe_torch", lambda: {"version": "2.5.1+cu121", "cuda": "12.1", "hip": None})
    healthy.setattr(doctor, "probe_widgets", lambda: {"ipywidgets": None, "jupyterlab_widgets": None, "wanted": None,
                                                      "extension": None, "jupyterlab": None})
    healthy.setattr(doctor, "probe_compiler", lambda quick: None)
    healthy.setattr(doctor, "probe_memory_available", lambda: GIB)
    problems = [c for c in doctor.run_checks(quick=True) if c.status in (doctor.WARN, doctor.FAIL)]
    assert len(problems) >= 4
    assert all(c.fix for c in problems)


def test_the_summary_never_raises(healthy):
    def broken():
        raise RuntimeError("driver exploded")

    healthy.setattr(doctor, "probe_disk_free", lambda path=".": (_ for _ in ()).throw(OSError("no disk")))
    line = doctor.summary()
    assert line.startswith("Course check: could not run (OSError")
    healthy.setattr(doctor, "probe_disk_free", lambda path=".": 50 * GIB)
    healthy.setattr(doctor, "probe_gpu", broken)  # a broken driver reads as no GPU
    assert doctor.summary().startswith("Course check: ready")


def test_setup_prints_the_one_line_summary(healthy, capsys):
    from lessons_lib import setup

    setup()
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1].startswith("Course check: ready") and "python -m lessons_lib.doctor" in lines[-1]


def test_torch_floor_is_pyprojects():
    text = (ROOT / "pyproject.toml").read_text()
    floor = re.search(r'"torch>=([0-9]+)\.([0-9]+)"', text).groups()
    assert tuple(map(int, floor)) == doctor.TORCH_FLOOR


@pytest.mark.own_process
def test_the_command_runs_here_and_its_status_follows_its_verdict():
    """The real probes on this machine: whatever it finds, exit 1 exactly when a line says FAIL."""
    done = subprocess.run([sys.executable, "-m", "lessons_lib.doctor", "--quick"], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert done.stderr == ""
    assert done.stdout.strip().splitlines()[-1].startswith("Course check:")
    assert done.returncode == (1 if re.search(r"^\s+FAIL\s", done.stdout, re.M) else 0)


# --- the real GPU probes, against the simulated GPU (run with -p tests.simgpu --simulate-gpu=t4) ----

needs_simgpu = pytest.mark.skipif(SIMULATED is None, reason="run under -p tests.simgpu --simulate-gpu=t4|h100")


@needs_simgpu
def test_simulated_gpu_is_described_by_the_real_probe(monkeypatch):
    monkeypatch.setattr(doctor_probes, "_nvidia_smi_processes", lambda: None)
    gpu, alone = doctor.check_gpu(colab=False)
    assert gpu.status == doctor.OK and ("T4" in gpu.detail or "H100" in gpu.detail)
    assert ("bf16 in hardware" in gpu.detail) == (SIMULATED == "h100")
    assert alone.status == doctor.OK


@needs_simgpu
def test_simulated_gpu_shared_with_another_tenant_warns(monkeypatch):
    free, total = torch.cuda.mem_get_info(0)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free - 5 * GIB, total))
    monkeypatch.setattr(doctor_probes, "_nvidia_smi_processes", lambda: None)  # a container sees no other process
    busy = doctor.check_gpu(colab=False)[1]
    assert busy.status == doctor.WARN and "5.0 GiB" in busy.detail
    monkeypatch.setattr(doctor_probes, "_nvidia_smi_processes", lambda: [(1, 5120), (99999999, 10)])
    busy = doctor.check_gpu(colab=False)[1]
    assert busy.status == doctor.WARN and "2 other processes on this GPU" in busy.detail


def test_gpu_processes_from_torch_when_there_is_no_nvidia_smi(monkeypatch):
    """torch.cuda.list_gpu_processes' printout (NVML via pynvml) is the fallback; its 'no pynvml' line is not a list."""
    text = "GPU:0\nprocess      31337 uses     5120.000 MB GPU memory\nprocess          7 uses       12.500 MB GPU memory"
    monkeypatch.setattr(torch.cuda, "list_gpu_processes", lambda device=None: text)
    assert doctor._torch_gpu_processes() == [(31337, 5120), (7, 12)]
    monkeypatch.setattr(torch.cuda, "list_gpu_processes", lambda device=None: "GPU:0\nno processes are running")
    assert doctor._torch_gpu_processes() == []
    monkeypatch.setattr(torch.cuda, "list_gpu_processes",
                        lambda device=None: "pynvml module not found, please install nvidia-ml-py")
    assert doctor._torch_gpu_processes() is None


# --- a room without a working torch: the doctor runs on the standard library alone (issue 28) ---------

_HIDE_TORCH = """
import runpy, sys
class Hide:  # `import torch` raises what a missing or broken install raises
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise {error}
sys.meta_path.insert(0, Hide())
{then}
"""
HIDDEN = {
    "missing": """ModuleNotFoundError("No module named 'torch'", name="torch")""",
    "cuda library": "OSError('libcudnn.so.9: cannot open shared object file: No such file or directory')",
    "broken": "ImportError('libtorch_cpu.so: undefined symbol: _ZN3c10')",
}


def _without_torch(error: str, then: str) -> subprocess.CompletedProcess:
    code = _HIDE_TORCH.format(error=HIDDEN[error], then=then)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)


_NO_WIDGET_EXTENSION = ("import lessons_lib.doctor_probes as p\n"  # the H200 machine's image: ipywidgets, no extension
                        "p.probe_widgets = lambda: {'ipywidgets': '8.1.9', 'jupyterlab_widgets': None, "
                        "'wanted': '~=3.0.17', 'extension': None, 'jupyterlab': None}\n")


@pytest.mark.parametrize("error, machine", [*((e, "this one") for e in sorted(HIDDEN)),
                                            ("missing", "without JupyterLab's widget extension")])
def test_the_doctor_runs_where_torch_is_missing_or_fails_to_load(error, machine):
    done = _without_torch(error, (_NO_WIDGET_EXTENSION if machine != "this one" else "") +
                          "sys.argv = ['doctor', '--quick']\n"
                          "runpy.run_module('lessons_lib.doctor', run_name='__main__', alter_sys=True)")
    assert done.stderr == "" and "Traceback" not in done.stdout
    assert done.returncode == 1
    lines = done.stdout.strip().splitlines()
    # The other checks read this machine (its widget extension, disk, memory): they may FAIL too, but not about torch
    fails = [ln for ln in lines if ln.lstrip().startswith("FAIL")]
    fail = [ln for ln in fails if ln.split("FAIL", 1)[1].strip().startswith("torch: ")]
    assert len(fail) == 1, fails
    assert not any("torch" in ln for ln in fails if ln not in fail), fails
    assert ("not installed" in fail[0]) == (error == "missing")
    assert "fails to load (OSError: libcudnn.so.9" in fail[0] if error == "cuda library" else True
    assert lines[lines.index(fail[0]) + 1].strip().startswith("fix: pip ")
    assert any("not checked: they need a torch that loads" in ln for ln in lines)  # not a false "no GPU"
    assert lines[-1].startswith("Course check: NOT READY: torch")  # Python (checked first) is the course's own
    if machine != "this one":
        assert len(fails) == 2 and "widgets: " in fails[1]


@pytest.mark.parametrize("error", ["missing", "cuda library"])
def test_without_torch_a_set_up_cell_gets_the_doctors_sentence(error):
    done = _without_torch(error, "import lessons_lib.doctor, lessons_lib.workspace\n"
                                 "print('torch imported:', 'torch' in sys.modules)\n"
                                 "try:\n    from lessons_lib import setup\n"
                                 "except ImportError as err:\n    print('ImportError:', err)")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    out = done.stdout.splitlines()
    assert out[0] == "torch imported: False"
    assert len(out) == 2 and out[1].startswith("ImportError: This course cannot run here: torch: ")
    assert "Fix: pip " in out[1] and "restart the kernel" in out[1]


@pytest.mark.own_process
def test_import_lessons_lib_imports_no_torch():
    code = "import sys, lessons_lib, lessons_lib.doctor, lessons_lib.workspace; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.stdout.strip() == "False", done.stderr


def test_an_old_torch_is_refused_at_first_use_with_the_doctors_fix(monkeypatch):
    import lessons_lib

    monkeypatch.setattr(torch, "OutOfMemoryError", None, raising=False)
    monkeypatch.delattr(torch, "OutOfMemoryError")
    monkeypatch.delattr(torch.cuda, "OutOfMemoryError", raising=False)
    monkeypatch.setattr(torch, "__version__", "2.5.1+cpu")
    with pytest.raises(ImportError, match=r'torch: 2\.5\.1\+cpu .* older than the course\'s 2\.9\. Fix: pip install -U'):
        lessons_lib._check_torch()


# --- Python too old for the course's torch (issue 28): upgrading torch cannot work there ------------------


def test_python_floor_is_pyprojects():
    text = (ROOT / "pyproject.toml").read_text()
    floor = re.search(r'requires-python\s*=\s*">=([0-9]+)\.([0-9]+)"', text).groups()
    assert tuple(map(int, floor)) == doctor.PYTHON_FLOOR


@pytest.mark.parametrize("torch_probe", ["missing", "old"])
def test_on_python_3_9_the_fix_is_a_newer_python_not_a_torch_upgrade(healthy, capsys, torch_probe):
    def missing():
        raise ModuleNotFoundError("No module named 'torch'", name="torch")

    healthy.setattr(doctor, "probe_python", lambda: (3, 9, 18))
    healthy.setattr(doctor, "probe_torch", missing if torch_probe == "missing" else
                    (lambda: {"version": "2.8.0+cpu", "cuda": None, "hip": None}))
    status, out = _exit_status(capsys, "--quick")
    assert status == 1
    assert "pip install -U" not in out and "requirements.txt   (" not in out
    torch_fix = out.split("torch: ", 1)[1].split("fix: ", 1)[1].splitlines()[0]
    assert torch_fix.startswith("this Python is too old for the course: install Python 3.10+")
    assert "3.9.18 is older than the course's 3.10" in out


def test_the_doctors_own_modules_parse_as_python_3_9():
    """A reader on 3.9 must get the doctor's verdict, not a SyntaxError (ast's check of newer syntax)."""
    import ast

    for name in ("__init__", "doctor", "doctor_probes", "host", "workspace"):
        path = ROOT / "lessons_lib" / f"{name}.py"
        ast.parse(path.read_text(encoding="utf-8"), filename=str(path), feature_version=(3, 9))


# --- disk where the course writes, the CPU's load and threads, and the doctor's own wording (issue 28) ---


def test_disk_is_measured_where_the_course_writes_not_here(monkeypatch):
    asked = []
    monkeypatch.setattr(doctor, "probe_disk_free", lambda path=".": asked.append(path) or 50 * GIB)
    monkeypatch.setenv("PIP_CACHE_DIR", "/somewhere/pip-cache")
    monkeypatch.delenv("PIP_NO_CACHE_DIR", raising=False)  # a machine that turned pip's cache off
    monkeypatch.chdir("/")
    check = doctor.check_disk()
    assert sorted(asked) == sorted([str(ROOT), sys.prefix, "/somewhere/pip-cache"])
    assert check.status == doctor.OK and check.detail == ("50.0 GiB free for the course folder and the Python "
                                                          "environment and pip's cache")


def test_a_full_pip_cache_disk_is_named(healthy):
    free = {"/course": 40 * GIB, "/venv": 40 * GIB, "/cache/pip": GIB}
    healthy.setattr(doctor, "probe_disk_free", lambda path=".": free[path])
    check = doctor.check_disk()
    assert check.status == doctor.WARN
    assert check.detail.startswith("40.0 GiB free for the course folder and the Python environment; 1.0 GiB free "
                                   "for pip's cache: pip's cache is tight")
    assert "/cache/pip" in check.fix and "pip cache purge" in check.fix


def test_disk_free_of_a_folder_not_made_yet_reads_its_parent(tmp_path):
    assert doctor_probes.probe_disk_free(str(tmp_path / "not" / "yet")) > 0


def test_the_pip_cache_follows_pips_settings(monkeypatch):
    monkeypatch.setenv("PIP_CACHE_DIR", "/x/cache")
    monkeypatch.delenv("PIP_NO_CACHE_DIR", raising=False)
    assert doctor_probes._pip_cache_dir() == "/x/cache"
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    assert "pip's cache" not in doctor_probes.probe_disk_places()


def test_a_busy_cpu_warns_with_its_load(healthy, capsys):
    healthy.setattr(doctor, "probe_cpu", lambda: {"cores": 2, "load": 4.2})
    healthy.setattr(doctor, "probe_threads", lambda fit: {"threads": 1, "default": 2, "sentence": "Busy CPU: timing "
                                                          "with 1 thread, not 2 (...)."})
    status, out = _exit_status(capsys, "--quick")
    assert status == 0
    assert re.search(r"warn\s+CPU: 2 cores, load 4.2 \(1 minute\), torch uses 1 thread \(of 2\): busy", out)
    assert "Busy CPU: timing with 1 thread" in out and "fix: close what else runs" in out


def test_the_doctor_runs_setups_thread_check_and_setup_does_not_run_it_twice(healthy, capsys):
    asked = []
    healthy.setattr(doctor, "probe_threads", lambda fit: asked.append(fit) or {"threads": 8, "default": 8,
                                                                                "sentence": ""})
    doctor.main(["--quick"])
    doctor.summary()  # what setup() prints, after setup() has fitted the threads itself
    assert asked == [True, False]
    healthy.setattr(doctor, "probe_gpu", lambda: T4)  # setup() fits no threads on a GPU machine: nor does the doctor
    healthy.setattr(doctor, "probe_gpu_users", lambda: {"processes": [], "used_by_others": 0})
    doctor.main(["--quick"])
    assert asked[-1] is False


def test_the_thread_probe_is_setups_own_check(monkeypatch):
    from lessons_lib import device

    monkeypatch.setattr(device, "fit_cpu_threads", lambda: "the one sentence")
    assert doctor_probes.probe_threads(fit=True)["sentence"] == "the one sentence"
    assert doctor_probes.probe_threads(fit=False)["sentence"] == ""


def test_the_doctor_does_not_send_the_reader_to_itself(healthy, capsys):
    out = _exit_status(capsys, "--quick")[1]
    assert "python -m lessons_lib.doctor" not in out
    healthy.setattr(doctor, "probe_widgets", lambda: {"ipywidgets": None, "jupyterlab_widgets": None, "wanted": None,
                                                      "extension": None, "jupyterlab": "4.4.0"})
    out = _exit_status(capsys, "--quick")[1]
    assert "python -m lessons_lib.doctor" not in out and "Fix the FAIL lines above" in out.splitlines()[-1]
    assert "Details: python -m lessons_lib.doctor" in doctor.summary()  # a notebook's line still points here


# --- TF32: the readers survive torch 2.9's fp32_precision API mixed with the old flags (issue 27) ------------

_MIXED = pytest.mark.skipif(not hasattr(torch.backends.cudnn, "conv"), reason="fp32_precision arrived in torch 2.9")


@contextlib.contextmanager
def _tf32_mixed(matmul: str):
    """The two TF32 APIs mixed, as a program may: the matmul set through the new one apart from the global
    setting, so that `torch.get_float32_matmul_precision()` raises; then left as found."""
    from tests.lesson03.helpers import tf32_restored

    with tf32_restored():
        # from a known start, whatever an earlier test in this process left: the legacy setting "highest", and
        # oneDNN's matmul inheriting the global value (a test that set it left it set: then nothing raised)
        torch.set_float32_matmul_precision("highest")
        torch.backends.fp32_precision = "ieee" if matmul == "tf32" else "tf32"
        torch.backends.mkldnn.matmul.fp32_precision = "none"
        torch.backends.cuda.matmul.fp32_precision = matmul
        torch.backends.cudnn.conv.fp32_precision = "tf32"
        with pytest.raises(RuntimeError):  # the old getters refuse from here on
            torch.get_float32_matmul_precision()
        yield


@_MIXED
@pytest.mark.parametrize("matmul", ["tf32", "ieee"])
def test_the_gpu_probe_reads_tf32_with_the_two_apis_mixed(monkeypatch, matmul):
    from types import SimpleNamespace

    from lessons_lib import device

    props = SimpleNamespace(name="NVIDIA H100", total_memory=80 * GIB, major=9, minor=0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda dev: props)
    monkeypatch.setattr(device, "_bf16_hardware", lambda dev: True)
    with _tf32_mixed(matmul):
        gpu = doctor_probes.probe_gpu()
    assert gpu["tf32_on"] == (matmul == "tf32") and gpu["tf32_conv"] is True


@_MIXED
@pytest.mark.parametrize("matmul", ["tf32", "ieee"])
def test_tf32_note_reads_tf32_with_the_two_apis_mixed(monkeypatch, matmul):
    from lessons_lib import device

    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda dev=None: (9, 0))
    with _tf32_mixed(matmul):
        assert device.tf32_note("cpu").startswith("float32 matmuls on CPU run in full float32")
        note = device.tf32_note("cuda")
    assert note.startswith("TF32 is ON" if matmul == "tf32" else "TF32 is off")
    assert ("fp32_precision='tf32'" in note) == (matmul == "tf32")
