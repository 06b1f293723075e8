"""Lesson 04 (launch overhead, fusion and the three regimes, forum seed 003): look inside: GEMMs, launches, bytes,
per-op overhead, the regime classifier, GPU-only evidence, the achieved rate (evidence.py)."""
import pytest
import torch

from lessons_lib import roofline, trace
from lessons_lib.lesson04_launch_overhead import evidence, explore, lessons, variants
from .helpers import DEVICES, TINY


# --- look inside: traces on meta ---------------------------------------------------------------------
def test_linear_runs_one_schoolbook_gemm_per_layer():
    t = lessons.LESSON.traces(lessons.THREAD_SHAPE)["Linear"]
    assert [(op.name, op.gemm) for op in t.gemms] == [("addmm", (1, 32768, 160, 160))] * 4
    assert t.flops == 4 * 2 * 32768 * 160 * 160
    assert "addmm: (32768 × 160) @ (160 × 160), 1,677,721,600 FLOPs" in evidence.gemm_evidence()


@pytest.mark.parametrize("name, per_layer", [("PseudoLinear", 2), ("addcmul", 1), ("Linear", 1)])
def test_launches_per_layer(name, per_layer):
    work = lessons.LESSON.work({"width": 160, "batch": 256, "layers": 4})
    assert work[name].launches == 4 * per_layer


def test_pseudolinear_moves_twice_the_bytes_of_addcmul():
    work = lessons.LESSON.work({"width": 160, "batch": 256, "layers": 4})
    act = 256 * 160 * 4
    assert work["PseudoLinear"].bytes >= 4 * 4 * act  # mul and add each read and write an activation
    assert work["addcmul"].bytes < 0.6 * work["PseudoLinear"].bytes


def test_work_comparison_says_pseudolinear_saves_flops_not_bytes():
    text = evidence.work_comparison(lessons.THREAD_SHAPE)
    assert "PseudoLinear: 0.00 GFLOP" in text
    assert "fewer bytes than" not in text
    cpu, gpu = text.splitlines()[1:3]
    assert "about as many bytes as Linear (1.00×)" in cpu  # addmm's bias copy is real on a CPU
    assert "more bytes than Linear (2.00×)" in gpu  # cuBLASLt's epilogue: no copy on CUDA


def test_linear_moves_half_of_pseudolinears_bytes_on_a_gpu_and_as_many_on_a_cpu():
    w = lessons.LESSON.work(lessons.THREAD_SHAPE)
    lin, pseudo = w["Linear"], w["PseudoLinear"]
    B, N, layers, e = 32768, 160, 4, 4
    assert lin.lt_bias_bytes == layers * 2 * B * N * e  # the bias copy: written, then read back
    assert pseudo.lt_bias_bytes == 0
    assert pseudo.bytes_on(True) / lin.bytes_on(True) == pytest.approx(2.0, rel=0.01)
    assert pseudo.bytes_on(False) / lin.bytes_on(False) == pytest.approx(1.0, rel=0.01)
    # a GPU's peaks apply it: Linear's memory term on a datasheet GPU counts no copy
    pk = roofline.datasheet("T4", torch.float32, tf32=False)
    assert pk.cuda and pk.terms(lin)["memory"] == pytest.approx(lin.bytes_on(True) / pk.bandwidth)


def test_module_and_functional_linear_are_compared_like_with_like():
    cases = {label: args for label, _fn, args in evidence.overhead_cases(torch.device("cpu"))}
    (row, weight, bias), = [a for label, a in cases.items() if label.startswith("F.linear")]
    assert weight.requires_grad and bias.requires_grad  # as the module's own parameters: autograd records both
    assert isinstance(weight, torch.nn.Parameter) and isinstance(bias, torch.nn.Parameter)


# --- the regime classifier (the toolkit's Peaks.regime) on shapes where it is not in doubt -----------
@pytest.fixture(scope="module")
def cpu_peaks():
    return evidence.peaks("cpu")


def test_peaks_have_a_measured_per_op_overhead_on_cpu(cpu_peaks):
    assert 1e-8 < cpu_peaks.launch < 1e-3


@pytest.mark.parametrize("fn, shapes, regime", [
    (torch.add, [(1,), (1,)], "overhead"),
    (torch.add, [(16 * 2**20,), (16 * 2**20,)], "memory"),  # 64 MiB each
    (torch.mm, [(2048, 2048), (2048, 2048)], "compute"),
])
def test_classifier_verdicts(cpu_peaks, fn, shapes, regime):
    work = roofline.Work.of(fn, *(torch.empty(s, device="meta") for s in shapes))
    assert cpu_peaks.regime(work) == regime
    terms = evidence.regime_terms(work, cpu_peaks)
    assert max(terms, key=terms.get) == regime
    assert max(terms.values()) == pytest.approx(cpu_peaks.floor(work))


def test_regimes_at_the_three_recorded_cpu_shapes():
    # Peaks a 2-core laptop measures when quiet (this machine: 86-100 GFLOP/s, 22-27 GB/s, 1.4 µs an op), not this
    # run's: at load 17 one peak came out 5-10x low even as the fastest of many samples, and the tiny shape's
    # Linear read "compute-" or "memory-bound" (a test must not fail because the machine is busy)
    pk = roofline.Peaks(flops=100e9, bandwidth=25e9, launch=1.4e-6, source="a quiet 2-core CPU")
    tiny, big_elementwise, big_gemm = explore.REGIME_SHAPES["cpu"]
    regimes = {n: {v: pk.regime(w) for v, w in lessons.LESSON.work(p).items()} for n, p in
               (("tiny", tiny), ("elementwise", big_elementwise), ("gemm", big_gemm))}
    assert set(regimes["tiny"].values()) == {"overhead"}, regimes
    assert regimes["elementwise"]["PseudoLinear"] == "memory" and regimes["gemm"]["Linear"] == "compute", regimes
    assert set(evidence.regimes(tiny, "cpu")) == set(regimes["tiny"])  # the lesson's door: this machine's peaks


@pytest.mark.parametrize("device", DEVICES)
def test_peaks_know_whether_the_bias_copy_is_real(device):
    pk = evidence.peaks(device)
    assert pk.cuda == (device == "cuda")
    x, W, w, b = lessons.make_inputs({"width": 8, "batch": 4, "layers": 1}, device, torch.float32)
    t = trace.trace_ops(variants.linear, x, W, w, b)
    (op,) = t.named("addmm")
    if device == "cuda":  # traced on CUDA tensors: cuBLASLt's epilogue, no copy to model
        assert op.inner_copy_bytes == 0 and t.lt_saved_bytes == 0
    else:
        assert op.inner_copy_bytes == 4 * 8 * 4 and op.lt_bias


@pytest.mark.parametrize("device", DEVICES)
def test_gpu_only_evidence_is_none_without_a_gpu_and_present_with_one(device):
    lat, names = evidence.gpu_launch_latency(device, n=5), evidence.gpu_kernels(TINY, device)
    if device == "cpu":
        assert lat is None and names is None
    else:
        assert set(lat) == {"issue (host, s per op)", "event span of one op (GPU, s)"}
        if trace.profiler_sees_cuda():
            assert set(names) == {"Linear", "PseudoLinear", "addcmul"}
        else:  # a CPU-only build (the simulated GPU): no kernel names, and no error
            assert names is None


@pytest.mark.parametrize("device", DEVICES)
def test_rate_summary_on_each_device(device, one_thread):
    run = lessons.LESSON.run({"width": 64, "batch": 64, "layers": 1}, device, variants=["Linear"], min_run_time=0.01)
    text = evidence.rate_summary(run, evidence.peaks(device))
    assert "GFLOP/s counted as 2·batch·width² FLOPs" in text
    if device == "cuda" and roofline.datasheet(torch.cuda.get_device_name(), torch.float32):
        assert "datasheet peak is" in text and "a model, not a measurement" in text
        assert text.count("(") == text.count(")"), text  # the H200 printed "(datasheet (H200: ... GB/s) is"
    assert ("float32 GEMMs in" in text) == (device == "cuda")  # TF32 or not, said where a GPU ran it


def test_regime_table_shows_the_bytes_its_memory_bound_divides(monkeypatch):
    # On the H200 the column said 320.39 MiB for Linear while its memory bound used 160 MiB (cuBLASLt adds the
    # bias in its epilogue): the column is the bytes the bound divides, on a GPU's peaks as on a CPU's.
    p = {"width": 160, "batch": 256, "layers": 4}
    w = lessons.LESSON.work(p)["Linear"]
    assert w.lt_bias_bytes > 0
    for cuda in (False, True):
        pk = roofline.Peaks(1e12, 1e11, 5e-6, "test", cuda=cuda)
        monkeypatch.setattr(evidence, "peaks", lambda device=None, dtype=None, pk=pk: pk)
        row = next(line for line in evidence.regime_table(p, "cpu").splitlines() if line.startswith("Linear"))
        assert row.split()[3] == f"{w.bytes_on(cuda) / 2**20:.2f}" == f"{pk.terms(w)['memory'] * 1e11 / 2**20:.2f}"
