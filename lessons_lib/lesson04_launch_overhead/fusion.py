"""What fusion's gain is made of: the bytes bound from the traces, the allocator (reused buffers, page
faults per call) and threads, in paired rounds; and the recorded files' account of it."""
from __future__ import annotations

import dataclasses

import torch

from .. import claim_table, noise, results, timing
from .. import device as _device
from ..display import count
from ..timing import fmt_time
from .variants import pseudo_linear, pseudo_linear_reused
from .lessons import LESSON, LESSON_KEY, _shape, compiled_work, make_inputs


def fusion_bytes(params: dict) -> tuple[int, int]:
    """(eager PseudoLinear's bytes, one fused kernel's bytes) from their traces on meta: the bytes bound
    on what fusion can save is their ratio, about 2·layers (each op reads and writes the activation;
    the fused kernel reads x once and writes once)."""
    eager = LESSON.work(params)["PseudoLinear"].bytes
    return eager, compiled_work(params)["compiled"].bytes


def _minor_faults() -> int:
    try:
        import resource
    except ImportError:  # Windows: no getrusage
        return -1
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def faults_per_call(fn, *args, calls: int = 3) -> float | None:
    """Minor page faults this process takes per call of fn (getrusage; warm calls only). None where
    getrusage is missing. On a GPU the device's caching allocator reuses its blocks: this counts the
    host side only."""
    fn(*args)
    before = _minor_faults()
    if before < 0:
        return None
    for _ in range(calls):
        fn(*args)
    return (_minor_faults() - before) / calls


@dataclasses.dataclass
class FusionCauses:
    """Eager PseudoLinear (new outputs), eager into reused buffers, and the compiled (fused) function,
    timed in paired rounds with this machine's threads and with one thread; page faults per call;
    the bytes bound from the traces."""

    params: dict
    device: str
    bytes_eager: int
    bytes_fused: int
    faults: dict[str, float | None]
    threads: int
    many: noise.Comparison  # with `threads` threads
    one: noise.Comparison | None  # with one thread (CPU only)

    @property
    def bound(self) -> float:
        return self.bytes_eager / self.bytes_fused

    def __str__(self) -> str:
        f = self.faults
        lines = [f"at {_shape(self.params)} on {self.device.upper()}:",
                 f"bytes: eager PseudoLinear moves {_device.fmt_bytes(self.bytes_eager)}, one fused kernel "
                 f"{_device.fmt_bytes(self.bytes_fused)}: fusion can save at most {self.bound:.1f}× of the traffic "
                 "(the bytes bound; traced, the same on every machine)."]
        many = "GPU" if self.device == "cuda" else count(self.threads, "thread")
        fresh, reused, fused = self.many.names
        pairs = [(fresh, reused), (reused, fused)]  # the allocator's share, and fusion alone: what the lines below say
        for label, cmp in ((many, self.many), ("1 thread", self.one)):
            if cmp is not None:
                lines.append(f"with {label}:\n" + claim_table.of(cmp, pairs))
        lines.append("minor page faults per call: " + "; ".join(f"{n} " + ("-" if f.get(n) is None else f"{f[n]:,.0f}")
                                                               for n in self.many.names))
        parts = [claim_table.say(self.many.ratio(fresh, reused), "{x}", tie="no difference (within 5%)") + f" ({many})"]
        if self.one:
            parts.append(claim_table.say(self.one.ratio(fresh, reused), "{x}", tie="no difference (within 5%)")
                         + " (1 thread)")
        lines.append("allocator: eager with new outputs over eager into reused buffers, " + "; ".join(parts) + ".")
        if self.one:  # two comparisons run one after the other, not paired: the two medians and their spreads
            th = noise.from_timings(self.many.timing(reused), self.one.timing(reused))
            lines.append("threads: " + claim_table.say(th,
                "eager into reused buffers takes {x} as long with " + count(self.threads, "thread") + " as with one "
                f"({2 * self.params['layers']} parallel regions a call, each waiting for every thread; the ratio of "
                "the two medians above).",
                tie=f"eager into reused buffers takes the same time with {count(self.threads, 'thread')} as with one."))
        ref = self.one or self.many
        r = ref.ratio(reused, fused)
        lines.append(f"fusion alone (compiled over eager into reused buffers{', 1 thread' if self.one else ''}): "
                     + claim_table.say(r, "{x} faster", tie="no faster (within 5%)")
                     + (f", against the bytes bound of {self.bound:.1f}×." if r.decided else "."))
        return "\n".join(lines)


def fusion_causes(params: dict, device=None, compiled=None, max_time: float = 5.0,
                  min_run_time: float = 0.02) -> FusionCauses:
    """Take fusion's measured gain apart. `compiled`: the compiled PseudoLinear (CompiledRun's
    `compiled.fn`), reused so no second compile happens."""
    dev = timing.timing_device(device)
    full = LESSON.check(params, dev, torch.float32)
    if compiled is None:
        raise ValueError("Pass the compiled function (compile_and_compare(...).compiled.fn).")
    x, W, w, b = make_inputs(full, dev, torch.float32)
    t, y = torch.empty_like(x), torch.empty_like(x)
    fns = {"eager, new outputs": lambda: pseudo_linear(x, W, w, b),
           "eager, reused out= buffers": lambda: pseudo_linear_reused(x, W, w, b, t, y),
           "compiled (one fused kernel)": lambda: compiled(x, W, w, b)}
    faults = {n: faults_per_call(fn) if dev.type == "cpu" else None for n, fn in fns.items()}
    pairs = [(a, b_) for a, b_ in zip(list(fns), list(fns)[1:])]
    many = noise.compare(fns, pairs=pairs, min_run_time=min_run_time, max_time=max_time, device=dev)
    one = None
    threads = torch.get_num_threads()
    if dev.type == "cpu" and threads > 1:
        torch.set_num_threads(1)
        try:
            one = noise.compare(fns, pairs=pairs, min_run_time=min_run_time, max_time=max_time, device=dev)
        finally:
            torch.set_num_threads(threads)
    eager_b, fused_b = fusion_bytes(full)
    return FusionCauses(full, dev.type, eager_b, fused_b, faults, threads, many, one)


def recorded_fusion() -> str:
    """Fusion taken apart at the recorded memory-bound shape, from each measured file (not re-measured)."""
    lines = []
    for rec in results.for_lesson(LESSON_KEY, kinds="measured"):
        c = (rec.lessons[LESSON_KEY] or {}).get("compiled") or {}
        if "fusion" not in c:
            continue
        faults = c.get("faults_per_call") or {}
        one = c.get("medians_1_thread") or c.get("medians") or {}
        lines.append(f"{rec.label()} ({rec.conditions(LESSON_KEY)}), at {_shape(c['params'])} "
                     f"({c['rounds']} paired rounds, 1 thread):")
        lines += [f"  {n}: {fmt_time(t)}" + (f", {faults[n]:,.0f} minor page faults a call" if faults.get(n)
                                              is not None else "") for n, t in one.items()]
        f, a = c["fusion"], c["allocator"]
        lines.append(f"  allocator: new outputs over reused buffers {a['median']:.2f}×; fusion alone (compiled over "
                     f"reused buffers) {f['median']:.2f}× against the bytes bound {c['bytes_bound']:.1f}×"
                     + ("" if f["decided"] else " (not decided when recorded)"))
    return "\n".join(lines) or "No measured file here records fusion's causes: run `python -m lessons_lib.record`."
