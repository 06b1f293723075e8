"""The roofline (roofline.py): datasheet peaks, the measured per-op overhead, TF32 rates, the floor."""
import pytest
import torch
import torch.nn.functional as F

from lessons_lib import roofline

MiB = 2**20


def _meta(*shapes, grad=False):
    return tuple(torch.empty(*s, device="meta", requires_grad=grad) for s in shapes)


# --- roofline ------------------------------------------------------------------------------
def test_t4_has_no_bf16_figure():
    assert roofline.datasheet("Tesla T4", torch.bfloat16) is None


def test_h100_has_a_bf16_figure():
    assert roofline.datasheet("NVIDIA H100 80GB HBM3", torch.bfloat16).flops == pytest.approx(989e12)


def test_datasheet_float32_uses_tf32_only_when_asked():
    assert roofline.datasheet("NVIDIA A100-SXM4-40GB", torch.float32, tf32=False).flops == pytest.approx(19.5e12)
    assert roofline.datasheet("NVIDIA A100-SXM4-40GB", torch.float32, tf32=True).flops == pytest.approx(156e12)


def test_datasheet_launch_says_whose_host_it_was_measured_on():
    p = roofline.datasheet("Tesla T4", torch.float32)
    assert p.launch == roofline.ASSUMED_LAUNCH["T4"] > 0
    assert "the H200 host's" in p.source  # measured there; on a T4's host an assumption


def test_overhead_is_measured_and_positive_on_cpu():
    assert 1e-8 < roofline.overhead("cpu") < 1e-2


def test_cpu_peaks_have_a_real_launch_term():
    p = roofline.measure_peaks("cpu")
    assert p.launch == roofline.overhead("cpu")
    assert p.launch > 0


def test_peaks_cache_is_keyed_on_float32_matmul_precision(monkeypatch):
    calls = []
    monkeypatch.setattr(roofline, "_measured", {})
    monkeypatch.setattr(roofline, "_overheads", {})  # the stub's 1 ms must not stay cached as the overhead
    monkeypatch.setattr(roofline.timing, "measure",
                        lambda *a, **k: calls.append(k.get("label")) or roofline.timing.Timing(
                            k.get("label", ""), 1e-3, 0.0, [1e-3], 1, "stub", "cpu"))
    monkeypatch.setattr(roofline, "_copy_elements", lambda dev: 1024)
    before = torch.get_float32_matmul_precision()
    try:
        roofline.measure_peaks("cpu")
        n = calls.count("peak matmul")
        torch.set_float32_matmul_precision("high")
        roofline.measure_peaks("cpu")
        assert calls.count("peak matmul") == n + 1
    finally:
        torch.set_float32_matmul_precision(before)


def test_many_small_ops_are_overhead_bound_with_a_per_op_cost():
    p = roofline.Peaks(flops=1e11, bandwidth=2e10, launch=5e-6, source="test")
    work = roofline.Work(flops=10**6, bytes=10**3, launches=40)
    assert p.regime(work) == "overhead"
    assert p.floor(work) == pytest.approx(40 * 5e-6)
    assert p.terms(work)["overhead"] == pytest.approx(2e-4)


def test_work_bytes_on_a_gpu_leave_out_the_fused_bias_copy():
    x, w, bias = _meta((64, 32), (16, 32), (16,))
    work = roofline.Work.of(F.linear, x, w, bias)
    assert work.lt_bias_bytes == 2 * 64 * 16 * 4
    assert work.bytes_on(False) == work.bytes
    assert work.bytes_on(True) == work.bytes - work.lt_bias_bytes
    cpu = roofline.Peaks(1e9, 1e9, 1e-6, "cpu")
    gpu = roofline.Peaks(1e9, 1e9, 1e-6, "gpu", cuda=True)
    assert gpu.terms(work)["memory"] < cpu.terms(work)["memory"]


@pytest.mark.parametrize("gpu, tf32", [("A100", 156e12), ("NVIDIA A100-SXM4-80GB", 156e12),
                                       ("H100", 494.5e12), ("NVIDIA H100 PCIe", 378e12)])
def test_tf32_peaks_from_datasheets(gpu, tf32):
    p = roofline.datasheet(gpu, torch.float32, tf32=False)
    assert p.tf32 == pytest.approx(tf32)
    assert p.flops < p.tf32  # fp32 on CUDA cores stays the float32 peak while TF32 is off
    assert p.cuda
    assert roofline.datasheet(gpu, torch.float16).tf32 is None  # TF32 is a float32 mode


def test_tf32_work_runs_at_the_tf32_rate_and_needs_the_hardware():
    work = roofline.Work(flops=10**12, bytes=0, launches=0, tf32_flops=10**12)
    a100 = roofline.datasheet("A100", torch.float32, tf32=False)
    assert a100.terms(work)["compute"] == pytest.approx(1 / 156)
    t4 = roofline.datasheet("T4", torch.float32, tf32=False)
    assert t4.tf32 is None and t4.terms(work)["compute"] == pytest.approx(1 / 8.1)  # no TF32 on Turing
    assert roofline.measure_peaks("cpu").tf32 is None  # a CPU has no TF32


def test_model_gpus_include_the_a100():
    assert roofline.MODEL_GPUS == ("T4", "A100", "H100")
    assert all(roofline.datasheet(g, torch.float32) for g in roofline.MODEL_GPUS)


@pytest.mark.parametrize("gpu", ["T4", "A100", "H100"])
@pytest.mark.parametrize("tf32", [False, True])
def test_speedup_asymptote_is_bandwidth_over_twice_the_flop_rate_per_byte(gpu, tf32):
    p = roofline.datasheet(gpu, torch.float32, tf32=tf32)
    f = p.tf32 if tf32 and p.tf32 else p.flops
    s = roofline.speedup_asymptote(p, 4, tf32=tf32)
    assert s == pytest.approx(p.bandwidth / (2 * 4 * f))
    # the model's ratio of floors at a large width: Linear 2·B·N² / F against PseudoLinear 4·B·N·e / BW
    B, N = 32768, 16384
    assert (2 * B * N * N / f) / (4 * B * N * 4 / p.bandwidth) == pytest.approx(s * N)



# --- moved from test_toolkit.py -------------------------------------------------------------
# --- roofline ------------------------------------------------------------------------------
def test_floor_is_the_largest_bound():
    p = roofline.Peaks(flops=1e12, bandwidth=1e9, launch=1e-5, source="test")
    assert p.floor(roofline.Work(flops=10**12, bytes=10, launches=1)) == pytest.approx(1.0)
    assert p.regime(roofline.Work(flops=1, bytes=10**9 * 3, launches=1)) == "memory"
    assert p.regime(roofline.Work(flops=1, bytes=1, launches=1000)) == "overhead"


def test_datasheet_prefers_the_longest_match():
    assert "PCIe" in roofline.datasheet("NVIDIA H100 PCIe", torch.float32).source
    assert roofline.datasheet("Tesla T4", torch.float16).flops == pytest.approx(65e12)
    assert roofline.datasheet("Some CPU", torch.float32) is None


def test_measured_cpu_peaks_are_plausible():
    p = roofline.measure_peaks("cpu")
    assert 1e8 < p.flops < 1e14
    assert 1e8 < p.bandwidth < 1e13
    assert p.launch > 0  # per-op overhead, CPU too


# --- kernels one after another; TF32 settings per backend ------------------------------------------------
def _gemm_then_add():
    x, w = _meta((512, 256), (256, 256))

    def f(x, w):
        return (x @ w) + 1.0

    from lessons_lib.trace import trace_ops
    return trace_ops(f, x, w)


def test_serial_time_sums_each_ops_own_floor_and_never_undercuts_the_roofline():
    t = _gemm_then_add()
    p = roofline.Peaks(flops=1e12, bandwidth=1e11, launch=1e-9, source="test", cuda=True)
    per_op = [p.op_terms(op) for op in t.compute_ops]
    assert [list(d) for d in per_op] == [["compute", "memory"]] * 2
    serial = p.serial_time(t)
    assert serial == pytest.approx(sum(max(d.values()) for d in per_op))
    whole = p.terms(roofline.Work.from_trace(t))
    assert serial >= max(whole["compute"], whole["memory"]) - 1e-15
    no_overlap = p.serial_time(t, 0.5, 0.8, overlap=False)
    assert no_overlap == pytest.approx(sum(d["compute"] / 0.5 + d["memory"] / 0.8 for d in per_op))
    slow_host = roofline.Peaks(flops=1e12, bandwidth=1e11, launch=1.0, source="test")
    assert slow_host.serial_time(t) == pytest.approx(2.0)  # two ops, each 1 s to issue
    with pytest.raises(ValueError, match="fractions"):
        p.serial_time(t, compute_efficiency=0)


def _restored():
    from tests.lesson03.helpers import tf32_restored
    return tf32_restored()


def test_tf32_settings_name_both_apis_and_follow_the_flags():
    text = roofline.tf32_settings()
    for name in ("torch.backends.cuda.matmul.allow_tf32", "torch.backends.cudnn.allow_tf32"):
        assert name in text
    with _restored():
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = True
        lines = roofline.tf32_settings().splitlines()
        assert lines[2].endswith("TF32") and lines[3].endswith("full float32")


def test_peaks_cache_key_survives_the_two_tf32_apis_mixed():
    """After `torch.backends.cuda.matmul.fp32_precision = "tf32"` (torch 2.9+) the old
    `torch.get_float32_matmul_precision()` raises; the peaks' cache key must not."""
    if not hasattr(torch.backends.cudnn, "conv"):
        pytest.skip("torch.backends.*.fp32_precision arrived in torch 2.9")
    with _restored():
        before = roofline._precision_key()
        torch.backends.cuda.matmul.fp32_precision = "tf32"
        with pytest.raises(RuntimeError):
            torch.get_float32_matmul_precision()
        assert roofline._precision_key() != before


@pytest.mark.parametrize("mixed", [None, "conv", "matmul"])
def test_the_tf32_peak_measurement_leaves_the_settings_as_found(monkeypatch, mixed):
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("needs a CUDA GPU with TF32 (or -p tests.simgpu --simulate-gpu=h100)")
    if mixed and not hasattr(torch.backends.cudnn, "conv"):
        pytest.skip("torch.backends.*.fp32_precision arrived in torch 2.9")
    seen = []
    monkeypatch.setattr(roofline.timing, "measure", lambda *a, **k: seen.append(roofline.trace.tf32_enabled("matmul"))
                        or roofline.timing.Timing("stub", 1e-3, 0.0, [1e-3], 1, "stub", "cuda"))
    with _restored():
        if mixed == "conv":
            torch.backends.cudnn.conv.fp32_precision = "ieee"  # cuDNN's APIs mixed: the old matmul getter still works
        elif mixed == "matmul":
            torch.backends.cuda.matmul.fp32_precision = "tf32"  # the old matmul getter raises from here on
        before = roofline.tf32_settings()
        assert roofline._measure_tf32(torch.device("cuda"), 64) == pytest.approx(2 * 64**3 / 1e-3)
        assert seen == [True] and roofline.tf32_settings() == before
