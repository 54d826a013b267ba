"""inspect_pe on untrained encodings whose learned parameters start constant (T5's zero table):
the console and the figure say the drawing is flat, and an illustration, labelled as such,
draws what the encoding does; an encoding that starts with a shape gets no notice."""

import numpy as np
import pytest
import torch

from pelab.errors import ConfigError
from pelab.inspect import pe_figures
from pelab.inspect.encoding_figures import hook_figures
from pelab.inspect.inspect_pe import flat_at_start
from pelab.inspect.untrained import bucket_distances, illustrated, is_flat
from pelab.pe.base import PE_REGISTRY, ModelDims
from tests.inspect.test_inspect_pe import draw

# every registered encoding that draws a flat figure untrained, and those figures
FLAT_AT_START = {
    "t5_bias": {"relative_logit_bias"},
    "t5_bias_2d": {"grid_relative_logit_bias"},
    "urpe": {"relative_logit_bias", "relative_modify_probs"},  # T5's zero table, C = 1
    "cope": {"relative_modify_logits"},  # its position vectors start at zero
}


@pytest.fixture
def drawn_figures(monkeypatch):
    """Every figure drawn, in order, kept open to be read."""
    figures = []
    monkeypatch.setattr(pe_figures.plt, "close", figures.append)
    return figures


def head_curves(fig) -> list[tuple[np.ndarray, np.ndarray]]:
    """(distance, value) of each head's curve in a ``relative_*`` figure."""
    lines = [line for line in fig.axes[0].lines if line.get_label().startswith("head")]
    return [(line.get_xdata(), line.get_ydata()) for line in lines]


def test_an_untrained_t5_bias_says_it_is_flat_and_draws_an_illustration(
    tmp_path, capsys, drawn_figures
):
    paths = draw(tmp_path, "pe=t5_bias", "model.net.d_model=32", "length=24")
    assert [p.stem for p in paths] == ["relative_logit_bias", "relative_logit_bias_illustrative"]
    out = capsys.readouterr().out
    assert "note: pe=t5_bias is untrained and bias.weight = 0 everywhere, so " in out
    assert "relative_logit_bias is flat" in out and "relative_logit_bias_illustrative.png" in out
    flat, shown = drawn_figures
    assert "flat: untrained, bias.weight = 0 everywhere" in flat.axes[0].get_title()
    assert all((value == 0).all() for _, value in head_curves(flat))
    assert "ILLUSTRATIVE, NOT TRAINED: bias.weight = " in shown.axes[0].get_title()
    for distance, value in head_curves(shown):  # falls with distance, in T5's steps
        assert value.max() > value.min()
        assert (np.diff(value) * np.diff(distance) <= 0).all()
    steps = np.diff(head_curves(shown)[0][1])
    assert (steps[-8:] != 0).all() and (steps[:8] == 0).any()  # exact near, bucketed far


def test_an_encoding_that_starts_with_a_shape_gets_no_notice(tmp_path, capsys, drawn_figures):
    paths = draw(tmp_path, "pe=alibi", "model.net.d_model=32", "length=8")
    assert [p.stem for p in paths] == ["relative_logit_bias"]
    assert "note:" not in capsys.readouterr().out
    [fig] = drawn_figures
    assert fig.axes[0].get_title() == pe_figures.HOOK_TITLES["logit_bias"][0]


@pytest.mark.parametrize("causal", [True, False])
def test_every_registered_encoding_that_starts_flat_is_found_and_illustrated(causal):
    for name, encoding in sorted(PE_REGISTRY.items()):
        axes = 2 if name.endswith("_2d") else 1
        dims = ModelDims(32, 4, 1, causal, 64, 12, axes, digit_tokens=tuple(range(2, 12)))
        try:
            pe = encoding(dims).eval()
        except ConfigError:  # an encoding for one model kind only (fox, path: causal)
            assert not causal, name
            continue
        with torch.no_grad():
            causes = flat_at_start(pe, 12)
            assert set(causes) == FLAT_AT_START.get(name, set()), name
            shown, _ = illustrated(pe, {p for params in causes.values() for p in params})
            for figure in hook_figures(shown, 12):
                assert figure.name not in causes or not is_flat(figure.values), figure.name


def test_each_t5_bucket_is_reached_first_at_its_shortest_distance():
    causal = bucket_distances(32, 128, bidirectional=False)
    assert causal[:16].tolist() == list(range(16))  # exact distances, then log-spaced
    assert causal[16:].diff().gt(0).all() and causal[-1] < 128
    both = bucket_distances(32, 128, bidirectional=True)  # 16 per direction, 8 of them exact
    assert both[:8].tolist() == list(range(8)) and both[17:24].tolist() == list(range(1, 8))


def test_flat_means_no_change_with_distance_in_any_head():
    assert is_flat(torch.tensor([[0.0, 0.0, -torch.inf], [1.0, 1.0, 1.0]]))
    assert not is_flat(torch.tensor([[0.0, 0.0], [1.0, 1.5]]))
