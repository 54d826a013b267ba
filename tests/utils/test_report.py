"""The end of a run's console output: its per-length table, then one line saying whether it
learned."""

from rich.console import Console

from pelab.tasks.copy import CopyTask
from pelab.utils.report import learned_line, print_results
from tests.analysis.records import record

TASK = CopyTask(train_lengths=[1, 16], eval_lengths=[8, 16, 32])


def done(learned, steps=None, lr=None, learned_at=0.99):
    rec = record("rope", "copy", 0, {8: 1.0, 16: 0.986, 32: 0.2}, learned=learned)
    rec["steps_to_learn"] = steps
    rec["config"] |= {"learned_at": learned_at, "trainer": {"max_steps": 3000}}
    if lr is not None:
        rec["config"]["model"] = {"optimizer": {"lr": lr}}
        rec["member_of"] = {"seeds": [0], "learning_rates": [1e-3, lr]}
    return rec


def test_a_run_that_learned_says_at_which_step_on_which_set_and_by_what_criterion():
    line = learned_line(done(True, 1100))
    assert line.startswith(
        "learned at step 1100 on the validation set (exact match >= 99% at every in-distribution"
    )
    # the score below the criterion is the test's, and says so
    assert line.endswith("; test: worst in-distribution length 16: 98.6% exact match")


def test_a_run_that_did_not_learn_says_so_with_its_cap_and_worst_score():
    line = learned_line(done(False))
    assert line.startswith(
        "NOT learned by the cap (trainer.max_steps=3000) on the validation set (criterion: "
        "exact match >= 99% at every in-distribution length)"
    )
    assert line.endswith("; test: worst in-distribution length 16: 98.6% exact match")


def test_a_run_without_a_criterion_says_so():
    line = learned_line(done(None, learned_at=None))
    assert line.startswith("no criterion (learned_at=null): trained 3000 steps")
    assert "test: worst in-distribution length 16: 98.6%" in line


def test_the_console_ends_with_the_table_and_the_learned_line():
    console = Console(record=True, width=120)
    print_results(done(False), TASK, console)
    lines = console.export_text().strip().splitlines()
    assert lines[-1].startswith("NOT learned by the cap")
    assert "extrapolation" in lines[-3]  # the table's last row just above


def test_the_members_of_a_learning_rates_job_have_titles_that_tell_them_apart():
    titles = []
    for lr in (1e-3, 3e-3):
        console = Console(record=True, width=120)
        print_results(done(True, 900, lr=lr), TASK, console)
        titles.append(console.export_text().splitlines()[0])
    assert "lr 0.001" in titles[0] and "lr 0.003" in titles[1]


def test_a_re_evaluation_names_the_encoding_options_it_changed_in_its_title():
    titles = []
    for changed in (["pe.scaling=yarn", "pe.scaling_factor=4", "task.eval_lengths=[8,16]"], []):
        console = Console(record=True, width=160)
        evaluation = done(True, 900) | {"job_type": "eval", "eval_overrides": changed}
        print_results(evaluation, TASK, console)
        text = console.export_text()  # the title wraps at the table's width
        titles.append(" ".join(text[: text.index("┏")].split()))
    assert titles[0] == (
        "rope · copy · decoder · seed 0 (trained on lengths 1-16; test) "
        "re-evaluated with pe.scaling=yarn, pe.scaling_factor=4"
    )
    assert titles[1].endswith("test) re-evaluated as trained")


def test_a_run_without_a_test_says_so():
    rec = done(True, 900)
    rec["metrics"]["test"] = {}
    assert learned_line(rec).endswith("not tested (test=false)")
