"""Issue 32 §4, in a real kernel: a finding in a notebook cell names the cell as the reader sees it, "cell [2],
line 3" (IPython compiles a cell under a file name like 309528591.py; its compiler maps that name to the cell's
execution count, which is what its own tracebacks print as "Cell In[2], line 3")."""
import pytest

jupyter_client = pytest.importorskip("jupyter_client")


def _run(kc, code: str) -> str:
    out = []

    def keep(msg):
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])
        elif msg["msg_type"] == "error":
            out.append("\n".join(msg["content"]["traceback"]))

    reply = kc.execute_interactive(code, timeout=240, output_hook=keep)
    assert reply["content"]["status"] == "ok", "".join(out)
    return "".join(out)


@pytest.mark.slow
def test_a_finding_names_the_cell_by_its_execution_count_in_a_real_kernel():
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name="python3", extra_arguments=[], cwd=None)
    try:
        _run(kc, "import torch, lessons_lib")
        _run(kc, "def step(x):\n    y = x * 2\n    return y.sum().item()\n")  # cell [2]
        _run(kc, "x = 1")  # cell [3]: another cell between them
        shown = _run(kc, "r = lessons_lib.diagnose(step, torch.randn(4))\n"
                         "print(r.of('host sync')[0].where.place)\nprint(r)")
        assert shown.splitlines()[0] == "cell [2], line 3"
        assert "at cell [2], line 3: return y.sum().item()" in shown
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
