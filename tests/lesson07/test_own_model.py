"""The last exercise (issue 29): lessons_lib.diagnose on nn.MultiheadAttention, predicted, fixed, rerun until clean;
and the hunt's end, diagnose on both loops, printed the same on every machine."""
from lessons_lib import diagnose
from lessons_lib.lesson07_capstone import explore as X
from lessons_lib.lesson07_capstone import own_model as O
from lessons_lib.lesson07_capstone import tools as T


def fixed_attention(mha, x):
    out, _ = mha(x, x, x, need_weights=False)
    return out


def test_the_starter_keeps_the_attention_matrix_and_need_weights_false_is_clean():
    """At attention_inputs()' size the starter's one finding is the reader's pitfall: at 64 features and 32 tokens
    diagnose also priced the step launch-bound on a T4, the fixed one too (a size artifact of the exercise)."""
    starter = O.check_attention_step(O.attention_starter)
    assert starter.checks[0][1] and not starter.passed
    assert starter.checks[1][2] == "lesson 02 attention matrix kept for backward at: out, _weights = mha(x, x, x)"
    assert O.check_attention_step(fixed_attention).passed


def test_a_fix_that_changes_the_numbers_or_returns_nothing_fails():
    def detached(mha, x):
        return fixed_attention(mha, x).detach()

    def doubled(mha, x):
        return 2 * fixed_attention(mha, x)

    assert not O.check_attention_step(detached).passed
    assert "relative error" in str(O.check_attention_step(doubled))
    assert "returned NoneType" in str(O.check_attention_step(lambda mha, x: None))
    assert not O.check_attention_step("step").passed


def test_the_printed_report_names_no_file():
    text = O.diagnosis_lines(diagnose(O.attention_starter, *O.attention_inputs()))
    assert text.startswith("✗ lesson 02, attention matrix kept for backward — at: out, _weights = mha(x, x, x)")
    assert ".py" not in text and "need_weights=False" in text
    assert O.diagnosis_lines(diagnose(fixed_attention, *O.attention_inputs())).startswith("✓ no pitfall found")


def test_the_hunts_end_diagnose_on_both_loops_as_the_findings_table_runs_them():
    """The fixed loop's one finding is its launches (at the CPU's small shape a T4's floor is still set by them:
    §6's CUDA graph); the original has every pitfall, but no for-loop optimizer: SGD's default is foreach on
    CUDA, which diagnose prices."""
    small = dict(C=32, H=4, E=4, T=6, batch=8)
    reports = T.diagnosed(dims=small)
    assert [f.kind for f in reports["fixed"].findings] == ["launch-bound step"]
    kinds = {f.kind for f in reports["original"].findings}
    assert {"broadcast matmul", "GEMMs in a Python loop", "elementwise chain", "host sync", "cat in a loop",
            "row-by-row gather", "attention matrix kept for backward", "launch-bound step"} <= kinds
    assert "for-loop optimizer" not in kinds
    table = str(T.diagnosis_table(reports["original"]))
    assert "qkv_broadcast(): return xh @ wq" in table and ".py" not in table
    fixed = str(T.diagnosis_table(reports["fixed"]))
    assert "launch-bound step" in fixed and "kernel launches a step" in fixed and ".py" not in fixed


def test_recorded_shapes_say_where_each_file_was_recorded():
    text = X.recorded_shapes()
    for line in text.splitlines():
        assert ": at C=" in line and ("model" in line or "measured" in line)
