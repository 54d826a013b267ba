"""Figures, read back from matplotlib: every point at its measured length, one distinct style and
one legend entry per row, a baseline in grey, the heatmap's grey cells named as in the tables."""

import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import same_color, to_rgba, to_rgba_array
from matplotlib.patches import Rectangle

from pelab.analysis.baseline import BASELINES
from pelab.analysis.frames import lengths_frame, runs_frame
from pelab.analysis.plot_styles import GREY
from pelab.analysis.plots import heatmap, length_curves, read_published, save
from pelab.analysis.table import Ablation, ablation
from pelab.errors import ConfigError
from tests.analysis.records import record

RECORDS = [
    record("rope", "copy", 0, {8: 0.5, 16: 0.5, 32: 0.25}, train=(2, 16), chance=0.0),
    record("rope", "copy", 1, {8: 0.7, 16: 0.7, 32: 0.0}, train=(2, 16), chance=0.0),
    record("learned", "copy", 0, status="failed"),
    record("learned", "copy", 1, status="failed"),
]


@pytest.fixture
def result():
    return ablation(runs_frame(RECORDS), lengths_frame(RECORDS))


def test_length_curves_plot_the_mean_over_seeds_and_shade_the_training_lengths(result):
    fig = length_curves(result.runs, result.lengths, result.rows, "exact_match")
    ax = fig.axes[0]
    curves = {c.get_label(): c.lines[0] for c in ax.containers}  # errorbar: (line, caps, bars)
    assert list(curves) == ["rope"]  # learned has no result to plot
    rope = curves["rope"]
    assert list(rope.get_xdata()) == [8, 16, 32]
    assert np.allclose(rope.get_ydata(), [60.0, 60.0, 12.5])
    [chance] = [line for line in ax.get_lines() if line.get_label() == "chance level"]
    assert np.allclose(chance.get_ydata(), 0.0)
    [span] = [p for p in ax.patches if isinstance(p, Rectangle)]
    x0, x1 = span.get_x(), span.get_x() + span.get_width()
    assert (x0, x1) == pytest.approx((2, 16))


def test_heatmap_annotates_means_and_names_the_failed_cells(result, tmp_path):
    fig = heatmap(result.by_length, result.rows, "exact_match")
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert texts.count("failed") == 3  # learned: at 8, 16 and 32
    assert texts.count("60") == 2 and "12" in texts  # rope: 60, 60, 12.5 -> "12" (half even)
    paths = save(fig, tmp_path / "heatmap.exact_match")
    assert [p.name for p in paths] == ["heatmap.exact_match.png", "heatmap.exact_match.pdf"]
    assert paths[0].read_bytes().startswith(b"\x89PNG") and paths[1].read_bytes()[:4] == b"%PDF"


def test_a_heatmap_without_any_evaluation_length_says_so():
    broken = {**record("rope", "copy", 0, status="failed"), "config": {}}
    result = ablation(runs_frame([broken]), lengths_frame([broken]))
    assert result.by_length.empty
    fig = heatmap(result.by_length, result.rows, "token_acc")
    assert [t.get_text() for t in fig.texts] == ["no token acc at any evaluation length"]


def test_heatmap_greys_the_cells_the_tables_call_not_learned_or_not_run_and_says_so():
    """Copy (chance 25%): rope learned it (100 at 8, 25 = chance at 16, 0 at 32), none did not
    (its length-16 and -32 cells: not learned); alibi never ran copy (not run). The colour is
    1 at 100%, 0 (white) at chance, -1 at 0; the grey cells are masked, named, and the legend
    says what each grey word means."""
    records = [
        record(
            "rope", "copy", 0, {8: 1.0, 16: 0.25, 32: 0.0}, train=(1, 8), chance=0.25, learned=True
        ),
        record(
            "none", "copy", 0, {8: 0.5, 16: 0.9, 32: 0.9}, train=(1, 8), chance=0.25, learned=False
        ),
        record(
            "alibi", "sort", 0, {8: 1.0, 16: 0.5, 32: 0.5}, train=(1, 8), chance=0.25, learned=True
        ),
    ]
    result = ablation(runs_frame(records), lengths_frame(records))
    fig = heatmap(result.by_length, result.rows, "exact_match")
    copy = fig.axes[0]
    assert copy.get_title() == "copy"
    rows = [t.get_text() for t in copy.get_yticklabels()]
    colour = copy.images[0].get_array()
    assert rows == ["rope", "none", "alibi"]
    assert np.allclose(colour[0], [1.0, 0.0, -1.0])  # 100%, at chance, 0%
    assert list(colour.mask[1]) == [False, True, True] and colour.mask[2].all()
    words = {
        (round(t.get_position()[1]), round(t.get_position()[0])): t.get_text() for t in copy.texts
    }
    assert words[(1, 1)] == words[(1, 2)] == "not\nlearned"
    assert words[(2, 0)] == "not\nrun" and words[(1, 0)] == "50"
    [legend] = fig.legends
    assert legend.get_title().get_text() == "grey: no score"
    meanings = [t.get_text() for t in legend.get_texts()]
    assert [m.split(":")[0] for m in meanings] == ["not learned", "not run"]
    assert "no seed learned the task in distribution" in meanings[0]


def test_a_row_keeps_its_colour_in_every_panel_and_the_legend_names_it():
    """Every seed of ``none`` failed on reverse: the reverse panel draws ``rope`` alone, in
    rope's colour, and the legend (built from every panel) gives each name its line's colour;
    the labels name the settings."""
    records = [
        record(pe, task, seed, {8: 1.0, 32: 0.5}, overrides=[f"pe={pe}", "trainer.max_steps=200"])
        for pe in ("none", "rope")
        for task in ("copy", "reverse")
        for seed in (0, 1)
        if (pe, task) != ("none", "reverse")
    ] + [record("none", "reverse", seed, status="failed") for seed in (0, 1)]
    result = ablation(runs_frame(records), lengths_frame(records))
    fig = length_curves(result.runs, result.lengths, result.rows, "exact_match")
    copy, reverse = fig.axes
    colour = {c.get_label(): c.lines[0].get_color() for c in copy.containers}
    # the failed runs set no max_steps: the rows differ in it, named by its last part
    assert set(colour) == {"none · max_steps=200", "rope · max_steps=200"}
    [(name, line)] = [(c.get_label(), c.lines[0]) for c in reverse.containers]
    assert name == "rope · max_steps=200" and line.get_color() == colour[name]
    [legend] = fig.legends
    for text, handle in zip(legend.get_texts(), legend.legend_handles, strict=True):
        if text.get_text() != "chance level":
            assert same_color(to_rgba_array(handle.get_color())[0], colour[text.get_text()])
    assert [t.get_text() for t in legend.get_texts()] == list(colour)


def test_published_numbers_are_overlaid_in_their_encodings_colour(tmp_path):
    """``--published``: hollow squares at the published values, in the colour of the encoding's
    line, one black legend entry per source; a file without the columns is refused."""
    published = tmp_path / "paper.csv"
    published.write_text(
        "pe,task,length,value,source\nrope,copy,16,0.9,Paper A\nrope,copy,32,0.4,Paper A\n"
    )
    result = ablation(runs_frame(RECORDS), lengths_frame(RECORDS))
    fig = length_curves(
        result.runs, result.lengths, result.rows, "exact_match", read_published(published)
    )
    ax = fig.axes[0]
    [points] = [line for line in ax.get_lines() if line.get_label() == "published: Paper A"]
    assert list(points.get_xdata()) == [16, 32] and np.allclose(points.get_ydata(), [90, 40])
    rope = next(c.lines[0] for c in ax.containers if c.get_label() == "rope")
    assert points.get_color() == rope.get_color() and points.get_markerfacecolor() == "none"
    [legend] = fig.legends
    assert "published: Paper A" in [t.get_text() for t in legend.get_texts()]
    (tmp_path / "bad.csv").write_text("pe,task,len,acc\n")
    with pytest.raises(ConfigError, match="no column length, value, source"):
        read_published(tmp_path / "bad.csv")


def many(n: int) -> list[dict]:
    """``n`` encodings, one seed each, on copy at lengths 4-32 (trained on 1-8)."""
    return [
        record(
            f"pe{i:02d}",
            "copy",
            0,
            {4: 1.0, 8: 1.0, 16: i / n, 32: i / n / 2},
            train=(1, 8),
            chance=0.0,
        )
        for i in range(n)
    ]


def drawn(ax) -> dict[str, object]:
    """Each row's data line in a panel, by its label (errorbar containers and plain lines)."""
    lines = {c.get_label(): c.lines[0] for c in ax.containers}
    return lines | {
        line.get_label(): line for line in ax.get_lines() if not line.get_label().startswith("_")
    }


def test_thirty_encodings_each_point_at_its_length_in_a_style_of_its_own():
    """With 30 rows no point moves off its measured length, no two rows share colour, marker
    and line style, and each legend entry is drawn like the line it names."""
    records = many(30)
    result = ablation(runs_frame(records), lengths_frame(records))
    fig = length_curves(result.runs, result.lengths, result.rows, "exact_match")
    lines = drawn(fig.axes[0])
    rows = {name: line for name, line in lines.items() if name != "chance level"}
    assert len(rows) == 30
    for line in lines.values():
        assert list(line.get_xdata()) == [4, 8, 16, 32]
    styles = {
        (to_rgba(line.get_color()), line.get_marker(), str(line.get_linestyle()))
        for line in rows.values()
    }
    assert len(styles) == 30
    [legend] = fig.legends
    names = [t.get_text() for t in legend.get_texts()]
    assert names == [*(f"pe{i:02d}" for i in range(30)), "chance level"]
    for name, handle in zip(names, legend.legend_handles, strict=True):
        line = lines[name]
        assert same_color(handle.get_color(), line.get_color()), name
        assert handle.get_marker() == line.get_marker(), name
        assert handle.get_linestyle() == line.get_linestyle(), name


def beside(zoo_rows: list[str], yours: tuple[str, ...] = ("mine", "rope")) -> Ablation:
    """Your rows ``yours`` (at 32: 0.6, 0.2, ...) beside the baseline zoo's ``zoo_rows`` (0.1),
    one seed each, on copy."""
    zoo = BASELINES / "zoo"
    records = [
        record(pe, "copy", 0, {8: 1.0, 32: 0.6 / (i + 1)}, train=(1, 8), chance=0.0)
        for i, pe in enumerate(yours)
    ] + [
        {
            **record(pe, "copy", 0, {8: 1.0, 32: 0.1}, train=(1, 8), chance=0.0),
            "source": str(zoo / pe),
        }
        for pe in zoo_rows
    ]
    return ablation(runs_frame(records), lengths_frame(records))


def test_a_baseline_zoo_is_grey_beneath_your_rows_in_colour_with_one_legend_entry():
    """Your mine and rope beside 7 rows of the baseline zoo (9 rows, over ``FEW_ROWS``): yours in
    colour, each named; the zoo's rope, your rope's control, thin in its colour, dashed, named
    with the baseline (the label is also yours); the zoo's other 6 grey, drawn beneath, one
    legend entry."""
    result = beside(["rope", "alibi", "none", "t5_bias", "fire", "kerple", "xpos"])
    assert result.rows == ["pe", "origin"]
    fig = length_curves(result.runs, result.lengths, result.rows, "exact_match")
    ax = fig.axes[0]
    yours = {c.get_label(): c.lines[0] for c in ax.containers}
    assert list(yours) == ["mine", "rope (yours)"]
    grey = [line for line in ax.get_lines() if line.get_label() == "zoo: 6 rows (grey)"]
    assert len(grey) == 6
    [control] = [line for line in ax.get_lines() if line.get_label() == "rope (zoo)"]
    assert control.get_color() == yours["rope (yours)"].get_color()
    assert control.get_linestyle() == "--" and list(control.get_xdata()) == [8, 32]
    for line in grey:
        assert same_color(line.get_color(), GREY) and list(line.get_xdata()) == [8, 32]
        r, g, b, _ = to_rgba(line.get_color())
        assert r == g == b and line.get_zorder() < min(y.get_zorder() for y in yours.values())
    for line in yours.values():
        r, g, b, _ = to_rgba(line.get_color())
        assert not r == g == b
    [legend] = fig.legends
    names = [t.get_text() for t in legend.get_texts()]
    assert names == [
        "mine", "rope (yours)", "rope (zoo)", "zoo: 6 rows (grey)", "chance level",
    ]  # fmt: skip
    assert same_color(legend.legend_handles[3].get_color(), GREY)
    rows = heatmap(result.by_length, result.rows, "exact_match").axes[0].get_yticklabels()
    bold = {t.get_text(): t.get_fontweight() for t in rows}
    assert bold == {
        "mine": "bold",
        "rope (yours)": "bold",
        "rope (zoo)": "normal",
        **dict.fromkeys(["alibi", "none", "t5_bias", "fire", "kerple", "xpos"], "normal"),
    }


def test_a_few_baseline_rows_are_each_named_and_coloured_like_yours():
    """Issue 54: ``--filter pe=rope,alibi,<yours>`` beside a baseline drew its two rows as thin
    grey lines under one entry, ``ablation_cpu: 2 rows (grey)``. Up to ``FEW_ROWS`` rows in all,
    each baseline row has a colour, marker, error bars and a legend entry of its own, named by
    its label alone (no name is shared, so none says whose it is)."""
    result = beside(["rope", "alibi"], yours=("mine",))
    fig = length_curves(result.runs, result.lengths, result.rows, "exact_match")
    ax = fig.axes[0]
    lines = {c.get_label(): c.lines[0] for c in ax.containers}  # each with error bars
    assert list(lines) == ["mine", "rope", "alibi"]
    colours = [to_rgba(line.get_color()) for line in lines.values()]
    assert len(set(colours)) == 3 and all(not r == g == b for r, g, b, _ in colours)
    assert len({line.get_marker() for line in lines.values()}) == 3
    for line in lines.values():
        assert line.get_linewidth() > 1 and list(line.get_xdata()) == [8, 32]
    [legend] = fig.legends
    names = [t.get_text() for t in legend.get_texts()]
    assert names == ["mine", "rope", "alibi", "chance level"]
    for name, handle in zip(names[:3], legend.legend_handles, strict=False):
        assert same_color(handle.get_color(), lines[name].get_color()), name
        assert handle.get_marker() == lines[name].get_marker(), name


def test_label_renames_every_row_and_says_whose_only_where_a_name_is_shared():
    """Issue 54: ``--label OLD=NEW`` renamed only your row, which always ended in ``(yours)``.
    It renames the baseline's rows too, in the legend and the heatmap; ``(yours)`` and
    ``(<baseline>)`` mark only a label your row and a baseline's share (your rope and its
    control), and such a label may be renamed whole."""
    result = beside(["rope", "alibi"], yours=("mine", "rope"))
    renames = {"mine": "Mine", "alibi": "ALiBi", "rope": "RoPE"}
    fig = length_curves(result.runs, result.lengths, result.rows, "exact_match", None, renames)
    [legend] = fig.legends
    names = ["Mine", "RoPE (yours)", "RoPE (zoo)", "ALiBi", "chance level"]
    assert [t.get_text() for t in legend.get_texts()] == names
    control = next(c.lines[0] for c in fig.axes[0].containers if c.get_label() == "RoPE (zoo)")
    yours = next(c.lines[0] for c in fig.axes[0].containers if c.get_label() == "RoPE (yours)")
    assert control.get_linestyle() == "--" and control.get_color() == yours.get_color()
    drawn = heatmap(result.by_length, result.rows, "exact_match", renames)
    assert [t.get_text() for t in drawn.axes[0].get_yticklabels()] == names[:4]
    whole = {**renames, "rope (zoo)": "RoPE, shipped", "RoPE (yours)": "RoPE, ours"}
    fig = length_curves(result.runs, result.lengths, result.rows, "exact_match", None, whole)
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [
        "Mine", "RoPE, ours", "RoPE, shipped", "ALiBi", "chance level",
    ]  # fmt: skip
    # renamed into one another's name: a shared label says whose each is
    fig = length_curves(
        result.runs, result.lengths, result.rows, "exact_match", None, {"mine": "alibi"}
    )
    assert [t.get_text() for t in fig.legends[0].get_texts()][:4] == [
        "alibi (yours)", "rope (yours)", "rope (zoo)", "alibi (zoo)",
    ]  # fmt: skip


def test_a_lone_grey_row_is_one_row():
    """Over ``FEW_ROWS`` rows, a baseline with one grey row says ``1 row``, not ``1 rows``."""
    result = beside(["rope", "alibi"], yours=("a", "b", "c", "d", "rope"))
    fig = length_curves(result.runs, result.lengths, result.rows, "exact_match")
    assert "zoo: 1 row (grey)" in [t.get_text() for t in fig.legends[0].get_texts()]


def test_labels_name_only_what_rows_differ_in_short_and_renamed():
    """Issue 45: labels were config strings (``rope · model.net.attn_scale=ssmax ·
    pe.layers=default``) with settings every row shares or leaves at default."""
    from pelab.analysis.plot_styles import row_labels

    rows = ["pe", "model.net.attn_scale", "run_name", "pe.layers"]
    keys = [
        ("rope", "ssmax", "study", "-"),
        ("rope", "-", "study", "-"),
        ("none", "logn", "study", "[none,rope]"),
    ]
    assert list(row_labels(keys, rows).values()) == [
        "rope · attn_scale=ssmax", "rope", "none · attn_scale=logn · layers=[none,rope]",
    ]  # fmt: skip
    hybrid = "none · attn_scale=logn · layers=[none,rope]"  # a whole label, or a part of one
    renamed = row_labels(keys, rows, {"attn_scale=ssmax": "SSMax", "rope": "RoPE", hybrid: "h"})
    assert list(renamed.values()) == ["RoPE · SSMax", "RoPE", "h"]


def test_rows_on_one_point_show_as_concentric_markers_and_a_control_takes_its_rows_colour():
    """Issue 45: five lines at 0 beyond the training lengths showed only the last colour; with
    ``--baseline`` the control of your row was one of 25 grey lines."""
    from pelab.analysis.baseline import ORIGIN
    from pelab.analysis.plot_styles import BASELINE_STYLE, row_styles

    zoo = ["b", "w", "x", "y", "z"]  # 8 rows: over FEW_ROWS, the zoo's other rows grey
    runs = pd.DataFrame({"pe": ["a", "b", "c", *zoo], ORIGIN: ["yours"] * 3 + ["zoo"] * 5})
    styles = row_styles(runs, ["pe", ORIGIN])
    sizes = [styles[(pe, "yours")].size for pe in "abc"]
    assert sizes == [8.0, 5.5, 3.0]  # the first largest: the later ones ring inside it
    control = styles[("b", "zoo")]
    assert control.color == styles[("b", "yours")].color and control.linestyle == "--"
    assert control.thin and all(styles[(pe, "zoo")] == BASELINE_STYLE for pe in "wxyz")
    # issue 54: up to FEW_ROWS rows, the zoo's rows take the next colours, markers shrinking
    # over all of them; the control is drawn in full (error bars), still dashed in b's colour
    few = row_styles(runs[runs["pe"] != "w"].iloc[:6], ["pe", ORIGIN])
    coloured = [("a", "yours"), ("b", "yours"), ("c", "yours"), ("x", "zoo"), ("y", "zoo")]
    assert [few[key].size for key in coloured] == [8.0, 6.75, 5.5, 4.25, 3.0]
    assert not few[("b", "zoo")].thin and few[("b", "zoo")].linestyle == "--"
    assert not any(style.thin for style in few.values())
    assert len({few[k].color for k in few}) == 5 and GREY not in {few[k].color for k in few}
