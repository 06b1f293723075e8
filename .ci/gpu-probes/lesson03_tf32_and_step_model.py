"""GPU facts behind lesson 03's TF32 handling, its step model and its claim's sweep (< 15 s on an H100; prints, never
raises).

1. The torch 2.9+ TF32 API alone (no old flag) works in cuBLAS and cuDNN calls (old ATen paths checked that the
   two APIs agree): the course sets torch.backends.cudnn.conv.fp32_precision alone in L.conv_tf32_check.
2. The grouped Conv1d's error against float64 with cuDNN's TF32 on and off (the H200 gave 4.35e-04 with it on).
3. The model behind the step claim (step_model.py): FIRST the microbenchmarks (the batched GEMM at the channels-first
   forward's shape, a copy, and step_model.predict: every GEMM shape of the steps alone and a copy), THEN the steps,
   each against its prediction (this GPU's microbenchmarks) and against the datasheet model (the H200's
   efficiencies, 28% and 73%, from the 2026-11-26 run's GEMM and copy: step_model.GEMM_EFFICIENCY and
   MEMORY_EFFICIENCY), measured / predicted for each.
4. The Conv1d's training step with cuDNN's TF32 on and off (is the thread's gap a TF32 artefact?).
5. What sizes the claim's sweep (test_gpu_auto_is_never_decided_slower_than_the_forum_variants_on_a_sweep): each
   forum variant's training step at its three group sizes, and how long auto's tuning of each shape takes.
"""
import sys
import time

import torch
from _probe import cuda_ms, require_cuda  # .ci/gpu-probes/_probe.py (the probe's own folder is on sys.path)

require_cuda()


def main():
    from lessons_lib import roofline
    from lessons_lib.grading import rel_error
    from lessons_lib.lesson03_grouped_linear import evidence, lessons, variants

    t0 = time.perf_counter()
    name = torch.cuda.get_device_name()
    print(f"device: {name}, capability {torch.cuda.get_device_capability()}, torch {torch.__version__}")
    print(roofline.tf32_settings())
    conv = torch.backends.cudnn.conv
    matmul = torch.backends.cuda.matmul
    # 1. the new API alone
    for what, owner, value, call in (
            ("matmul", matmul, "tf32", lambda: torch.randn(64, 64, device="cuda") @ torch.randn(64, 64, device="cuda")),
            ("conv", conv, "ieee", lambda: torch.nn.functional.conv1d(
                torch.randn(2, 8, 5, device="cuda", requires_grad=True),
                torch.randn(8, 4, 1, device="cuda", requires_grad=True), groups=2).sum().backward())):
        before = owner.fp32_precision
        try:
            owner.fp32_precision = value
            call()
            torch.cuda.synchronize()
            print(f"1. {what}.fp32_precision = {value!r} alone: the call ran")
        except Exception as err:  # the fact to learn
            print(f"1. {what}.fp32_precision = {value!r} alone: {type(err).__name__}: {str(err)[:160]}")
        finally:
            owner.fp32_precision = before
    # 2. the Conv1d's error
    print("2.", evidence.conv_tf32_check("cuda").replace("\n", "\n   "))
    # 3. the step model's efficiencies, at the thread's shape
    p = lessons.THREAD_SHAPE
    x, w, b, g = lessons.make_train_inputs(p, "cuda", torch.float32)
    N, G, K, L = p["batch"], p["groups"], p["group_size"], p["length"]
    x4 = x.detach().view(N, G, K, L)
    gemm_ms = cuda_ms(lambda: torch.matmul(w.detach(), x4))
    peaks = roofline.datasheet(name, torch.float32, tf32=False)
    flops = 2 * N * G * K * K * L
    print(f"3. one batched GEMM (batch {N * G} of {K}x{K} @ {K}x{L}): {gemm_ms:.3f} ms, {flops / gemm_ms / 1e9:.1f} "
          f"TFLOP/s" + (f" = {flops / gemm_ms * 1e3 / peaks.flops:.0%} of the datasheet fp32 peak" if peaks else ""))
    dst = torch.empty_like(x)
    copy_ms = cuda_ms(lambda: dst.copy_(x.detach()))
    gbs = 2 * x.numel() * 4 / copy_ms / 1e6
    print(f"   a copy of {x.numel() * 4 / 2**20:.0f} MiB: {copy_ms:.3f} ms, {gbs:.0f} GB/s"
          + (f" = {gbs * 1e9 / peaks.bandwidth:.0%} of the datasheet bandwidth" if peaks else ""))
    from lessons_lib.lesson03_grouped_linear import step_model as SM

    pred = SM.predict("cuda")  # every GEMM shape alone and a copy, before any step is timed
    print("   GEMMs alone: " + ", ".join(f"{s}: {t * 1e3:.3f} ms" for s, t in pred["gemms"].items())
          + f"; copy {pred['bandwidth'] / 1e9:.0f} GB/s")
    step = lambda fn: cuda_ms(lambda: lessons.train_step(fn, x, w, b, g), reps=10)  # noqa: E731
    sheet = SM.step_model(peaks) if peaks else {}
    for vname, fn in (("matmul, channels first", variants.matmul_channels), ("bmm, rows first", variants.bmm_rows),
                      ("einsum", variants.einsum)):
        ms = step(fn)
        p = pred["steps"][vname] * 1e3
        model = sheet[vname]["model"] * 1e3 if sheet else float("nan")
        print(f"   training step, {vname}: {ms:.3f} ms; predicted here {p:.3f} ms (measured / predicted {ms / p:.2f}, "
              f"claim band 1/1.3-1.3); datasheet model {model:.3f} ms ({ms / model:.2f}; efficiencies "
              f"{SM.GEMM_EFFICIENCY:.0%} and {SM.MEMORY_EFFICIENCY:.0%})")
    # 4. the Conv1d's step with TF32 on and off
    before = conv.fp32_precision
    try:
        for value in ("tf32", "ieee"):
            conv.fp32_precision = value
            print(f"4. grouped Conv1d training step, conv.fp32_precision = {value!r}: "
                  f"{step(variants.grouped_conv1d):.2f} ms")
    finally:
        conv.fp32_precision = before
    del x, w, b, g, x4, dst
    # 5. the claim's sweep: each forum variant's step, and auto's tuning, at each of its sizes
    from lessons_lib import grouped_linear as GL
    from lessons_lib.lesson03_grouped_linear import crossover
    from lessons_lib.lesson03_grouped_linear.lessons import TRAIN_LESSON
    for k in crossover.CLAIM_SIZES:
        p = {**lessons.THREAD_SHAPE, "group_size": k}
        x, w, b, g = lessons.make_train_inputs(p, "cuda", torch.float32)
        steps = {n: cuda_ms(lambda fn=TRAIN_LESSON.variant(n).fn: lessons.train_step(fn, x, w, b, g), reps=5)
                 for n in crossover.FORUM_VARIANTS}
        t1 = time.perf_counter()
        GL.tune(x, w, b, dim=1, training=True)
        tune_s = time.perf_counter() - t1
        print(f"5. group size {k}: " + ", ".join(f"{n} {ms:.2f} ms" for n, ms in steps.items())
              + f"; auto's tuning {tune_s:.2f} s")
        del x, w, b, g
    print(f"probe took {time.perf_counter() - t0:.1f} s")


try:
    main()
except Exception as err:  # a probe reports; it never fails the run
    print(f"probe stopped: {type(err).__name__}: {err}")
sys.exit(0)
