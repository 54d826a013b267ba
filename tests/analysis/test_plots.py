"""Figures: the curves plot the seed means, the training range is shaded, failures are named."""

import numpy as np
import pytest
from matplotlib.colors import same_color, to_rgba_array
from matplotlib.patches import Rectangle

from pelab.analysis.collect import lengths_frame, runs_frame
from pelab.analysis.plots import heatmap, length_curves, read_published, save
from pelab.analysis.table import ablation
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
    fig = heatmap(result.by_task, result.rows, "exact_match")
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert texts.count("failed") == 2  # learned: ID and OOD
    assert "60" in texts and "12" in texts  # rope: ID 60.0, OOD 12.5 -> "12" (rounded half even)
    paths = save(fig, tmp_path / "heatmap")
    assert [p.name for p in paths] == ["heatmap.png", "heatmap.pdf"]
    assert paths[0].read_bytes().startswith(b"\x89PNG") and paths[1].read_bytes()[:4] == b"%PDF"


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
    assert set(colour) == {"none · trainer.max_steps=200", "rope · trainer.max_steps=200"}
    [(name, line)] = [(c.get_label(), c.lines[0]) for c in reverse.containers]
    assert name == "rope · trainer.max_steps=200" and line.get_color() == colour[name]
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
