"""What every GPU claim test prints at run time: its bar's kind, its model's prediction, the measurement and the
model's error (DESIGN.md, "Predict, then measure"). The table of all claims: .ci/gpu-runs/CLAIMS.md.

Kinds of bar:
- "prediction": from a model whose constants were measured apart from the run under test (other microbenchmarks,
  in this process before the measurement or by a probe), with a stated margin;
- "regression": a bar taken from a measured run (refitted after a result): it guards against getting worse, it
  predicts nothing;
- "reported": a figure from the forum thread the lesson reproduces;
- "count": a fact the trace, the profiler or the allocator counts (kernels, bytes, syncs, a checker's verdict), no
  timing model;
- "ordering": one time above another, as the mechanism implies, with no model of by how much;
- "tolerance": an allowance stated with its reason (a tie between near-equal strategies), no model.

The line goes out as a warning, so pytest's warnings summary shows it for passing tests too (the GPU validation
runs pytest with -v and without -s).
"""
import warnings

KINDS = ("prediction", "regression", "reported", "count", "ordering", "tolerance")


class ClaimReport(UserWarning):
    """A GPU claim's model against its measurement (not a problem: a record for the run's log)."""


def ratio_words(measured: float, predicted: float) -> str:
    """"measured / predicted 0.92 (the model 8% high)": the model's error in words."""
    r = measured / predicted
    side = "high" if r < 1 else "low"
    return f"measured / predicted {r:.2f} (the model {abs(1 / r - 1):.0%} {side})"


def datasheet_gpu() -> str:
    """The datasheet name (roofline.DATASHEET) of this CUDA GPU, "H100" where the course has none."""
    import torch

    from lessons_lib import roofline

    name = torch.cuda.get_device_name().lower()
    return next((g for g in sorted(roofline.DATASHEET, key=len, reverse=True) if g.lower() in name), "H100")


def report(claim: str, kind: str, text: str) -> str:
    """Emit one claim's line, `[kind] claim: text`, as a ClaimReport warning, and return it."""
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r}: one of {', '.join(KINDS)}.")
    line = f"[{kind} bar] {claim}: {text}"
    warnings.warn(ClaimReport(line), stacklevel=2)
    return line
