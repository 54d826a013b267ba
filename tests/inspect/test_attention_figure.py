"""Issue 54: an attention map a two-column paper takes unedited. One figure per attention module
(heads side by side, 4 to a row), 3.3 in wide with no text under 7 pt, so printed at a column's
width every text is at least 7 pt; integer position ticks; the title mentions the red training-
length lines only where they are drawn."""

import pytest
import torch
from matplotlib.text import Text
from PIL import Image

from pelab.inspect import pe_figures
from pelab.inspect.pe_figures import COLUMN_WIDTH, PROMPT_NOTE, TRAINED_NOTE


def drawn(tmp_path, monkeypatch, heads: int, n: int, prompt: int, trained: int, title: str):
    """``plot_attention`` of causal random maps ``[heads, n, n]``: the figure (kept open) and
    its PNG."""
    figures = []
    monkeypatch.setattr(pe_figures.plt, "close", figures.append)
    logits = torch.randn(heads, n, n, generator=torch.Generator().manual_seed(0))
    probs = torch.softmax(logits.masked_fill(torch.ones(n, n).triu(1).bool(), -torch.inf), -1)
    path = tmp_path / "a.png"
    pe_figures.plot_attention(probs, prompt, title, path, trained=trained)
    [fig] = figures
    return fig, path


def texts(fig) -> list[Text]:
    """Every visible, non-empty text of ``fig``: titles, labels, tick labels, the colour bar's."""
    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text()]


@pytest.mark.parametrize("heads", [8, 2])
def test_a_module_is_one_column_wide_and_every_text_at_least_7_pt(tmp_path, monkeypatch, heads):
    """Before: 24 panels (3 modules x 8 heads) on 26.6 x 9.6 in, 3192 x 1152 px, panel titles of
    8 pt that a 3.3 in column scales to 1 pt. Now one module a figure, 3.3 in wide: the PNG is
    990 px at 300 dpi, every text is 7 pt or more, and nothing drawn passes its edges."""
    title = "transformer_xl on reverse, blocks.0.attn, length 32 (beyond training)"
    fig, path = drawn(tmp_path, monkeypatch, heads, 65, 34, 18, title)
    width, height = fig.get_size_inches()
    assert width == pytest.approx(COLUMN_WIDTH) and height < 3.5
    assert Image.open(path).size[0] == round(COLUMN_WIDTH * 300)
    panels = [ax for ax in fig.axes if ax.images and ax.get_title()]
    assert [ax.get_title() for ax in panels] == [f"head {h}" for h in range(heads)]
    rows = {round(ax.get_position().y0, 3) for ax in panels}
    assert len(rows) == -(-heads // 4)  # 4 heads to a row
    sizes = {t.get_text(): t.get_fontsize() for t in texts(fig)}
    assert min(sizes.values()) >= 7, {t: s for t, s in sizes.items() if s < 7}
    drawn_box = fig.get_tightbbox(fig.canvas.get_renderer())  # inches: all that is drawn
    assert drawn_box.x0 >= -0.01 and drawn_box.x1 <= COLUMN_WIDTH + 0.01


def test_position_ticks_are_integers(tmp_path, monkeypatch):
    """Before: 0.0, 2.5, 5.0, ... on 17 positions; now whole positions, inside the panel."""
    fig, _ = drawn(tmp_path, monkeypatch, 8, 17, 10, 18, "t")
    fig.canvas.draw()
    for ax in [ax for ax in fig.axes if ax.images]:
        for axis in (ax.xaxis, ax.yaxis):
            ticks = [t for t in axis.get_majorticklocs() if -0.5 <= t <= 16.5]
            assert len(ticks) >= 2 and all(float(t).is_integer() for t in ticks), ticks
        labels = [t.get_text() for t in ax.get_xticklabels() + ax.get_yticklabels()]
        assert all(label.lstrip("−-").isdigit() for label in labels if label), labels


@pytest.mark.parametrize(
    ("n", "trained", "red"),
    [(17, 18, False), (65, 18, True), (65, 0, False)],
    ids=["in distribution", "beyond training", "no training length"],
)
def test_the_title_mentions_the_red_lines_only_where_they_are_drawn(
    tmp_path, monkeypatch, n, trained, red
):
    """Before: every map with a training length promised red dashes, also at a length inside
    it, where none can be drawn."""
    fig, _ = drawn(tmp_path, monkeypatch, 2, n, 10, trained, "rope on copy, blocks.0.attn")
    lines = [line for ax in fig.axes for line in ax.lines if line.get_color() == "red"]
    assert bool(lines) == red
    title = fig.get_suptitle().split("\n")
    notes = [PROMPT_NOTE] + [TRAINED_NOTE.format(trained)] * red
    assert title == ["rope on copy, blocks.0.attn", *notes]
    assert fig.get_suptitle().count("red") == red
