"""scripts/inspect_pe.py draws valid PNGs for encodings of each family, of what each adds."""

import importlib.util
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "inspect_pe.py"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def load_script():
    spec = importlib.util.spec_from_file_location("inspect_pe", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("pe", "expected"),
    [
        ("sinusoidal", {"absolute", "cosine", "linear_map"}),
        ("alibi", {"relative_logit_bias"}),
        ("rope", {"relative_transform_qk"}),
        ("floater", {"layer_input"}),
        ("complex_order", {"absolute", "cosine"}),
    ],
)
def test_draws_the_figures_of_each_family_as_png_files(tmp_path, pe, expected):
    paths = load_script().main(
        [f"pe={pe}", "model.net.d_model=32", f"out_dir={tmp_path}", "length=16", "--no-wandb"]
    )
    assert {path.stem for path in paths} == expected
    assert sorted(tmp_path.glob("*.png")) == sorted(paths)
    for path in paths:
        data = path.read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 1000, path


def test_additive_encodings_are_drawn_from_zero_token_vectors():
    from pelab.pe.absolute import SinusoidalPE
    from pelab.pe.base import ModelDims
    from pelab.positions import Positions

    pe = SinusoidalPE(ModelDims(16, 2, 1, True, 64))
    table, fed = load_script().position_vectors(pe, 10)
    assert fed == "zero token vectors"
    assert torch.allclose(table, pe.table(Positions.contiguous(10))[0])


def test_complex_order_is_drawn_from_a_random_token_vector_turning_with_position():
    from pelab.pe.base import ModelDims
    from pelab.pe.complex_order import ComplexOrderPE

    pe = ComplexOrderPE(ModelDims(16, 2, 1, True, 64, vocab_size=12))
    table, fed = load_script().position_vectors(pe, 10)  # [n, 2D] = [Re || Im]
    assert "random" in fed
    re, im = table.chunk(2, dim=-1)
    modulus = re**2 + im**2  # a rotation per complex dim: the same at every position
    assert modulus.min() > 0 and torch.allclose(modulus, modulus[0].expand_as(modulus))
    assert not torch.allclose(table[1:], table[0].expand(9, -1), atol=1e-3)  # turns with p


def test_floater_is_drawn_as_the_position_vectors_it_adds_to_each_block():
    from pelab.pe.base import ModelDims
    from pelab.pe.floater import FloaterPE
    from pelab.positions import Positions

    torch.manual_seed(0)
    pe = FloaterPE(ModelDims(16, 2, 3, True, 64))
    with torch.no_grad():
        signals = load_script().layer_signals(pe, 10)  # [l, n, d]
        expected = pe.table(Positions.contiguous(10))[0].transpose(0, 1)
    assert signals.shape == (3, 10, 16) and torch.allclose(signals, expected)
    change = (signals - signals[:, :1]).abs().amax(dim=-1)  # [l, n]: from position 0
    assert (change[:, 1:] > 0).all()  # every block sees every position differently
    assert not torch.allclose(signals[0], signals[1])  # each block has its own vectors


@pytest.mark.parametrize("causal", [True, False])
def test_relative_curve_of_alibi_is_minus_slope_times_distance(causal):
    from pelab.pe.base import ModelDims
    from pelab.pe.bias import AlibiPE

    pe = AlibiPE(ModelDims(8, 2, 1, causal, 16))
    distance, response = load_script().relative_curves(pe, "logit_bias", 5)
    assert distance.tolist() == (list(range(4, -1, -1)) if causal else list(range(4, -5, -1)))
    assert torch.equal(response, -pe.slopes[:, None] * distance.abs())


def test_script_options_are_separated_from_hydra_overrides():
    options, overrides = load_script().split_arguments(
        ["pe=rope", "out_dir=/x", "wandb=false", "model=encoder", "length=8"]
    )
    assert overrides == ["pe=rope", "model=encoder"]
    assert options == {"out_dir": "/x", "wandb": "false", "length": "8"}
