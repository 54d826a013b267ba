"""pelab.inspect.inspect_pe on encodings of 2-D positions: heatmaps over (Δrow, Δcol)."""

import pytest
import torch

from pelab.inspect import encoding_figures
from pelab.pe.base import ModelDims
from pelab.pe.rope_2d import AxialRotaryPE
from pelab.pe.sinusoidal_2d import Sinusoidal2dPE
from pelab.pe.t5_bias_2d import T5Bias2dPE
from tests.inspect.test_inspect_pe import PNG_MAGIC, draw
from tests.pe.test_bias import reference_bucket


def dims(heads: int = 2) -> ModelDims:
    return ModelDims(16, heads, 1, True, 64, 10, position_dims=2)


@pytest.mark.parametrize(
    ("pe", "expected"),
    [
        ("sinusoidal_2d", {"grid_cosine"}),
        ("rope_2d", {"grid_relative_transform_qk"}),
        ("t5_bias_2d", {"grid_relative_logit_bias", "grid_relative_logit_bias_illustrative"}),
    ],
)
def test_draws_the_heatmaps_of_each_2d_encoding_as_png_files(tmp_path, pe, expected):
    paths = draw(tmp_path, f"pe={pe}", "task=grid", "length=8")
    assert {path.stem for path in paths} == expected
    for path in paths:
        data = path.read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 1000, path


def test_bias_heatmap_is_the_row_plus_the_column_table_at_each_offset():
    torch.manual_seed(0)
    pe = T5Bias2dPE(dims())
    for table in (pe.row_bias, pe.col_bias):
        torch.nn.init.normal_(table.weight)
    heatmap = encoding_figures.grid_relative(pe, "logit_bias", 3)  # [h, Δrow, Δcol]
    assert heatmap.shape == (2, 7, 7)
    for dr in range(-3, 4):
        for dc in range(-3, 4):
            # offset = query - key, the bucket reads key - query
            row = pe.row_bias.weight[reference_bucket(-dr, True, 32, 128)]
            col = pe.col_bias.weight[reference_bucket(-dc, True, 32, 128)]
            assert torch.allclose(heatmap[:, dr + 3, dc + 3], row + col), (dr, dc)


def test_rope_heatmap_at_offset_zero_is_the_plain_score():
    pe = AxialRotaryPE(dims(heads=1))
    heatmap = encoding_figures.grid_relative(pe, "transform_qk", 2)
    q, k = torch.randn(2, 1, 1, 1, 16, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(heatmap[0, 2, 2], (q @ k.transpose(-1, -2))[0, 0, 0, 0] / 4, atol=1e-5)
    assert not torch.allclose(heatmap[0, 2, 3], heatmap[0, 3, 2], atol=1e-4)  # axes differ


def test_cosine_heatmap_is_one_at_the_centre_and_symmetric():
    cosine = encoding_figures.grid_cosine(Sinusoidal2dPE(dims()), 3)
    assert cosine.shape == (7, 7) and cosine[3, 3] == pytest.approx(1.0)
    assert torch.allclose(cosine, cosine.flip(0, 1), atol=1e-5)  # cos of sinusoids: even in Δ
    assert (cosine < 1 - 1e-3).sum() == 48  # every other cell differs from the centre
