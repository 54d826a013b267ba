"""One comparison, one verdict (issue 52, items 1-2), on the shipped baseline: a comparison's
verdict, p and interval do not change when unrelated rows are added or filtered out, and the
interval printed beside each p excludes 0 exactly where the comparison is decided, in the md,
tex, csv and html alike."""

import re
from argparse import Namespace

import numpy as np
import pandas as pd
import pytest

from pelab.analysis import baseline, null_simulation, reference, reference_tables
from pelab.analysis.collect import load_records
from pelab.analysis.frames import lengths_frame, runs_frame
from pelab.analysis.html_report import write_html
from pelab.analysis.sequential import ALPHA
from pelab.analysis.table import ablation

VALUES = ["diff", "low", "high", "p_holm", "family", "seeds", "decided"]
# a printed comparison: +27.0 [+14.0, +40.0] p=0.011 (Holm over 24) at 5 seeds ✓
PRINTED = re.compile(
    r"([+-][\d.e-]+) \[([+-][\d.e-]+), ([+-][\d.e-]+)\] p=([\d.e-]+) \(Holm over (\d+)\)"
    r"(?: at \d+ seeds)?( ✓)?"
)
COMPACT = re.compile(r"([+-][\d.e-]+) \[([+-][\d.e-]+), ([+-][\d.e-]+)\]( ✓)?")  # a paper's


@pytest.fixture(scope="module")
def shipped():
    records = load_records([baseline.find("ablation_cpu_3seeds")])  # with its added seeds, looks
    return records, ablation(runs_frame(records), lengths_frame(records), "token_acc")


def comparisons(whole, ask, shown):
    """``make_table.py --reference ... [--compare ...] [--filter pe=...]``'s comparisons."""
    return reference.comparisons(whole, ask.reference, ask.compare, shown)


def asked(reference_row="pe=rope", compare=None):
    return Namespace(reference=reference_row, compare=compare)


def keyed(compared: pd.DataFrame) -> pd.DataFrame:
    keys = ["pe", "task", "split", "metric"]
    return compared.astype(dict.fromkeys(keys, str)).set_index(keys)[VALUES].sort_index()


@pytest.mark.parametrize(
    "reference_row, compare, filters",
    [
        ("pe=rope", "pe=alibi,t5_bias,dape", ["alibi,rope", "dape,t5_bias,rope,none"]),
        ("pe=alibi", "pe=path,stick_breaking", ["path,alibi", "stick_breaking,alibi,rope"]),
        ("pe=none", None, ["rope,none", "kerple,fire,none,xpos"]),  # the family: every row
    ],
)
def test_a_filter_hides_rows_and_changes_no_verdict(shipped, reference_row, compare, filters):
    _, whole = shipped
    everything, _, _ = comparisons(whole, asked(reference_row, compare), {})
    everything = keyed(everything)
    assert everything["decided"].any() and (~everything["decided"]).any()
    for shown in filters:
        narrowed, _, _ = comparisons(whole, asked(reference_row, compare), {"pe": shown})
        narrowed = keyed(narrowed)
        asked_for = set(everything.index.get_level_values("pe")) & set(shown.split(","))
        assert set(narrowed.index.get_level_values("pe")) == asked_for
        pd.testing.assert_frame_equal(narrowed, everything.loc[narrowed.index])


def test_unrelated_rows_added_to_the_table_change_no_verdict(shipped):
    """The same declared family with 8 more encodings in the table than without them."""
    records, whole = shipped
    dropped = {"none", "xpos", "path", "cope", "fire", "floater", "shaw", "urpe"}
    fewer = [r for r in records if r["choices"]["pe"] not in dropped]
    smaller = ablation(runs_frame(fewer), lengths_frame(fewer), "token_acc")
    ask = asked("pe=rope", "pe=alibi,t5_bias,dape,grape_m")
    big, _, _ = comparisons(whole, ask, {})
    small, _, _ = comparisons(smaller, ask, {})
    pd.testing.assert_frame_equal(keyed(small), keyed(big).loc[keyed(small).index])
    assert (keyed(big)["family"].dropna() <= 4).all()


def printed(text: str) -> list[tuple[float, float, float, bool]]:
    """Each comparison a table prints: its interval's bounds, p and whether it is decided."""
    return [
        (float(low), float(high), float(p), bool(tick))
        for _, low, high, p, _, tick in PRINTED.findall(text)
    ]


def compact(text: str) -> list[tuple[float, float, bool]]:
    """Each comparison a paper's table (``.tex``) prints: its bounds and whether decided."""
    return [(float(low), float(high), bool(t)) for _, low, high, t in COMPACT.findall(text)]


def test_every_printed_interval_excludes_zero_exactly_where_the_comparison_is_decided(
    shipped, tmp_path
):
    """Cell by cell, over every metric of the shipped baseline against RoPE: the CSV's bounds
    and verdict, the md and html texts (bounds, p and ✓) and the tex's (bounds and ✓) agree."""
    records, whole = shipped
    compared, wanted, family = comparisons(whole, asked(), {})
    tested = compared[compared["diff"].notna()]
    assert len(tested) > 250 and tested["decided"].sum() >= 15
    excludes = (tested["low"] > 0) | (tested["high"] < 0)
    assert (excludes == tested["decided"]).all()
    assert ((tested["p_holm"] < ALPHA) == tested["decided"]).all()
    for metric in ("exact_match", "token_acc"):
        written = reference_tables.write(compared, whole.rows, wanted, metric, tmp_path, family)
        mine = compared[compared["metric"] == metric]
        page = write_html(whole, records, [], tmp_path, (mine, whole.rows, wanted, family))
        csv = pd.read_csv(written[2])
        csv = csv[csv["diff"].notna()]
        assert ((csv["low"] > 0) | (csv["high"] < 0)).eq(csv["decided"]).all()
        for text in (written[0].read_text(), page.read_text()):
            cells = printed(text)
            assert len(cells) == int(mine["diff"].notna().sum())
            for low, high, p, decided in cells:
                assert (low > 0 or high < 0) == decided, (low, high, p, decided)
                assert (p < ALPHA) == decided, (low, high, p, decided)
        cells = compact(
            written[1]
            .read_text()
            .replace(reference_tables.LATEX_DECIDED, reference_tables.DECIDED)
        )
        assert len(cells) == int(mine["diff"].notna().sum()) and any(d for *_, d in cells)
        assert all((low > 0 or high < 0) == decided for low, high, decided in cells)


def test_a_table_says_over_how_many_comparisons_each_p_was_adjusted(shipped, tmp_path):
    _, whole = shipped
    compared, wanted, family = comparisons(whole, asked("pe=rope", "pe=alibi,dape"), {})
    text = reference_tables.markdown(
        compared[compared["metric"] == "token_acc"], whole.rows, wanted, family
    )
    assert "(Holm over 2)" in text and "The family, per column: pe=alibi,dape vs the" in text
    assert np.isin(compared["pe"], ["alibi", "dape", "rope"]).all()


def test_under_the_null_seeds_added_after_looking_keep_the_error_rate_only_sequentially(
    shipped,
):
    """2000 null comparisons with the shipped baseline's variances, --add-seeds's loop run to
    10 seeds per cell: re-testing at alpha after each addition (the naive loop) declares more
    than alpha of them significant; the sequential design stays below alpha."""
    _, whole = shipped
    variances = null_simulation.variances_of(whole.by_task)
    assert len(variances) > 50
    found = null_simulation.rates(variances, 2000, seed=0)
    (naive, naive_error), (planned, planned_error) = found["naive"], found["sequential"]
    assert naive - 2 * naive_error > ALPHA  # inflated, beyond its simulation error
    assert planned + 2 * planned_error < ALPHA
