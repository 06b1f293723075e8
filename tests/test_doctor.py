"""The readiness check: each missing piece simulated by replacing a probe, never read off this machine.

Under the simulated GPU (`-p tests.simgpu --simulate-gpu=t4`) the GPU tests at the end run the
real GPU probes against the simulated card, with another tenant's memory added to it.
"""
from __future__ import annotations

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
        "probe_memory_available": lambda: 16 * GIB,
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
    assert busy.status == doctor.WARN and "2 other process(es)" in busy.detail


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
