"""Ablation tables: seed statistics by hand, failures and holes shown, best marked, files."""

import math
import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from pelab.analysis.cells import NO_RUNS, cell_text, column_notes, pivot
from pelab.analysis.frames import lengths_frame, runs_frame
from pelab.analysis.render import paper_rows, write_tables
from pelab.analysis.sequential import (
    ALPHA,
    LOOKS,
    holm,
    sequential_test,
    shares,
    verdicts,
    welch_difference,
)
from pelab.analysis.table import ablation, complete, row_axes
from pelab.errors import ConfigError
from tests.analysis.records import CHOICES, record


def build(records, metric="exact_match"):
    return ablation(runs_frame(records), lengths_frame(records), metric)


def cell(stats, pe, task, column, value, metric="exact_match"):
    chosen = (stats["pe"] == pe) & (stats["task"] == task) & (stats[column] == value)
    row = stats[chosen & (stats["metric"] == metric)]
    assert len(row) == 1
    return row.iloc[0]


RECORDS = [
    record("rope", "copy", 0, {8: 0.5, 16: 0.5, 32: 0.25}, chance=0.0),
    record("rope", "copy", 1, {8: 0.7, 16: 0.7, 32: 0.0}, chance=0.0),
    record("alibi", "copy", 0, {8: 0.9, 16: 0.9, 32: 0.6}, chance=0.0),
    record("alibi", "copy", 1, status="failed"),
    record("learned", "copy", 0, status="failed"),
    record("learned", "copy", 1, status="failed"),
    record("rope", "sort", 0, {8: 0.2, 16: 0.2, 24: 0.1}),
]


def test_a_cell_is_the_mean_std_max_and_t_interval_over_seeds():
    result = build(RECORDS)
    rope = cell(result.by_task, "rope", "copy", "split", "ID")
    # seeds 0.5 and 0.7: mean 0.6, sample std sqrt(((-0.1)^2 + 0.1^2) / 1) = 0.1414
    assert rope["mean"] == pytest.approx(0.6)
    assert rope["std"] == pytest.approx(math.sqrt(0.02))
    assert (rope["max"], rope["n"], rope["runs"]) == (pytest.approx(0.7), 2, 2)
    # 95% t-interval: 0.6 ± t(0.975, 1) · 0.1414 / √2 = 0.6 ± 1.27, clipped to [0, 100] %
    half = 12.706 * math.sqrt(0.02) / math.sqrt(2)
    assert 0.6 + half > 1 and (rope["ci95_low"], rope["ci95_high"]) == (0.0, 1.0)  # the CSV too
    assert cell_text(rope) == "60.0 [0.0, 100.0] (2/2)"
    ood = cell(result.by_task, "rope", "copy", "split", "OOD")
    assert ood["mean"] == pytest.approx(0.125)


def test_failed_and_missing_runs_stay_in_their_cells():
    result = build(RECORDS)
    alibi = cell(result.by_task, "alibi", "copy", "split", "ID")
    assert (alibi["n"], alibi["runs"], alibi["failed"]) == (1, 2, 1)
    assert cell_text(alibi) == "90.0 [–] (1/2)"  # one seed: no interval
    assert cell_text(cell(result.by_task, "learned", "copy", "split", "OOD")) == "failed (0/2)"
    # sort ran only rope seed 0, and no sweep planned more: no run is invented, the other
    # encodings' sort cells have no runs (a sweep's planned jobs come as missing runs: collect)
    assert cell_text(cell(result.by_task, "rope", "sort", "split", "ID")).endswith("1/1)")
    assert result.by_task.query("task == 'sort' and pe != 'rope'").empty
    assert (result.runs["status"] == "missing").sum() == 0
    table, _ = pivot(result.by_task, result.rows, ["task", "split", "metric"])
    assert table.loc["alibi", ("sort", "ID", "token_acc")] == NO_RUNS == "not run"


def test_the_best_mean_of_each_column_is_marked_and_ties_of_a_flat_column_are_not():
    result = build(RECORDS)
    top = result.by_task[result.by_task["top"]]
    assert set(zip(top["pe"], top["task"], top["split"], strict=True)) == {
        ("alibi", "copy", "ID"),
        ("alibi", "copy", "OOD"),
    }  # sort has one value per column: nothing to compare
    # alibi's one seed cannot be told apart from rope's two: rope stays bold beside it
    best = result.by_task[result.by_task["best"]]
    assert set(zip(best["pe"], best["split"], strict=True)) == {
        ("alibi", "ID"),
        ("alibi", "OOD"),
        ("rope", "ID"),
        ("rope", "OOD"),
    }


def test_lengths_are_split_by_the_training_range_and_carry_the_chance_level():
    result = build(RECORDS)
    copy = result.by_length[result.by_length["task"] == "copy"]
    assert dict(zip(copy["length"].astype(int), copy["split"], strict=False)) == {
        8: "ID",
        16: "ID",
        32: "OOD",
    }
    assert cell(result.by_length, "rope", "copy", "length", 32)["mean"] == pytest.approx(0.125)
    assert cell(result.by_length, "rope", "copy", "length", 32)["chance"] == 0.0
    assert pd.isna(cell(result.by_length, "rope", "sort", "length", 24)["chance"])


def test_rows_are_the_encoding_plus_every_other_setting_that_varies():
    records = [
        record("rope", "copy", s, {8: 1.0, 32: 0.0}, overrides=[f"model.net.d_model={d}"])
        for d in (16, 32)
        for s in (0, 1)
    ]
    runs = runs_frame(records)
    assert row_axes(runs) == ["pe", "model.net.d_model"]
    result = build(records)
    assert len(result.by_task) == 2 * 2 * 2  # (d_model 16, 32) x (ID, OOD) x metrics: no seeds
    assert set(result.by_task["n"]) == {2}


def test_a_duplicate_run_keeps_the_completed_newest_one():
    old = {**record("rope", "copy", 0, {8: 0.1, 32: 0.0}), "source": "/logs/a"}
    new = {**record("rope", "copy", 0, {8: 0.9, 32: 0.0}), "source": "/logs/b"}
    broken = {**record("rope", "copy", 0, status="failed"), "source": "/logs/c"}
    records = [old, new, broken]
    runs = complete(runs_frame(records), ["pe"])
    assert len(runs) == 1 and runs["id/exact_match"].item() == 0.9
    at_8 = cell(build(records).by_length, "rope", "copy", "length", 8)
    assert (at_8["mean"], at_8["runs"]) == (0.9, 1)  # the kept run's own per-length results


def test_tables_are_written_as_markdown_latex_and_csv(tmp_path):
    records = [*RECORDS, record("t5_bias", "copy", 0, {8: 0.3, 16: 0.3, 32: 0.3})]
    paths = write_tables(build(records), tmp_path)
    assert sorted(p.name for p in paths) == sorted(
        f"table_{kind}{metric}.{ext}"
        for kind in ("tasks", "lengths")
        for metric in ("", ".exact_match", ".token_acc")
        for ext in ("md", "tex", "csv")
    )
    markdown = (tmp_path / "table_tasks.exact_match.md").read_text()
    assert markdown.startswith("| pe ")
    assert "| alibi" in markdown and "**90.0 [–] (1/2)**" in markdown
    assert "copy OOD" in markdown and "failed (0/2)" in markdown
    assert "| chance" in markdown
    # every run that did not complete is listed with its error
    assert "learned · copy · seed 1: failed: ConfigError: deliberately broken" in markdown
    assert "rope · sort · seed 1" not in markdown  # never planned, so never missing
    assert "copy L=32 (OOD) token acc" in (tmp_path / "table_lengths.md").read_text()
    latex = (tmp_path / "table_tasks.exact_match.tex").read_text()
    # compact cells in a paper's table: the seeds and what would decide are in the .md
    assert r"t5\_bias" in latex and r"\textbf{90.0 [–]}" in latex and "(1/2)" not in latex
    assert r"\multicolumn{2}{c}{copy}" in latex and r"Test exact match (\%)" in latex
    both = (tmp_path / "table_tasks.tex").read_text()  # task, split, metric: three header rows
    assert r"\multicolumn{4}{c}{copy}" in both and r"\multicolumn{2}{c}{OOD}" in both
    assert "token acc" in both and r"Test exact match and token acc (\%), side by side" in both
    csv = pd.read_csv(tmp_path / "table_tasks.exact_match.csv")
    rope = csv[(csv["pe"] == "rope") & (csv["task"] == "copy") & (csv["split"] == "ID")]
    assert rope["mean"].item() == pytest.approx(0.6) and rope["n"].item() == 2
    columns = ("mean", "std", "ci95_low", "ci95_high", "n", "learned", "p_vs_top", "best")
    assert set(columns) <= set(csv.columns) and "values" not in csv.columns


def test_a_cell_without_results_names_the_statuses_of_its_runs():
    records = [
        record("rope", "copy", 0, {8: 1.0, 32: 0.0}),
        record("alibi", "copy", 0, status="running"),
        record("alibi", "copy", 1, status="failed"),
    ]
    result = build(records)
    alibi = cell(result.by_task, "alibi", "copy", "split", "OOD")
    assert (alibi["failed"], alibi["missing"]) == (2, 0)
    assert cell_text(alibi) == "running, failed (0/2)"  # still running: not called failed
    rope = cell(result.by_task, "rope", "copy", "split", "OOD")
    assert cell_text(rope) == "0.0 [–] (1/1)" and rope["not_completed"] == ""


def test_a_table_with_two_row_axes_keeps_them_as_columns_and_ends_with_chance(tmp_path):
    records = [
        record("rope", "copy", 0, {8: 1.0, 32: 0.0}, chance=0.0),
        {**record("rope", "copy", 0, {8: 1.0, 32: 0.5}, chance=0.0), "overrides": []}
        | {
            "choices": {
                "pe": "rope",
                "task": "copy",
                **CHOICES,
                "positions": "randomized",
                "seed": 0,
            }
        },
    ]
    result = build(records)
    assert result.rows == ["pe", "positions"]
    write_tables(result, tmp_path)
    lines = (tmp_path / "table_tasks.md").read_text().splitlines()
    cells = [[c.strip() for c in line.split("|")[1:-1]] for line in lines[:5]]
    assert cells[0] == [
        "pe",
        "positions",
        *(f"copy {split} {m}" for split in ("ID", "OOD") for m in ("exact match", "token acc")),
    ]
    assert cells[3][:2] == ["rope", "randomized"] and "50.0 [–]" in cells[3][4]
    assert cells[4] == ["chance", "", "0.0", "0.0", "0.0", "0.0"]
    assert "chance" in (tmp_path / "table_lengths.tex").read_text()


# a competence budget: alibi learned copy (both seeds), rope learned it with one seed of two,
# nope with none; nope has the best OOD mean, which measures nothing
JUDGED = [
    record("alibi", "copy", 0, {8: 1.0, 32: 0.4}, train=(1, 8), learned=True, steps_to_learn=300),
    record("alibi", "copy", 1, {8: 1.0, 32: 0.5}, train=(1, 8), learned=True, steps_to_learn=500),
    record("rope", "copy", 0, {8: 1.0, 32: 0.2}, train=(1, 8), learned=True, steps_to_learn=700),
    record("rope", "copy", 1, {8: 0.6, 32: 0.1}, train=(1, 8), learned=False),
    record("none", "copy", 0, {8: 0.64, 32: 0.9}, train=(1, 8), learned=False),
    record("none", "copy", 1, {8: 0.60, 32: 0.9}, train=(1, 8), learned=False),
]


def test_unlearned_cells_say_so_and_never_win_an_ood_column(tmp_path):
    result = build(JUDGED)
    none_ood = cell(result.by_task, "none", "copy", "split", "OOD")
    assert cell_text(none_ood) == "not learned (ID 62.0, 0/2)"  # its ID mean, not its OOD score
    rope_ood = cell(result.by_task, "rope", "copy", "split", "OOD")
    assert cell_text(rope_ood) == "15.0 [0.0, 78.5] (2/2, learned 1/2)"
    top = result.by_task[result.by_task["top"]]
    # OOD: none (90%) and rope (15%, one seed unlearned) are out; alibi (45%) is the best
    assert set(zip(top["pe"], top["split"], strict=True)) == {("alibi", "ID"), ("alibi", "OOD")}
    ood = result.by_task.query("split == 'OOD' and metric == 'exact_match'")
    assert ood.set_index("pe")["best"].to_dict() == {"alibi": True, "rope": False, "none": False}
    by_length = result.by_length
    assert not by_length[(by_length["pe"] == "none") & (by_length["length"] == 32)]["best"].any()
    written = write_tables(result, tmp_path)
    assert tmp_path / "table_steps.md" in written
    markdown = (tmp_path / "table_tasks.md").read_text()
    assert "not learned (ID 62.0, 0/2)" in markdown and "**45.0 [0.0, 100.0] (2/2)**" in markdown


def test_three_seeds_give_the_t_interval_by_hand():
    """0.5, 0.6, 0.7: mean 0.6, std 0.1, t(0.975, 2) = 4.3027: 0.6 ± 0.2484."""
    records = [record("rope", "copy", k, {8: v, 32: 0.0}) for k, v in enumerate((0.5, 0.6, 0.7))]
    rope = cell(build(records).by_task, "rope", "copy", "split", "ID")
    assert (rope["ci95_low"], rope["ci95_high"]) == pytest.approx((0.35159, 0.84841), abs=1e-5)
    assert cell_text(rope) == "60.0 [35.2, 84.8] (3/3)"


def five_seeds(pe: str, centre: float) -> list[dict]:
    spread = (-0.02, -0.01, 0.0, 0.01, 0.02)
    return [record(pe, "copy", k, {8: centre + d, 32: 0.0}) for k, d in enumerate(spread)]


def test_bold_is_the_best_and_every_cell_not_significantly_different_from_it():
    """Five seeds each: alibi 0.90 (best), rope 0.89 (within noise: bold too), none 0.50 (far
    below: not bold). Five seeds reach the design's second look: each p is the sequential one,
    min over the looks of Welch's p on the first 3 and the first 5 seeds over the look's share
    of alpha, then Holm over the column's two comparisons with its best."""
    records = five_seeds("alibi", 0.90) + five_seeds("rope", 0.89) + five_seeds("none", 0.50)
    column = build(records).by_task.query("split == 'ID' and metric == 'exact_match'")
    column = column.set_index("pe")
    assert column["top"].to_dict() == {"alibi": True, "rope": False, "none": False}
    assert column["best"].to_dict() == {"alibi": True, "rope": True, "none": False}
    spread = (-0.02, -0.01, 0.0, 0.01, 0.02)
    seeds = {
        pe: [c + d for d in spread] for pe, c in (("alibi", 0.9), ("rope", 0.89), ("none", 0.5))
    }
    share = shares(LOOKS)
    assert (LOOKS[:2], sum(share)) == ((3, 5), pytest.approx(1.0))

    def sequential(pe):
        return min(
            min(
                1.0,
                scipy_stats.ttest_ind(seeds[pe][:n], seeds["alibi"][:n], equal_var=False).pvalue
                / share[j],
            )
            for j, n in enumerate(LOOKS[:2])
        )

    p_rope, p_none = sequential("rope"), sequential("none")
    assert p_none < p_rope  # Holm: the smallest times 2, the next times 1 (kept monotone)
    assert column.loc["none", "p_vs_top"] == pytest.approx(2 * p_none)
    assert column.loc["rope", "p_vs_top"] == pytest.approx(min(1.0, max(p_rope, 2 * p_none)))
    assert pd.isna(column.loc["alibi", "p_vs_top"]) and column.loc["none", "family"] == 2


def test_holm_adjusts_the_smallest_p_value_most_keeps_the_order_and_gives_each_its_level():
    """Raw p 0.001, 0.02, 0.04: adjusted 0.003, 0.04, 0.04, each decided at its step (alpha/3,
    alpha/2, alpha); with 0.03 in the middle (>= alpha/2) Holm stops there, and the later
    comparison's level is the step it stopped at. A member not tested yet (NaN) stays in the
    family as p = 1: m counts it, and it has no adjusted p."""
    family = holm(pd.Series({"a": 0.001, "b": 0.02, "c": 0.04}))
    assert family["adjusted"].tolist() == pytest.approx([0.003, 0.04, 0.04])
    assert family["level"].tolist() == pytest.approx([ALPHA / 3, ALPHA / 2, ALPHA])
    assert family["decided"].all() and (family["m"] == 3).all()
    stopped = holm(pd.Series({"a": 0.001, "b": 0.03, "c": 0.04}))
    assert stopped["adjusted"].tolist() == pytest.approx([0.003, 0.06, 0.06])
    assert stopped["level"].tolist() == pytest.approx([ALPHA / 3, ALPHA / 2, ALPHA / 2])
    assert stopped["decided"].tolist() == [True, False, False]
    waiting = holm(pd.Series({"a": 0.001, "b": 0.02, "d": np.nan}))
    assert (waiting["m"] == 3).all() and pd.isna(waiting.loc["d", "adjusted"])
    assert waiting.loc["a", "adjusted"] == pytest.approx(0.003)


def test_a_leader_with_the_same_score_on_every_seed_is_tested_without_a_warning():
    """100% on every seed: no spread, which Welch's test takes as it is (scipy would warn of
    precision loss, once per cell, on the user's console)."""
    cells = {"best": (1.0, 1.0, 1.0), "near": (0.999, 0.987, 0.995), "low": (0.1, 0.2, 0.15)}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tests = {k: sequential_test(cells[k], cells["best"]) for k in ("near", "low")}
        decided = verdicts(tests)
    raw = scipy_stats.ttest_ind(cells["low"], cells["best"], equal_var=False).pvalue
    assert tests["low"].p == pytest.approx(raw / shares(LOOKS)[0])
    assert decided["low"].decided and not decided["near"].decided


def test_the_steps_to_learn_table_averages_the_seeds_that_learned(tmp_path):
    steps = build(JUDGED).steps.set_index("pe")
    assert steps.loc["alibi", "mean"] == 400 and steps.loc["alibi", "std"] == pytest.approx(
        math.sqrt(2 * 100**2)
    )
    assert (steps.loc["rope", "mean"], steps.loc["rope", "learned"]) == (700, 1)
    assert (steps.loc["none", "learned"], steps.loc["none", "judged"]) == (0, 2)
    write_tables(build(JUDGED), tmp_path)
    table = (tmp_path / "table_steps.md").read_text()
    assert "400 ± 141 (2/2)" in table and "700 ± – (1/2)" in table
    assert "not learned (0/2)" in table
    assert pd.read_csv(tmp_path / "table_steps.csv")["judged"].tolist() == [2, 2, 2]


def test_runs_without_a_criterion_have_no_steps_table():
    assert build(RECORDS).steps is None


def lr_run(pe: str, seed: int, lr: str, val: float, test: float) -> dict:
    """A run at learning rate ``lr`` whose last in-distribution validation scored ``val`` and
    whose test scored ``test`` (exact match at length 8, inside the training range)."""
    rec = record(pe, "copy", seed, {8: test, 32: 0.0}, overrides=[f"model.optimizer.lr={lr}"])
    rec["metrics"]["val"] = {"8": {"exact_match": val, "token_acc": val}}
    return rec


# rope: lr 1e-3 validates better (0.9, 0.8) than 3e-3 (0.7, 0.95), though 3e-3 tests better
TUNING = [
    lr_run("rope", 0, "1e-3", val=0.9, test=0.5),
    lr_run("rope", 1, "1e-3", val=0.8, test=0.6),
    lr_run("rope", 0, "3e-3", val=0.7, test=0.99),
    lr_run("rope", 1, "3e-3", val=0.95, test=0.98),
]


def test_the_tuned_protocol_keeps_the_learning_rate_that_validates_best_not_the_one_that_tests():
    result = build_with(TUNING, "tuned")
    assert result.rows == ["pe"] and set(result.runs["selected"]) == {"0.001"}
    rope = cell(result.by_task, "rope", "copy", "split", "ID")
    assert rope["mean"] == pytest.approx(0.55) and rope["n"] == 2  # its seeds' test mean
    assert "tuned" in result.caption and "never on test numbers" in result.caption


def test_the_max_protocol_reports_the_one_run_with_the_best_validation():
    result = build_with(TUNING, "max")
    rope = cell(result.by_task, "rope", "copy", "split", "ID")
    assert (rope["mean"], rope["n"]) == (pytest.approx(0.98), 1)  # lr 3e-3, seed 1: val 0.95
    assert "Protocol: max" in result.caption and "Seeds per cell: 1." in result.caption


def test_the_mean_protocol_keeps_every_learning_rate_as_a_row_and_tuned_needs_one():
    result = build_with(TUNING, "mean")
    assert result.rows == ["pe", "model.optimizer.lr"] and "Seeds per cell: 2." in result.caption
    with pytest.raises(ConfigError, match="--protocol tuned selects a model.optimizer.lr"):
        build_with(RECORDS, "tuned")
    with pytest.raises(ConfigError, match="unknown protocol 'best'; valid choices: mean, tuned"):
        build_with(RECORDS, "best")


def build_with(records, protocol):
    return ablation(runs_frame(records), lengths_frame(records), "exact_match", protocol)


def test_a_difference_of_means_has_welchs_interval_and_p_value_by_hand():
    """a = (0.6, 0.7, 0.8), b = (0.2, 0.3): diff 0.45; variances of the means 0.01/3 and
    0.005/2; se = 0.07638; Welch-Satterthwaite dof = se^4 / ((0.01/3)^2/2 + 0.0025^2/1) = 2.88."""
    result = welch_difference([0.6, 0.7, 0.8], [0.2, 0.3])
    se = math.sqrt(0.01 / 3 + 0.005 / 2)
    dof = se**4 / ((0.01 / 3) ** 2 / 2 + 0.0025**2 / 1)
    assert dof == pytest.approx(2.882, abs=0.001)
    half = scipy_stats.t.ppf(0.975, dof) * se
    expected = (0.45, 0.45 - half, 0.45 + half)
    assert (result.diff, result.low, result.high) == pytest.approx(expected)
    t = 0.45 / se
    assert result.p_value == pytest.approx(2 * scipy_stats.t.sf(t, dof))
    assert str(result).startswith("+45.0 points [")
    with pytest.raises(ValueError, match="two seeds on each side"):
        welch_difference([0.5], [0.2, 0.3])
    # issue 45: percents printed "-81.4 points [-412.5, +249.7]" without complaint
    with pytest.raises(ValueError, match="fractions in \\[0, 1\\].*got 12.5: divide percents"):
        welch_difference([12.5, 10.0], [0.2, 0.3])


def test_every_metric_is_tabulated_side_by_side_and_alone_and_a_column_of_zeros_has_no_bold(
    tmp_path,
):
    """Beyond the training lengths no answer is wholly right (exact match 0) but a share of the
    tokens is (token accuracy 10-40%): both show, side by side and in a file each, the metric
    chosen first; the exact-match column of zeros has no bold and says why."""
    records = [
        record(pe, "copy", seed, {8: 1.0, 32: 0.0}, token={8: 1.0, 32: share + seed / 100})
        for pe, share in (("rope", 0.1), ("alibi", 0.4))
        for seed in (0, 1)
    ]
    write_tables(build(records, metric="token_acc"), tmp_path)
    both = (tmp_path / "table_tasks.md").read_text()
    header = [c.strip() for c in both.splitlines()[0].split("|")[1:-1]]
    assert header == [
        "pe",
        *(f"copy {split} {m}" for split in ("ID", "OOD") for m in ("token acc", "exact match")),
    ]
    alibi = [c.strip() for c in both.splitlines()[3].split("|")[1:-1]]
    assert alibi[0] == "alibi" and alibi[3].startswith("**40.5 [") and alibi[4].startswith("0.0")
    assert "**0.0" not in both
    assert "No bold in copy OOD exact match: every cell is 0.0." in both
    assert "Test token acc and exact match (%), side by side." in both
    token = (tmp_path / "table_tasks.token_acc.md").read_text()
    exact = (tmp_path / "table_tasks.exact_match.md").read_text()
    assert "**40.5 [" in token and "40.5" not in exact and "Test token acc (%)." in token
    assert "No bold in copy OOD: every cell is 0.0." in exact and "copy OOD:" not in token


def test_a_column_whose_learned_cells_all_score_0_has_no_bold():
    """Out of distribution, rope learned the task and scores 0; none did not learn it and
    scores 30 (which measures nothing): nothing in the column earns bold."""
    records = [
        record("rope", "copy", 0, {8: 1.0, 32: 0.0}, train=(1, 8), learned=True),
        record("none", "copy", 0, {8: 0.6, 32: 0.3}, train=(1, 8), learned=False),
    ]
    stats = build(records).by_task.query("split == 'OOD' and metric == 'exact_match'")
    assert not stats["best"].any()
    assert column_notes(stats, ["task", "split"]) == [
        "No bold in copy OOD: every cell whose seeds all learned the task is 0.0."
    ]


def test_the_latex_table_compiles_in_an_article_with_the_packages_it_names(tmp_path):
    """Issue 45: a setting column's name kept raw underscores (``run_name``: pdflatex stops with
    "Missing $ inserted"), ``\\multirow`` needed a package named nowhere, and a wide table ran
    past ``\\textwidth``. Every name is escaped, row labels repeat (no ``\\multirow``), the
    tabular shrinks to the line where wider (issue 54: never enlarged), and its first line names
    the packages it needs."""
    records = [
        record(
            pe, "copy", seed, {8: 0.9, 32: 0.1 * seed}, chance=0.0, overrides=[f"run_name=a_{pe}"]
        )
        for pe in ("t5_bias", "rope")
        for seed in (0, 1)
    ]
    result = build(records)
    assert result.rows == ["pe", "run_name"]
    write_tables(result, tmp_path)
    latex = (tmp_path / "table_tasks.tex").read_text()
    assert latex.startswith("% needs \\usepackage{booktabs,graphicx}\n")
    assert r"pe & run\_name" in latex and r"t5\_bias & a\_t5\_bias" in latex
    assert "multirow" not in latex
    fit = "\\resizebox{\\ifdim\\width>\\linewidth\\linewidth\\else\\width\\fi}{!}{%\n"
    assert fit + "\\begin{tabular}" in latex
    assert latex.count("\\end{tabular}}") == 1
    body = latex.split("\\midrule", 1)[1]
    assert "_" not in body.replace("\\_", "")  # no raw underscore where pdflatex reads text


def test_every_table_compiles_with_pdflatex_and_a_missing_cell_reads_not_run(tmp_path):
    """Issue 45: ``table_steps.md`` wrote ``nan`` where the other tables write ``not run``, had
    no ``.tex``, and the CSV's interval was not clipped (1.0006) where the tables clip to 100.
    Every ``.tex`` written is compiled in an article with only the packages its first line names
    (where ``pdflatex`` is installed: ``apt-get install texlive-latex-base
    texlive-latex-recommended``; CI's machine has none, so there it checks the text only)."""
    import shutil
    import subprocess

    sort = record(
        "alibi", "sort", 0, {8: 1.0, 32: 0.3}, train=(1, 8), learned=True, steps_to_learn=900
    )
    high = [
        record("t5_bias", "copy", s, {8: v, 32: v}, train=(1, 8), learned=True, steps_to_learn=1)
        for s, v in ((0, 1.0), (1, 0.99), (2, 0.999))
    ]
    written = write_tables(build([*JUDGED, sort, *high]), tmp_path)
    steps = (tmp_path / "table_steps.md").read_text()
    assert "nan" not in steps and NO_RUNS in steps  # rope and none ran no sort
    assert tmp_path / "table_steps.tex" in written
    cells = pd.read_csv(tmp_path / "table_tasks.csv")
    assert cells["ci95_high"].max() <= 1.0 and cells["ci95_low"].min() >= 0.0
    assert (cells["ci95_high"] == 1.0).any()  # t5_bias: 99.6 +- 1.4 would reach 101.0
    if shutil.which("pdflatex") is None:
        return
    for tex in sorted(tmp_path.glob("*.tex")):
        packages = tex.read_text().splitlines()[0].removeprefix("% needs ")
        for columns in ("onecolumn", "twocolumn"):  # issue 54: a two-column paper takes them
            document = tmp_path / f"doc_{columns}_{tex.stem}.tex"
            document.write_text(
                f"\\documentclass[{columns}]{{article}}\n{packages}\n\\begin{{document}}\n"
                f"See Table~\\ref{{tab:{tex.stem}}}.\n\\input{{{tex.name}}}\n\\end{{document}}\n"
            )
            done = subprocess.run(
                ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", document.name],
                cwd=tmp_path, capture_output=True, text=True, timeout=120,
            )  # fmt: skip
            assert done.returncode == 0, f"{tex.name}: {done.stdout[-800:]}"
            assert "Overfull \\hbox" not in done.stdout, (columns, tex.name)


def test_a_tex_table_spans_a_column_or_both_by_its_width_labelled_in_a_papers_words(tmp_path):
    """Issue 54: every table was scaled to ``\\textwidth`` in a one-column ``table`` (258 pt
    too wide for a two-column paper; a 3-row table enlarged to twice the body font), had no
    ``\\label`` and a caption of config names. Now a narrow table stays in one column at its
    size, a wide one spans both (``table*``), ``--tex-span`` chooses for all, each has
    ``\\label{tab:<stem>}``, and the caption leaves the settings the runs share to the .md."""
    narrow = [record("rope", "copy", seed, {8: 0.9, 32: 0.1}) for seed in (0, 1)]
    result = build(narrow)
    write_tables(result, tmp_path / "auto")
    latex = (tmp_path / "auto" / "table_tasks.exact_match.tex").read_text()
    assert "\\begin{table}\n" in latex and "\\end{table}\n" in latex
    assert "\\label{tab:table_tasks.exact_match}" in latex
    caption = latex.split("\\caption{", 1)[1].split("}\n", 1)[0]
    assert "Fixed:" not in caption and ".md" not in caption and ".csv" not in caption
    assert "Fixed:" in (tmp_path / "auto" / "table_tasks.exact_match.md").read_text()
    wide = [
        record(pe, task, seed, {8: 0.9, 16: 0.5, 32: 0.1})
        for pe in ("rope", "alibi", "t5_bias")
        for task in ("copy", "reverse", "sort")
        for seed in (0, 1)
    ]
    write_tables(build(wide), tmp_path / "wide")
    assert "\\begin{table*}" in (tmp_path / "wide" / "table_tasks.tex").read_text()
    write_tables(build(wide), tmp_path / "column", span="column")
    assert "\\begin{table*}" not in (tmp_path / "column" / "table_tasks.tex").read_text()
    write_tables(result, tmp_path / "page", span="page")
    assert "\\begin{table*}" in (tmp_path / "page" / "table_tasks.exact_match.tex").read_text()
    with pytest.raises(ConfigError, match="--tex-span 'wide'.*auto, column, page"):
        write_tables(result, tmp_path / "bad", span="wide")


def test_a_papers_rows_need_no_origin_column_unless_names_repeat_and_take_the_labels():
    """Issue 54: the ``.tex`` rows read ``origin: yours`` and kept config names under
    ``--label``. The origin column goes where the names alone tell the rows apart; where your
    row and a baseline's share a name it stays, and ``--label`` renames a value (``yours=ours``)
    or a setting (``attn_scale=logn``), as in the figures."""

    def table(rows):
        index = pd.MultiIndex.from_tuples(rows, names=["pe", "origin"])
        return pd.DataFrame({"copy": ["1"] * len(rows)}, index=index)

    unique = paper_rows(table([("rope", "ablation_cpu"), ("mine", "yours")]), {"mine": "Mine"})
    assert unique.index.names == ["pe"] and list(unique.index) == ["rope", "Mine"]
    shared = paper_rows(table([("rope", "ablation_cpu"), ("rope", "yours")]), {"yours": "ours"})
    assert list(shared.index) == [("rope", "ablation_cpu"), ("rope", "ours")]
    index = pd.MultiIndex.from_tuples([("rope", "logn")], names=["pe", "model.net.attn_scale"])
    scaled = paper_rows(pd.DataFrame({"copy": ["1"]}, index=index), {"attn_scale=logn": "log n"})
    assert list(scaled.index) == [("rope", "log n")]
