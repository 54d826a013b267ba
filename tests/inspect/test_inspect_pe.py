"""pelab.inspect.inspect_pe draws valid PNGs for encodings of each family, of what each adds."""

import math
from pathlib import Path

import pytest
import torch
from omegaconf import DictConfig

from pelab.errors import ConfigError
from pelab.inspect import encoding_figures, inspect_pe, pe_figures
from pelab.load import load_run
from pelab.train import train
from tests.conftest import TINY, compose_config

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def inspect_config(tmp_path: Path, *overrides: str) -> DictConfig:
    """``configs/inspect.yaml`` as ``scripts/inspect_pe.py`` composes it, paths in ``tmp_path``."""
    return compose_config(list(overrides), tmp_path, config_name="inspect")


def draw(tmp_path: Path, *overrides: str) -> list[Path]:
    """``scripts/inspect_pe.py <overrides> out_dir=<tmp_path> wandb=false``, in-process."""
    cfg = inspect_config(tmp_path, *overrides, f"out_dir={tmp_path}", "wandb=false")
    return inspect_pe.run(cfg)


@pytest.mark.parametrize(
    ("pe", "expected"),
    [
        ("sinusoidal", {"absolute", "cosine", "linear_map"}),
        ("alibi", {"relative_logit_bias"}),
        ("rope", {"relative_transform_qk"}),
        ("floater", {"layer_input"}),
        ("complex_order", {"absolute", "cosine"}),
        ("fox", {"relative_input_bias"}),
        ("path", {"relative_input_bias"}),
        ("stick_breaking", {"relative_normalize"}),
        ("dape", {"relative_logit_bias", "relative_modify_logits"}),
        ("abacus", {"absolute", "cosine"}),
    ],
)
def test_draws_the_figures_of_each_family_as_png_files(tmp_path, pe, expected):
    task = "task=addition" if pe == "abacus" else "task=copy"  # abacus needs numbers
    paths = draw(tmp_path, f"pe={pe}", task, "model.net.d_model=32", "length=16")
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
    table, fed = encoding_figures.position_vectors(pe, 10)
    assert fed == "zero token vectors"
    assert torch.allclose(table, pe.position_vectors(Positions.contiguous(10))[0])
    louder = SinusoidalPE(ModelDims(16, 2, 1, True, 64), token_scale="sqrt_d_model")
    assert torch.allclose(encoding_figures.position_vectors(louder, 10)[0], table)


def test_complex_order_is_drawn_from_a_random_token_vector_turning_with_position():
    from pelab.pe.base import ModelDims
    from pelab.pe.complex_order import ComplexOrderPE

    pe = ComplexOrderPE(ModelDims(16, 2, 1, True, 64, vocab_size=12))
    table, fed = encoding_figures.position_vectors(pe, 10)  # [n, 2D] = [Re || Im]
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
        signals = encoding_figures.layer_signals(pe, 10)  # [l, n, d]
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
    distance, response = encoding_figures.relative_curves(pe, "logit_bias", 5)
    assert distance.tolist() == (list(range(4, -1, -1)) if causal else list(range(4, -5, -1)))
    assert torch.equal(response, -pe.slopes[:, None] * distance.abs())


def test_a_layer_schedule_is_drawn_at_its_first_layer_with_the_encoding_and_said(tmp_path):
    """Issue 45: ``pe.layers`` was invisible: layer 0 was drawn whatever ran there (a NoPE layer
    draws a flat line). The first layer running the encoding is drawn, and the title says the
    schedule."""
    from pelab.pe.base import ModelDims
    from pelab.pe.bias import AlibiPE
    from pelab.pe.layered import LayeredPE

    dims = ModelDims(8, 2, 2, True, 16)
    pe = LayeredPE(dims, AlibiPE, ["none", "alibi"])
    assert encoding_figures.drawn_layer(pe) == 1
    distance, response = encoding_figures.relative_curves(pe, "logit_bias", 5)
    assert torch.equal(response, -pe.base.slopes[:, None] * distance.abs())  # not None, not flat
    said = encoding_figures.schedule_note(pe)
    assert said == "pe.layers=[none,alibi]: layer 1 drawn; layers 0 run no encoding"
    notes = []
    original = encoding_figures.HookFigure.plot
    encoding_figures.HookFigure.plot = lambda self, path, note="": notes.append(note)
    try:
        encoding_figures.draw(pe, tmp_path, 5)
    finally:
        encoding_figures.HookFigure.plot = original
    assert notes == [said]
    assert encoding_figures.schedule_note(AlibiPE(dims)) == ""


def test_relative_curve_of_stick_breaking_halves_with_each_step_back():
    from pelab.pe.base import ModelDims
    from pelab.pe.stick_breaking import StickBreakingPE

    pe = StickBreakingPE(ModelDims(8, 2, 1, True, 16))
    distance, response = encoding_figures.relative_curves(
        pe, "normalize", 5
    )  # equal logits: beta 1/2
    expected = torch.where(distance > 0, 0.5 ** distance.clamp(min=1).float(), 0.0)
    assert torch.equal(response, expected.expand(2, -1))


def test_relative_curve_of_fox_is_the_cumulated_log_gates_behind_the_query():
    from pelab.pe.base import ModelDims
    from pelab.pe.fox import ForgettingPE

    pe = ForgettingPE(ModelDims(8, 2, 1, True, 16))
    with torch.no_grad():  # constant gates f = 1/2: the bias is (i - j) log(1/2)
        pe.parts["gate"].gates[0].weight.zero_()
    distance, response = encoding_figures.relative_curves(pe, "input_bias", 5)
    torch.testing.assert_close(response, (distance * math.log(0.5)).expand(2, -1).float())


def test_the_options_are_config_keys_beside_the_training_overrides(tmp_path):
    cfg = inspect_config(
        tmp_path, "pe=rope", "out_dir=/x", "wandb=false", "model=encoder", "length=8"
    )
    assert (cfg.out_dir, cfg.wandb, cfg.length) == ("/x", False, 8)
    assert cfg.pe._target_.endswith("RotaryPE") and cfg.model.kind == "encoder"
    default = inspect_config(tmp_path, "pe=alibi")  # logs/inspect/<pe>, no W&B, 32 positions
    assert (default.out_dir, default.wandb, default.length) == (
        f"{tmp_path}/logs/inspect/alibi",
        False,
        32,
    )


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("wandb=no", "wandb='no': valid choices: true, false"),
        ("length=0", "length=0"),
        ("threads=0", "threads=0: valid choices: auto"),
        ("logger=none wandb=true", "wandb=true logs the figures to W&B, but the logger is not"),
    ],
)
def test_a_bad_option_fails_early_with_the_valid_choices(tmp_path, override, message):
    with pytest.raises(ConfigError, match=message):
        inspect_pe.run(inspect_config(tmp_path, *override.split()))
    assert not (tmp_path / "logs").exists()  # nothing built or drawn


def test_the_threads_are_chosen_by_the_drawn_model(tmp_path, caplog):
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        with caplog.at_level("INFO", logger="pelab.threads"):
            draw(tmp_path, "pe=alibi", "model.net.d_model=32", "length=8")
        assert torch.get_num_threads() == 1  # a small model (pelab.threads)
        assert "torch threads: 1 (model of " in caplog.text
        draw(tmp_path, "pe=alibi", "model.net.d_model=32", "length=8", "threads=2")
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_the_figures_go_to_wandb_only_when_asked(tmp_path, monkeypatch):
    """No W&B run by default (only training and re-evaluation make one); ``wandb=true``: one,
    with the encoding and the overrides, in the W&B logger's project and mode."""
    logged = []
    monkeypatch.setattr(inspect_pe, "log_to_wandb", lambda *args: logged.append(args))
    drawn = ("pe=alibi", "model.net.d_model=32", f"out_dir={tmp_path}")
    inspect_pe.run(inspect_config(tmp_path, *drawn))
    assert logged == []
    paths = inspect_pe.run(inspect_config(tmp_path, *drawn, "wandb=true"))
    [(figures, name, out_dir, config, logger)] = logged
    assert (figures, name, out_dir) == (paths, "alibi", tmp_path)
    assert config["pe"] == "alibi" and config["dims"]["d_model"] == 32
    assert "pe=alibi" in config["overrides"] and "wandb=true" in config["overrides"]
    assert (logger.project, logger.mode) == ("pelab", "offline")


@pytest.mark.integration
def test_a_trained_checkpoint_is_drawn_with_its_trained_encoding_and_attention_maps(tmp_path):
    """``ckpt_path=``: the figures of the run's trained encoding (a T5 bias that moved from its
    zero initialisation, not the flat line of an untrained one) and attention maps at an
    in-distribution and an out-of-distribution length, one panel per layer and head."""
    trained = compose_config(
        [
            *TINY,
            "pe=t5_bias",
            "logger=csv",
            "trainer.max_steps=20",
            "trainer.val_check_interval=10",
        ],
        tmp_path / "train",
    )
    train(trained)
    ckpt = Path(trained.paths.output_dir) / "checkpoints" / "best.ckpt"
    paths = draw(tmp_path / "trained", f"ckpt_path={ckpt}")
    assert {p.stem for p in paths} == {
        "relative_logit_bias",
        "attention_len8_blocks.0.attn",
        "attention_len32_blocks.0.attn",
    }
    assert all(p.read_bytes().startswith(PNG_MAGIC) for p in paths)
    untrained = inspect_pe.build_model(trained, inspect_pe.build_task(trained)).net.pe
    loaded = load_run(trained.paths.output_dir).model.net.pe
    curves = [
        encoding_figures.relative_curves(pe, "logit_bias", 16)[1] for pe in (untrained, loaded)
    ]
    assert not torch.equal(*curves) and curves[1].std() > 0  # trained: no longer flat


@pytest.mark.integration
def test_attention_maps_are_drawn_per_layer_and_head_from_the_recorded_probabilities(
    tmp_path, monkeypatch
):
    trained = compose_config([*TINY, "logger=csv", "model.net.n_layers=2"], tmp_path / "train")
    train(trained)
    drawn, marked = {}, []
    monkeypatch.setattr(
        inspect_pe,
        "plot_attention",
        lambda probs, tokens, title, path, trained=0: (
            drawn.__setitem__(path.name, (probs, title)),
            marked.append(trained),
        ),
    )
    loaded = load_run(trained.paths.output_dir)
    paths = inspect_pe.attention_figures(loaded, tmp_path)
    # lengths 8 (in distribution) and 32 (beyond), one figure per module (issue 54)
    assert (
        [p.name for p in paths]
        == list(drawn)
        == [
            "attention_len8_blocks.0.attn.png",
            "attention_len8_blocks.1.attn.png",
            "attention_len32_blocks.0.attn.png",
            "attention_len32_blocks.1.attn.png",
        ]
    )
    # the training length is marked: BOS, 8 prompt tokens, SEP and 8 answer tokens
    assert marked == [loaded.task.max_train_sequence_length()] * 4 == [18] * 4
    what = f"{loaded.model.net.pe.pe_name} on {loaded.task.task_name}"
    assert drawn["attention_len32_blocks.1.attn.png"][1] == (
        f"{what}, blocks.1.attn, length 32 (beyond training)"
    )
    n = 1 + 32 + 1 + 32 - 1  # BOS prompt SEP answer, the last answer token not fed
    for name in ("attention_len32_blocks.0.attn.png", "attention_len32_blocks.1.attn.png"):
        probs = drawn[name][0]
        assert probs.shape == (trained.model.net.n_heads, n, n)
        torch.testing.assert_close(probs.sum(-1), torch.ones(probs.shape[:2]))
        assert torch.all(probs.triu(1) == 0)  # causal


@pytest.mark.integration
def test_a_trained_checkpoints_figures_go_to_its_own_run_directory(tmp_path):
    """Issue 28: ``ckpt_path=`` without ``out_dir`` once wrote to ``logs/inspect/<pe>/`` (the
    default encoding's name, not even the run's), so a second checkpoint overwrote the first
    one's maps. Each run's figures now go to ``<run dir>/inspect/``."""
    dirs = []
    for name in ("a", "b"):
        trained = compose_config(
            [*TINY, "pe=alibi", "logger=csv", "trainer.max_steps=2"], tmp_path / name
        )
        train(trained)
        run_dir = Path(trained.paths.output_dir)
        ckpt = run_dir / "checkpoints" / "best.ckpt"
        cfg = inspect_config(tmp_path / name, f"ckpt_path={ckpt}", "wandb=false")
        assert Path(cfg.out_dir) == run_dir / "inspect"
        paths = inspect_pe.run(cfg)
        assert paths and all(p.parent == run_dir / "inspect" for p in paths)
        dirs.append(run_dir)
    assert dirs[0] != dirs[1]
    assert all((d / "inspect" / "attention_len32_blocks.0.attn.png").exists() for d in dirs)
    # issue 45: the run directory itself (its best checkpoint) was glued onto itself
    # ("ckpt_path=<dir>.ckpt does not exist"); a path that does not exist says so plainly
    cfg = inspect_config(tmp_path / "a", f"ckpt_path={dirs[0]}", "wandb=false")
    assert Path(cfg.out_dir) == dirs[0] / "inspect" and inspect_pe.run(cfg)
    missing = inspect_config(tmp_path / "a", f"ckpt_path={tmp_path / 'nothere'}", "wandb=false")
    with pytest.raises(ConfigError, match=r"ckpt_path=.*nothere does not exist: give a run dir"):
        inspect_pe.run(missing)
    untrained = inspect_config(tmp_path / "c", "pe=alibi")
    assert Path(untrained.out_dir) == Path(untrained.paths.log_dir) / "inspect" / "alibi"


def test_an_attention_map_has_a_colour_bar_and_marks_the_training_length(tmp_path, monkeypatch):
    figures = []
    monkeypatch.setattr(pe_figures.plt, "close", figures.append)  # keep the figure to look at
    probs = torch.softmax(torch.randn(2, 12, 12), -1)
    pe_figures.plot_attention(probs, 4, "t", tmp_path / "a.png", trained=8)
    [fig] = figures
    assert (tmp_path / "a.png").read_bytes().startswith(PNG_MAGIC)
    bars = [ax for ax in fig.axes if ax.get_ylabel() == "attention probability"]
    assert len(bars) == 1  # one colour bar for every panel
    for ax in fig.axes[:2]:  # the two heads
        red = [line for line in ax.lines if line.get_color() == "red"]
        assert sorted(tuple(line.get_xdata()) + tuple(line.get_ydata()) for line in red) == sorted(
            [(7.5, 7.5, 0, 1), (0, 1, 7.5, 7.5)]
        )
    assert "longest training sequence, 8 tokens" in fig.get_suptitle()
