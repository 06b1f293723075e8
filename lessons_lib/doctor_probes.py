"""The readiness check's probes: one question each about this machine.

`python -m lessons_lib.doctor` turns each answer into a verdict and a fix. The tests replace the
probes (on `lessons_lib.doctor`, which re-exports them, or here for the ones other probes call)
to simulate each missing piece. Split from doctor.py (issue 21).

Nothing here imports torch (or a module that does) at import time: the doctor must run where torch
is missing or fails to load. The probes that need torch import it inside, and the doctor asks them
only after `probe_torch` has answered (tests/test_imports.py holds the rule).
"""
from __future__ import annotations

import importlib.metadata as metadata
import json
import os
import re
import shutil
import subprocess
import sys

# --- probes: one question each about this machine (the tests replace them) ----------------------


def probe_python() -> tuple[int, int, int]:
    return tuple(sys.version_info[:3])


def probe_torch() -> dict:
    """torch's version and build. Raises what `import torch` raises: ModuleNotFoundError when it is not
    installed, another ImportError or an OSError (a CUDA library that fails to load) when it is broken."""
    import torch

    return {"version": torch.__version__, "cuda": torch.version.cuda, "hip": getattr(torch.version, "hip", None)}


def probe_colab() -> bool:
    return "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ


def probe_nvidia_hardware() -> bool:
    """An NVIDIA driver on this machine, whatever torch build is installed."""
    return os.path.exists("/proc/driver/nvidia/version") or shutil.which("nvidia-smi") is not None


def probe_gpu() -> dict | None:
    """The GPU torch sees (device 0), or None."""
    import torch

    from .device import _bf16_hardware
    from .op_costs import tf32_enabled  # reads torch 2.9's fp32_precision: the old getters raise once mixed with it

    if not torch.cuda.is_available():
        return None
    dev = torch.device("cuda", 0)
    props = torch.cuda.get_device_properties(dev)
    return {"name": props.name, "total": int(props.total_memory), "capability": (props.major, props.minor),
            "bf16_hardware": bool(_bf16_hardware(dev)), "tf32_on": tf32_enabled("matmul"),
            "tf32_conv": tf32_enabled("conv")}


def _nvidia_smi_processes() -> list[tuple[int, int]] | None:
    """(pid, MiB) of every compute process nvidia-smi sees on GPU 0, or None without nvidia-smi."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        done = subprocess.run(["nvidia-smi", "-i", "0", "--query-compute-apps=pid,used_memory",
                               "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    rows = [ln.split(",") for ln in done.stdout.strip().splitlines() if ln.strip()]
    return [(int(pid), int(float(mib))) for pid, mib in rows if pid.strip().isdigit()]


def _torch_gpu_processes() -> list[tuple[int, int]] | None:
    """The same list from `torch.cuda.list_gpu_processes` (NVML through pynvml), or None without it."""
    import torch

    try:
        text = torch.cuda.list_gpu_processes(0)
    except Exception:
        return None
    if "process" not in text and "no processes" not in text:  # e.g. "pynvml module not found"
        return None
    return [(int(pid), int(float(mb))) for pid, mb in re.findall(r"process\s+(\d+) uses\s+([0-9.]+) MB", text)]


def probe_gpu_users() -> dict:
    """Who else is on the GPU: processes nvidia-smi sees, and memory in use that this process does not hold.

    Inside a container nvidia-smi often lists no processes of other containers; the free memory
    (`torch.cuda.mem_get_info`) still shows them.
    """
    import torch

    procs = _nvidia_smi_processes()
    if procs is None:
        procs = _torch_gpu_processes()
    others = None if procs is None else [(pid, mib) for pid, mib in procs if pid != os.getpid()]
    free, total = torch.cuda.mem_get_info(0)
    used_by_others = total - free - torch.cuda.memory_reserved(0)
    return {"processes": others, "used_by_others": max(int(used_by_others), 0)}


def probe_widgets() -> dict:
    """The kernel's ipywidgets, the jupyterlab_widgets package it requires, and the lab extension on disk."""
    def version(dist):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None

    wanted = None
    if version("ipywidgets"):
        for req in metadata.requires("ipywidgets") or []:
            m = re.match(r"jupyterlab[_-]widgets\s*([^;]*)", req)
            if m and "extra" not in req:
                wanted = m.group(1).strip()
    extension = None
    try:
        from jupyter_core.paths import jupyter_path

        for base in jupyter_path("labextensions"):
            pkg = os.path.join(base, "@jupyter-widgets", "jupyterlab-manager", "package.json")
            if os.path.exists(pkg):
                with open(pkg) as f:
                    extension = json.load(f).get("version")
                break
    except ImportError:
        pass
    return {"ipywidgets": version("ipywidgets"), "jupyterlab_widgets": version("jupyterlab_widgets"),
            "wanted": wanted, "extension": extension, "jupyterlab": version("jupyterlab")}


def probe_compiler(quick: bool) -> str | None:
    """A C++ compiler for Inductor's CPU code: on PATH (quick), or one that really compiles."""
    if quick:
        from .compiling import _cxx_candidates

        return next((shutil.which(c) for c in _cxx_candidates() if shutil.which(c)), None)
    from .compiling import cxx_compiler

    return cxx_compiler()


def probe_triton() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


_COMPILE_PROBE = """
import time, torch
dev = "{device}"
f = torch.compile(lambda x: (x.sin() * 2 + 1).sum())
t0 = time.perf_counter()
y = f(torch.ones(64, device=dev)).item()
print("seconds", time.perf_counter() - t0, y)
"""


def probe_compile(device: str, timeout: float = 300) -> dict:
    """Compile and run a tiny function with Inductor in a fresh process: its cold time, or the error."""
    try:
        done = subprocess.run([sys.executable, "-c", _COMPILE_PROBE.format(device=device)], capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"seconds": None, "error": f"no answer in {timeout:.0f} s"}
    m = re.search(r"seconds ([0-9.]+)", done.stdout)
    if done.returncode == 0 and m:
        return {"seconds": float(m.group(1)), "error": None}
    lines = [ln for ln in done.stderr.strip().splitlines() if ln.strip()]
    return {"seconds": None, "error": lines[-1][:300] if lines else f"exit status {done.returncode}"}


def probe_disk_free(path: str = ".") -> int:
    """Free bytes on the disk that holds `path` (its nearest existing folder: pip's cache may not exist yet)."""
    path = os.path.abspath(path)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return shutil.disk_usage(path).free


def _pip_cache_dir() -> str | None:
    """Where pip keeps its downloads (pip's own defaults; None when the cache is turned off)."""
    if "PIP_NO_CACHE_DIR" in os.environ:
        return None
    if os.environ.get("PIP_CACHE_DIR"):
        return os.path.expanduser(os.environ["PIP_CACHE_DIR"])
    if sys.platform == "win32":
        return os.path.join(os.environ.get("LOCALAPPDATA", os.path.expanduser("~")), "pip", "Cache")
    if sys.platform == "darwin":
        return os.path.expanduser("~/Library/Caches/pip")
    return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "pip")


def probe_disk_places() -> dict[str, str]:
    """The folders the course writes to: the course (notebooks, your working copy), the Python
    environment (a torch upgrade: 0.75 GB for the CPU build, several GB for CUDA) and pip's cache."""
    from .workspace import course_root

    places = {"the course folder": str(course_root()), "the Python environment": sys.prefix}
    cache = _pip_cache_dir()
    if cache:
        places["pip's cache"] = cache
    return places


def probe_memory_available() -> int:
    from .host import _host_available_bytes

    return _host_available_bytes()


def probe_cpu() -> dict:
    """Cores this process may use and the 1-minute load average (standard library only)."""
    from .host import load_average, usable_cores

    return {"cores": usable_cores(), "load": load_average()}


def probe_threads(fit: bool) -> dict:
    """torch's CPU threads; with `fit`, first setup()'s own check (`device.fit_cpu_threads`: one thread
    when torch's threads are slower than one here, now), whose sentence comes back when it changed them."""
    import torch

    from .device import CPU_THREADS, fit_cpu_threads

    sentence = fit_cpu_threads() if fit else ""
    return {"threads": torch.get_num_threads(), "default": CPU_THREADS, "sentence": sentence}

