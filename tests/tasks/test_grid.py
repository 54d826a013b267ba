"""The grid task: solver against the plain-Python reference, the exact token coordinates, and
whole runs of every 2-D encoding on it (decoder and encoder)."""

import json
from pathlib import Path

import pytest
import torch

from pelab.assembly import build_model, build_task
from pelab.errors import ConfigError
from pelab.tasks import TASK_REGISTRY
from pelab.tasks.grid import GridTask
from pelab.tokens import BOS, N_SPECIAL, SEP
from pelab.train import train
from tests.tasks.run_check import learn

MODES = ["transpose", "copy"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("side", [1, 2, 5, 9])
def test_generated_answers_equal_the_reference_solver(mode, side):
    task = GridTask(mode=mode)
    prompt, answer = task.sample(40, side, torch.Generator().manual_seed(side))
    assert prompt.shape == answer.shape == (40, side * side)
    for p, a in zip(prompt.tolist(), answer.tolist(), strict=True):
        assert a == task.reference(p)


def test_hand_written_examples():
    # the 3 x 3 grid  a b c / d e f / g h i, read row by row
    grid = [3, 4, 5, 6, 7, 8, 9, 10, 11]
    transposed = [3, 6, 9, 4, 7, 10, 5, 8, 11]  # a d g / b e h / c f i
    for task in (GridTask(mode="transpose"), GridTask(mode="copy")):
        expected = transposed if task.mode == "transpose" else grid
        assert task.solve(torch.tensor([grid])).tolist() == [expected]
        assert task.reference(grid) == expected


def test_grid_is_registered_and_its_lengths_are_sides():
    task = TASK_REGISTRY["grid"](train_lengths=[2, 5], eval_lengths=[3, 5, 8])
    assert task.position_dims == 2
    assert task.prompt_length(5) == task.answer_length(5) == 25
    assert [task.in_distribution(s) for s in task.eval_lengths] == [True, True, False]
    assert task.max_sequence_length() == 64 + 64 + 2


def test_coordinates_of_a_two_by_two_grid_by_hand():
    # col:    0    1    2    3    4    5
    # row 0:  BOS  p00  p01  SEP  a00  a01
    # row 1:       p10  p11       a10  a11
    coords = GridTask().coordinates(4, 4).tolist()
    bos, prompt, sep, answer = coords[0], coords[1:5], coords[5], coords[6:]
    assert bos == [0, 0] and sep == [0, 3]
    assert prompt == [[0, 1], [0, 2], [1, 1], [1, 2]]
    assert answer == [[0, 4], [0, 5], [1, 4], [1, 5]]


@pytest.mark.parametrize("side", [1, 3, 6])
def test_coordinate_properties(side):
    coords = GridTask().coordinates(side * side, side * side)
    n = side * side
    assert coords.shape == (2 * n + 2, 2) and coords.dtype == torch.long
    assert len({tuple(c) for c in coords.tolist()}) == 2 * n + 2  # every token has its own cell
    # row 0, in sequence order, is the 1-D layout of one grid row: columns 0 .. 2 side + 1
    row0 = coords[coords[:, 0] == 0]
    assert row0[:, 1].tolist() == list(range(2 * side + 2))
    # each answer cell sits side + 1 columns right of the prompt cell with the same index
    assert torch.equal(
        coords[n + 2 :] - coords[1 : n + 1], torch.tensor([0, side + 1]).expand(n, 2)
    )
    # prompt cells are the grid, row by row
    rows, cols = coords[1 : n + 1].unbind(-1)
    assert rows.tolist() == [r for r in range(side) for _ in range(side)]
    assert (cols - 1).tolist() == [c for _ in range(side) for c in range(side)]


def test_tokens_stay_in_the_symbol_range_and_sampling_follows_the_generator():
    task = GridTask(num_symbols=5)
    prompt, answer = task.sample(100, 4, torch.Generator().manual_seed(0))
    for t in (prompt, answer):
        assert t.min() >= N_SPECIAL and t.max() < task.vocab_size == N_SPECIAL + 5
    again = task.sample(100, 4, torch.Generator().manual_seed(0))
    other = task.sample(100, 4, torch.Generator().manual_seed(1))
    assert torch.equal(prompt, again[0]) and not torch.equal(prompt, other[0])


def test_the_mode_keys_the_evaluation_cache():
    assert GridTask(mode="copy").spec() != GridTask(mode="transpose").spec()


def test_bad_settings_are_refused_with_the_value_and_the_choices():
    with pytest.raises(ConfigError, match="task.mode='rotate' is not a choice; .*transpose, copy"):
        GridTask(mode="rotate")
    with pytest.raises(ConfigError, match=r"12 is not a square"):
        GridTask().solve(torch.zeros(1, 12, dtype=torch.long))
    with pytest.raises(ConfigError, match=r"no in-distribution length"):
        GridTask(train_lengths=[2, 5], eval_lengths=[8])


def test_the_model_sees_the_grid_coordinates(tiny_cfg):
    cfg = tiny_cfg("task=grid", "pe=rope_2d")
    model = build_model(cfg, build_task(cfg))
    prompt = torch.randint(N_SPECIAL, 10, (2, 9))
    positions = model.sequence_positions(prompt, 9)
    assert torch.equal(positions[0], GridTask().coordinates(9, 9))
    tokens = [BOS, *prompt[0].tolist(), SEP]
    assert len(tokens) == 11 and positions.shape == (1, 20, 2)


# each encoding once, both model kinds twice; the other pairs of the matrix are marked slow
FAST_RUNS = [
    ("sinusoidal_2d", "decoder"),
    ("rope_2d", "encoder"),
    ("t5_bias_2d", "decoder"),
    ("none", "encoder"),
]
RUNS = [
    pair if pair in FAST_RUNS else pytest.param(*pair, marks=pytest.mark.slow)
    for pair in [
        (pe, model)
        for pe in ("sinusoidal_2d", "rope_2d", "t5_bias_2d", "none")
        for model in ("decoder", "encoder")
    ]
]


@pytest.mark.parametrize(("pe", "model"), RUNS)
@pytest.mark.integration
def test_every_2d_encoding_trains_on_the_grid_end_to_end(tiny_cfg, pe, model):
    cfg = tiny_cfg(
        "task=grid",
        f"pe={pe}",
        f"model={model}",
        "trainer.max_steps=2",
        "trainer.val_check_interval=1",
        "task.train_lengths=[2,3]",
        "task.eval_lengths=[2,4]",
    )
    train(cfg)
    res = json.loads((Path(cfg.paths.output_dir) / "results.json").read_text())
    assert res["status"] == "completed" and res["choices"]["task"] == "grid"
    assert list(res["metrics"]["test"]) == ["2", "4"]


def test_a_one_dimensional_encoding_on_the_grid_fails_before_training(tiny_cfg):
    cfg = tiny_cfg("task=grid", "pe=rope")
    with pytest.raises(ConfigError, match=r"pe=rope reads 1-D positions .* rope_2d"):
        build_model(cfg, build_task(cfg))


def test_randomized_positions_refuse_the_grid(tiny_cfg):
    cfg = tiny_cfg("task=grid", "pe=rope_2d", "positions=randomized")
    with pytest.raises(ConfigError, match=r"positions=randomized samples 1-D positions"):
        build_model(cfg, build_task(cfg))


@pytest.mark.slow
def test_a_small_model_learns_to_transpose_in_distribution(tmp_path):
    """RoPE-2D, sides 2-4: measured 100% exact match (seeds 0 and 1) in 2000 steps
    (sinusoidal_2d: 98%)."""
    lengths = ("task.train_lengths=[2,4]", "task.eval_lengths=[4]")
    record = learn(tmp_path, "grid", 2000, *lengths, pe="rope_2d")
    assert record["metrics"]["test_id"]["exact_match"] >= 0.9
