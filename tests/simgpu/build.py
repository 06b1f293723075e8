"""Compile shim.cpp against the installed torch (g++ or c++; a few seconds, cached per torch build)."""
from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "shim.cpp"


class CannotSimulate(RuntimeError):
    """The simulated GPU cannot run here; the message says why and what to do."""


def check_torch() -> None:
    import torch

    if torch.version.cuda is not None or torch.version.hip is not None:
        raise CannotSimulate(
            f"the simulated GPU needs a CPU-only build of torch, and this one ({torch.__version__}) is built "
            "with CUDA/ROCm, whose real kernels would run on the simulated tensors. Use a separate venv with "
            "a CPU build (pip install torch --index-url https://download.pytorch.org/whl/cpu), as .ci/run does.")


def compiler() -> str:
    for name in ("g++", "c++", "clang++"):
        found = shutil.which(name)
        if found:
            return found
    raise CannotSimulate("the simulated GPU needs a C++ compiler (g++) to build its small shim; install one "
                         "(Debian/Ubuntu: apt-get install g++).")


def shim_path() -> Path:
    """The compiled shim for this torch, built if missing."""
    import torch

    check_torch()
    root = Path(torch.__file__).resolve().parent
    tag = hashlib.sha1(f"{torch.__version__}|{root}|{SOURCE.read_bytes()!r}".encode()).hexdigest()[:12]
    out = HERE / "_build" / f"shim-{tag}.so"
    if out.exists():
        return out
    out.parent.mkdir(exist_ok=True)
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    cmd = [compiler(), "-O1", "-shared", "-fPIC", "-std=c++20", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
           f"-I{root / 'include'}", str(SOURCE), "-o", str(out) + ".tmp",
           f"-L{root / 'lib'}", "-lc10", "-ltorch_cpu", f"-Wl,-rpath,{root / 'lib'}"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise CannotSimulate("building the simulated GPU's shim failed:\n" + done.stderr[-2000:])
    Path(str(out) + ".tmp").rename(out)
    return out
