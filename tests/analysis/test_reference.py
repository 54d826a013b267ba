"""Every row against a fixed reference row (``make_table.py --reference``): Welch's difference,
Holm over the column, the seeds that would decide, checked against scipy by hand."""

import re

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from pelab.analysis import reference
from pelab.analysis.frames import lengths_frame, runs_frame
from pelab.analysis.table import ablation
from pelab.errors import ConfigError
from tests.analysis.records import record

# out of distribution (length 32), three seeds each: a far above rope, b near it, rope steady
OOD = {"rope": (0.10, 0.11, 0.12), "a": (0.50, 0.55, 0.60), "b": (0.09, 0.13, 0.17)}
RECORDS = [
    record(pe, "copy", seed, {8: 1.0, 32: value}, train=(1, 8), chance=0.0)
    for pe, values in OOD.items()
    for seed, value in enumerate(values)
]


def compared():
    result = ablation(runs_frame(RECORDS), lengths_frame(RECORDS))
    wanted = reference.parse_reference("pe=rope", result.rows, result.by_task)
    table = reference.versus(result.by_task, result.rows, wanted)
    ood = table[(table["split"] == "OOD") & (table["metric"] == "exact_match")]
    return table, ood.set_index("pe")


def test_each_row_is_compared_with_the_reference_by_welch_and_holm():
    _, ood = compared()
    assert ood.loc["rope", "reference"] and np.isnan(ood.loc["rope", "diff"])
    raw = {pe: scipy_stats.ttest_ind(OOD[pe], OOD["rope"], equal_var=False).pvalue for pe in "ab"}
    smaller, larger = sorted(raw.values())
    holm = {pe: min(1.0, p * (2 if p == smaller else 1)) for pe, p in raw.items()}
    holm["b"] = max(holm["b"], holm["a"]) if raw["b"] > raw["a"] else holm["b"]
    for pe in "ab":
        assert ood.loc[pe, "p_holm"] == pytest.approx(holm[pe])
        assert ood.loc[pe, "diff"] == pytest.approx(np.mean(OOD[pe]) - np.mean(OOD["rope"]))
    assert ood.loc["a", "decided"] and not ood.loc["b", "decided"]
    assert np.isnan(ood.loc["a", "seeds_to_decide"]) and ood.loc["b", "seeds_to_decide"] >= 2
    assert reference.comparison_text(ood.loc["a"]).endswith("✓")
    assert "seeds" in reference.comparison_text(ood.loc["b"])


def test_the_table_is_written_with_its_count_of_decided_comparisons(tmp_path):
    table, _ = compared()
    rows = ["pe"]
    written = reference.write(table, rows, {"pe": "rope"}, "exact_match", tmp_path)
    text = written[0].read_text()
    assert "| rope | reference | reference |" in re.sub(" +", " ", text)
    assert "1 of 4 comparisons decided" in text  # a and b, ID and OOD; only a OOD decides
    assert len(pd.read_csv(written[1])) == len(table)


def test_a_reference_row_the_table_lacks_is_refused_naming_the_rows(tmp_path, capsys):
    result = ablation(runs_frame(RECORDS), lengths_frame(RECORDS))
    with pytest.raises(ConfigError, match="no such row; the table has pe=a, pe=b, pe=rope"):
        reference.parse_reference("pe=xpos", result.rows, result.by_task)
    with pytest.raises(ConfigError, match="over the table's row settings pe"):
        reference.parse_reference("lr=3", result.rows, result.by_task)
