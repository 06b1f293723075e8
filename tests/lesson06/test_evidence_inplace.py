"""Lesson 06, claim 4 (evidence_inplace.py): what in place saves, and how it goes wrong."""

from lessons_lib.lesson06_data_movement import evidence_inplace


def test_in_place_saves_the_allocation_not_the_bytes():
    lines = evidence_inplace.inplace_traces(1 << 20).splitlines()[2:]
    alloc = {ln.split("  ")[0]: ln for ln in lines}
    assert "4.0 MiB" in alloc["a + b"] and "0 B" in alloc["a.add_(b)"] and "0 B" in alloc["torch.add(a, b, out=buf)"]
    assert all("12.0 MiB" in ln for ln in lines)  # the same bytes read and written by all three


def test_autograd_refuses_in_place_on_a_saved_output():
    msg = evidence_inplace.version_counter_error()
    assert "0 -> 1" in msg and "modified by an inplace operation" in msg


def test_in_place_on_an_expanded_view_is_refused():
    assert "more than one element" in evidence_inplace.expanded_write_error()


def test_in_place_normalise_overwrites_the_callers_data():
    assert "overwritten: True" in evidence_inplace.aliasing_demo()


def test_inplace_timings_plumbing(one_thread):
    t = evidence_inplace.inplace_timings("cpu", n=1 << 12, min_run_time=0.01)
    assert list(t) == ["a + b (new output)", "torch.add(a, b, out=buf)", "a.add_(b) (in place)"]


def test_inplace_cause_pairs_the_right_calls_and_reads_only_decided_ratios(one_thread):
    cmp, said = evidence_inplace.inplace_cause("cpu", n=1 << 12, max_time=0.5)
    assert cmp.names == ["a + b (new output)", "a.add_(b)", "torch.add(a, b, out=a)", "torch.add(a, b, out=buf)",
                         "buf.copy_(a)"]
    assert len(said.splitlines()) == 5 and "paired rounds" in said.splitlines()[0]
    reading = evidence_inplace.inplace_reading(cmp)
    decided = cmp.ratio("torch.add(a, b, out=buf)", "torch.add(a, b, out=a)").decided and \
        cmp.ratio("buf.copy_(a)", "a.add_(b)").decided
    assert ("not decided" in reading) == (not decided)
