"""scripts/inspect_pe.py draws valid PNGs for encodings of each family."""

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
