"""`python -m lessons_lib.doctor`: is this machine ready for the course?

Participants run it the day before a workshop; every notebook's set-up cell prints its one-line
summary (`summary(quick=True)`: no compile, no subprocess but nvidia-smi on a GPU machine).
It checks Python, torch (version and build), the GPU (name, memory, compute capability, bf16,
TF32), other processes on the GPU, the JupyterLab widget extension against the kernel's ipywidgets,
torch.compile (a tiny function, timed), the CPU's load and torch's threads, free disk (where the course,
the Python environment and pip's cache live) and memory, and on Colab a GPU runtime.

It runs with nothing but the standard library: torch is imported only inside the probes, after
`probe_torch` has answered, so a missing torch or one that fails to load (an OSError from a CUDA
library) is a finding with its fix, not a traceback (`import lessons_lib` imports no torch either).

Each problem comes with the one command that fixes it. Exit status 1 when something blocks the
course (a FAIL); warnings (a busy GPU, a CUDA build without a GPU, no compiler) do not block.

Every fact about the machine comes from a `probe_*` function, so the tests replace probes to
simulate each missing piece instead of depending on the machine they run on.
"""
from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass

from .doctor_probes import (_COMPILE_PROBE, _nvidia_smi_processes, _torch_gpu_processes,  # noqa: F401  (re-exported)
                            probe_colab, probe_compile, probe_compiler, probe_cpu, probe_disk_free, probe_disk_places,
                            probe_gpu, probe_gpu_users, probe_memory_available, probe_nvidia_hardware, probe_python,
                            probe_threads, probe_torch, probe_triton, probe_widgets)

TORCH_FLOOR = (2, 9)  # pyproject's `torch>=2.9` (tests/test_doctor.py keeps them in step)
PYTHON_FLOOR = (3, 10)  # pyproject's requires-python; torch 2.9 (the floor above) has no wheel for 3.9
PYTHON_FIX = ("this Python is too old for the course: install Python 3.10+, make a fresh virtual environment "
              "with it, then pip install -r requirements.txt")
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
LEAN_INSTALL = f"pip uninstall -y torch && pip install torch --index-url {CPU_INDEX}"
GIB = 2**30
# What a CUDA context of this process may hold on the GPU before we blame someone else.
OWN_CONTEXT_ALLOWANCE = GIB

OK, NOTE, WARN, FAIL = "ok", "note", "warn", "FAIL"


@dataclass
class Check:
    name: str
    status: str  # OK, NOTE (worth knowing), WARN (results or speed suffer), FAIL (blocks the course)
    detail: str
    fix: str | None = None  # one command (or one action) that fixes it

    def line(self) -> str:
        fix = f"\n        fix: {self.fix}" if self.fix else ""
        return f"  {self.status:<4}  {self.name}: {self.detail}{fix}"


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text.split("+")[0])[:3])


# --- checks: a probe's answer turned into a verdict and a fix ---------------------------------------


def _python_too_old() -> bool:
    return tuple(probe_python()[:2]) < PYTHON_FLOOR


def check_python() -> Check:
    v = probe_python()
    text = ".".join(map(str, v))
    if _python_too_old():
        floor = ".".join(map(str, PYTHON_FLOOR))
        return Check("Python", FAIL, f"{text} is older than the course's {floor} (no torch {TORCH_FLOOR[0]}."
                     f"{TORCH_FLOOR[1]}+ exists for it)", PYTHON_FIX)
    return Check("Python", OK, text)


def torch_state() -> tuple[dict | None, BaseException | None]:
    """`probe_torch`'s answer, or what `import torch` raised (asked once; the other torch probes wait on it)."""
    try:
        return probe_torch(), None
    except Exception as err:  # ImportError, OSError (a CUDA library), or whatever a broken install raises
        return None, err


def _torch_broken(err: BaseException) -> Check:
    """torch missing, or installed and failing to load: the finding and its one fix."""
    linux_no_nvidia = sys.platform.startswith("linux") and not probe_nvidia_hardware()
    if isinstance(err, ModuleNotFoundError) and err.name == "torch":
        fix = (f"pip install torch --index-url {CPU_INDEX} && pip install -r requirements.txt   (the CPU build: "
               "this machine has no NVIDIA GPU)" if linux_no_nvidia else "pip install -r requirements.txt")
        return Check("torch", FAIL, "not installed", PYTHON_FIX if _python_too_old() else fix)
    first = (str(err).strip().splitlines() or [""])[0][:200]
    if isinstance(err, ModuleNotFoundError):  # one of torch's own dependencies is missing
        fix = "pip install torch   (installs what this torch needs; it keeps the torch you have)"
    elif linux_no_nvidia:
        fix = LEAN_INSTALL + "   (a clean install of the CPU build: this machine has no NVIDIA GPU)"
    else:
        fix = ("pip install --force-reinstall torch   (a half-finished install or CUDA libraries of another "
               "version; if it still fails, unset LD_LIBRARY_PATH)")
    return Check("torch", FAIL, f"installed but fails to load ({type(err).__name__}: {first})",
                 PYTHON_FIX if _python_too_old() else fix)


def check_torch(colab: bool, state: tuple[dict | None, BaseException | None] | None = None) -> list[Check]:
    t, err = state or torch_state()
    if err is not None:
        return [_torch_broken(err)]
    floor = ".".join(map(str, TORCH_FLOOR))
    build = f"CUDA {t['cuda']} build" if t["cuda"] else (f"ROCm {t['hip']} build" if t["hip"] else "CPU build")
    if _version_tuple(t["version"])[:2] < TORCH_FLOOR:
        fix = (f'%pip install -U "torch>={floor}" then Runtime > Restart session (or pin an older course '
               "release: lessons_lib/colab.py)" if colab else f'pip install -U "torch>={floor}"')
        if _python_too_old():  # pip would only find the newest torch for this Python, below the floor
            fix = PYTHON_FIX
        checks = [Check("torch", FAIL, f"{t['version']} ({build}) is older than the course's {floor}", fix)]
    else:
        checks = [Check("torch", OK, f"{t['version']} ({build})")]
    gpu_torch_sees = probe_gpu_safe() is not None
    if t["cuda"] and not gpu_torch_sees and not probe_nvidia_hardware() and sys.platform.startswith("linux"):
        checks.append(Check("torch build", WARN, "a CUDA build on a machine without an NVIDIA GPU: about 3 GB "
                            "of NVIDIA libraries that never run (the course runs the same on the CPU build)",
                            LEAN_INSTALL))
    elif not t["cuda"] and not t["hip"] and not gpu_torch_sees and probe_nvidia_hardware():
        checks.append(Check("torch build", WARN, "a CPU build on a machine with an NVIDIA GPU: the GPU sits idle",
                            "pip uninstall -y torch && pip install torch  # Linux: pip's default is the CUDA build"))
    return checks


def torch_problem(err: BaseException | None = None) -> str:
    """Why torch cannot serve the course, with its fix, in one sentence: what `lessons_lib` raises (as an
    ImportError) on first use of anything that needs torch, where the doctor would say FAIL."""
    bad = [c for c in (check_python(), *check_torch(probe_colab())) if c.status == FAIL]
    if not bad:  # a version past the floor that still lacks an API the toolkit stands on
        floor = ".".join(map(str, TORCH_FLOOR))
        return (f"This course needs PyTorch {floor} or newer, and this torch lacks an API it uses "
                f"({type(err).__name__ if err else 'no OutOfMemoryError'}). Fix: pip install -U \"torch>={floor}\", "
                "then restart the kernel.")
    return (f"This course cannot run here: {bad[0].name}: {bad[0].detail}. Fix: {bad[0].fix}; then restart the "
            "kernel (python -m lessons_lib.doctor checks the rest).")


def probe_gpu_safe() -> dict | None:
    try:
        return probe_gpu()
    except Exception:  # a broken driver reads as no GPU; check_gpu says so
        return None


def check_gpu(colab: bool) -> list[Check]:
    gpu = probe_gpu_safe()
    if gpu is None:
        if colab:
            return [Check("GPU", WARN, "this Colab runtime has no GPU: timings are CPU timings",
                          "Runtime > Change runtime type > T4 GPU, then run the notebook again")]
        return [Check("GPU", NOTE, "no CUDA GPU: the course runs on the CPU, and GPU-only parts show recorded "
                      "results")]
    major, minor = gpu["capability"]
    bf16 = "bf16 in hardware" if gpu["bf16_hardware"] else "bf16 emulated only (slow; use float16)"
    if major < 8:
        tf32 = "no TF32 (needs compute capability 8.0+)"
    else:  # PyTorch's defaults: off for cuBLAS matmuls, on for cuDNN convolutions
        tf32 = ("TF32 on for float32 matmuls" if gpu["tf32_on"] else "TF32 available, off for float32 matmuls "
                "(PyTorch's default)")
        if "tf32_conv" in gpu:
            tf32 += f", {'on' if gpu['tf32_conv'] else 'off'} for cuDNN convolutions"
    checks = [Check("GPU", OK, f"{gpu['name']}, {gpu['total'] / GIB:.1f} GiB, compute capability {major}.{minor}, "
                    f"{bf16}, {tf32}")]
    try:
        users = probe_gpu_users()
    except Exception as err:  # an unreadable GPU state is worth a line, not a crash
        return checks + [Check("GPU to yourself", NOTE, f"could not tell ({type(err).__name__})")]
    procs = users["processes"]
    if procs:
        who = ", ".join(f"pid {pid}: {mib / 1024:.1f} GiB" for pid, mib in procs[:3])
        checks.append(Check("GPU to yourself", WARN, f"{_plural(len(procs), 'other process', 'es')} on this GPU "
                            f"({who}): every timing in the course will be wrong while they run",
                            "stop them (`nvidia-smi` lists them; `kill <pid>` if they are yours) or ask for a GPU "
                            "of your own"))
    elif users["used_by_others"] > OWN_CONTEXT_ALLOWANCE:
        checks.append(Check("GPU to yourself", WARN, f"{users['used_by_others'] / GIB:.1f} GiB of this GPU's memory "
                            "is held by something else (another kernel, user or container): timings will be wrong",
                            "close your other notebooks' kernels (Kernel > Shut Down All Kernels), or ask the room's "
                            "admin for a GPU (or a MIG slice) of your own"))
    else:
        checks.append(Check("GPU to yourself", OK, "no other process seen on it"))
    return checks


def check_widgets(colab: bool) -> list[Check]:
    if colab:
        return [Check("widgets", OK, "Colab's own widget manager (setup() enables it)")]
    w = probe_widgets()
    if not w["ipywidgets"]:
        return [Check("widgets", FAIL, "ipywidgets is not installed: the explorers cannot draw",
                      'pip install -U "ipywidgets>=8"')]
    if _version_tuple(w["ipywidgets"]) < (7, 6):
        return [Check("widgets", FAIL, f"ipywidgets {w['ipywidgets']} is older than the course's 7.6",
                      'pip install -U "ipywidgets>=8"')]
    spec = w["wanted"] or ""
    pin = f'"jupyterlab_widgets{spec}"' if spec else "jupyterlab_widgets"
    restart = " then restart JupyterLab and reload the page"
    if not w["jupyterlab_widgets"] or not w["extension"]:
        return [Check("widgets", FAIL, f"ipywidgets {w['ipywidgets']}, but JupyterLab's widget extension "
                      "(jupyterlab_widgets) is missing here: explorers show as text like `HBox(...)`. (If JupyterLab "
                      "runs from another environment, install it there.)", f"pip install --force-reinstall {pin};"
                      + restart)]
    if spec and not _satisfies(w["jupyterlab_widgets"], spec):
        return [Check("widgets", FAIL, f"ipywidgets {w['ipywidgets']} needs jupyterlab_widgets{spec}, found "
                      f"{w['jupyterlab_widgets']}: explorers fail with 'Failed to load model class'",
                      f"pip install {pin};" + restart)]
    checks = [Check("widgets", OK, f"ipywidgets {w['ipywidgets']}, jupyterlab_widgets {w['jupyterlab_widgets']} "
                    f"(lab extension {w['extension']})")]
    if not w["jupyterlab"]:
        checks.append(Check("JupyterLab", WARN, "not installed in this environment (fine if you use another "
                            "front end that renders ipywidgets)", 'pip install "jupyterlab>=4"'))
    return checks


def _satisfies(version: str, spec: str) -> bool:
    try:
        from packaging.specifiers import SpecifierSet

        return SpecifierSet(spec).contains(version, prereleases=True)
    except Exception:  # no `packaging` or an odd spec: compare the major version of `~=`/`==` pins only
        m = re.search(r"[~=]=\s*(\d+)", spec)
        return not m or _version_tuple(version)[:1] == (int(m.group(1)),)


def check_compile(quick: bool) -> Check:
    gpu = probe_gpu_safe() is not None
    device = "cuda" if gpu else "cpu"
    if gpu and not probe_triton():
        return Check("torch.compile", WARN, "Triton is missing: Inductor cannot write GPU kernels (compile cells "
                     "show recorded results)", "pip install triton")
    if not gpu and probe_compiler(quick) is None:
        fix = ("install the Visual Studio C++ build tools" if sys.platform == "win32" else
               "sudo apt-get install g++   (conda: conda install -c conda-forge gxx; macOS: xcode-select --install)")
        return Check("torch.compile", WARN, "no working C++ compiler: Inductor cannot compile for the CPU "
                     "(compile cells show recorded results)", fix)
    if quick:
        return Check("torch.compile", OK, f"{'Triton' if gpu else 'a C++ compiler'} is here (not timed in the "
                     "quick check)")
    result = probe_compile(device)
    if result["error"]:
        return Check("torch.compile", WARN, f"a tiny function failed to compile on {device}: {result['error']}",
                     "python -m lessons_lib.doctor --verbose-compile   # shows Inductor's full error")
    from .compile_notice import BUSY_LOAD, BUSY_S, LAPTOP

    return Check("torch.compile", OK, f"a tiny function compiled and ran on {device} in {result['seconds']:.1f} s "
                 f"(cold; a lesson's one compile on a CPU took up to {max(BUSY_S.values()):.0f} s on a 2-core "
                 f"machine with {BUSY_LOAD}, and {LAPTOP[0]:.0f} s on a student's laptop at {LAPTOP[1]}, reported)")


def _room(name: str, have: int, text: str, fix: str, fail: str, warn: str) -> Check:
    """FAIL under half a GiB, WARN under 2 GiB, else OK: the one rule for disk and memory."""
    if have < GIB // 2:
        return Check(name, FAIL, text + fail, fix)
    if have < 2 * GIB:
        return Check(name, WARN, text + warn, fix)
    return Check(name, OK, text)


def check_disk() -> Check:
    """Free space where the course writes: its folder (notebooks, your working copy), the Python environment
    (a torch upgrade) and pip's cache (the download), not wherever the command happens to run."""
    places = probe_disk_places()
    free = {label: probe_disk_free(path) for label, path in places.items()}
    same_disk: dict[int, list[str]] = {}  # equal free bytes read at once: one disk (and true either way)
    for label, n in free.items():
        same_disk.setdefault(n, []).append(label)
    text = "; ".join(f"{n / GIB:.1f} GiB free for {' and '.join(labels)}"
                     for n, labels in sorted(same_disk.items(), reverse=True))
    worst = min(free, key=free.get)
    return _room("disk", free[worst], text,
                 f"free some space on the disk that holds {places[worst]} (`pip cache purge` empties pip's "
                 "download cache)", f": {worst} has no room (notebooks cannot save, pip cannot install)",
                 f": {worst} is tight for a torch upgrade")


def _plural(n: int, word: str, ending: str = "s") -> str:
    return f"{n} {word}{'' if n == 1 else ending}"


def check_cpu(fit: bool, torch_ok: bool = True) -> Check:
    """The CPU's load and torch's threads; with `fit`, setup()'s own thread check runs first (one source
    of truth: `device.fit_cpu_threads`), as it does in every notebook on a machine without a GPU."""
    cpu = probe_cpu()
    cores, load = cpu["cores"], cpu["load"]
    parts = [_plural(cores, "core")] + ([f"load {load:.1f} (1 minute)"] if load is not None else [])
    sentence = ""
    if torch_ok:
        t = probe_threads(fit)
        sentence = t["sentence"]
        parts.append(f"torch uses {_plural(t['threads'], 'thread')}"
                     + (f" (of {t['default']})" if t["threads"] != t["default"] else ""))
    text = ", ".join(parts)
    if load is not None and load >= cores:
        return Check("CPU", WARN, f"{text}: busy, other programs hold the cores; timings are noisy and comparisons "
                     f"say 'not decided on this run' more often{'. ' + sentence if sentence else ''}",
                     "close what else runs (`top` lists it), then rerun the timing cells")
    if sentence:
        return Check("CPU", NOTE, f"{text}. {sentence}")
    return Check("CPU", OK, text)


def check_memory() -> Check:
    avail = probe_memory_available()
    return _room("memory", avail, f"{avail / GIB:.1f} GiB available",
                 "close other programs (browsers tabs and other notebooks' kernels first)",
                 ": lessons will be killed for lack of memory", ": explorers will refuse the larger shapes")


def run_checks(quick: bool = False, fit_threads: bool = True) -> list[Check]:
    """Every check. `fit_threads`: run setup()'s thread check first (setup() itself has just run it)."""
    colab = probe_colab()
    state = torch_state()
    checks = [check_python(), *check_torch(colab, state)]
    if state[1] is None:
        gpu = probe_gpu_safe() is not None
        checks += [*check_gpu(colab), *check_widgets(colab), check_cpu(fit_threads and not gpu), check_compile(quick)]
    else:  # every GPU and compile probe needs torch: say so once, not a false "no GPU"
        checks += [*check_widgets(colab), check_cpu(False, torch_ok=False),
                   Check("GPU, torch.compile", NOTE, "not checked: they need a torch that loads (fix that first, "
                         "then run this again)")]
    return checks + [check_disk(), check_memory()]


def summary_line(checks: list[Check], in_doctor: bool = False) -> str:
    """The verdict in one line. A notebook's points to the doctor; the doctor's own points to its lines above."""
    fails = [c for c in checks if c.status == FAIL]
    warns = [c for c in checks if c.status == WARN]
    if fails:
        first = fails[0]
        more = f" (+{len(fails) - 1} more)" if len(fails) > 1 else ""
        tail = ("Fix the FAIL lines above, first to last, then run this again." if in_doctor else
                "Details: python -m lessons_lib.doctor")
        head = first.detail.split(": ")[0]
        head = head.split(" (")[0] if head.count("(") > head.count(")") else head  # no half a parenthesis
        return f"Course check: NOT READY: {first.name}: {head}{more}. Fix: {first.fix}. {tail}"
    n_ok, n_note = sum(c.status == OK for c in checks), sum(c.status == NOTE for c in checks)
    counts = ", ".join(text for n, text in ((n_ok, f"{n_ok} ok"), (len(warns), _plural(len(warns), "warning")),
                                             (n_note, _plural(n_note, "note"))) if n)
    flagged = ", ".join(c.name for c in checks if c.status in (WARN, NOTE))
    tail = (" Each warn line above says what suffers and its fix." if warns else "") if in_doctor else \
        " Details and fixes: python -m lessons_lib.doctor"
    return f"Course check: ready ({counts}{': ' + flagged if flagged else ''}).{tail}"


def summary(quick: bool = True, fit_threads: bool = False) -> str:
    """The one line every set-up cell prints (after setup() fitted the threads itself). Never raises: a
    broken probe is itself a line."""
    try:
        return summary_line(run_checks(quick=quick, fit_threads=fit_threads))
    except Exception as err:  # the summary must never stop a notebook
        return f"Course check: could not run ({type(err).__name__}: {err}); try python -m lessons_lib.doctor"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lessons_lib.doctor", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="skip the timed compile (what setup() runs)")
    parser.add_argument("--verbose-compile", action="store_true", help="compile the tiny function here, with "
                        "Inductor's full error")
    args = parser.parse_args(argv)
    if args.verbose_compile:
        if torch_state()[1] is not None:
            print(_torch_broken(torch_state()[1]).line())
            return 1
        exec(_COMPILE_PROBE.format(device="cuda" if probe_gpu_safe() else "cpu"), {})
        return 0
    print("Is this machine ready for 'PyTorch GPU performance pitfalls'?")
    if not args.quick:
        print("(timing a tiny torch.compile: up to a minute on a busy CPU)")
    checks = run_checks(quick=args.quick)
    for c in checks:
        print(c.line())
    print(summary_line(checks, in_doctor=True))
    return 1 if any(c.status == FAIL for c in checks) else 0


if __name__ == "__main__":
    sys.exit(main())
