import json
from pathlib import Path

import pytest
import torch

from pelab.assembly import build_model, build_task
from pelab.errors import ConfigError
from pelab.positions import (
    ContiguousPositions,
    Positions,
    RandomizedPositions,
    TaskCoordinates,
    build_sampler,
)
from pelab.tasks import TASK_REGISTRY
from pelab.train import train


def test_randomized_positions_are_sorted_distinct_and_in_range():
    sampler = RandomizedPositions(max_position=50)
    pos = sampler(64, 9, 9, torch.Generator().manual_seed(0))  # BOS, 9, SEP, 9: 20 tokens
    assert pos.shape == (64, 20)
    assert (pos[:, 1:] > pos[:, :-1]).all()  # strictly increasing: sorted and distinct
    assert pos.min() >= 0 and pos.max() < 50
    assert len({tuple(row) for row in pos.tolist()}) > 60  # rows are drawn independently
    assert pos.max() > 40  # positions far beyond n are used


def test_randomized_positions_follow_the_generator():
    sampler = RandomizedPositions(max_position=100)
    a = sampler(4, 4, 4, torch.Generator().manual_seed(3))
    assert torch.equal(a, sampler(4, 4, 4, torch.Generator().manual_seed(3)))
    assert not torch.equal(a, sampler(4, 4, 4, torch.Generator().manual_seed(4)))


def test_contiguous_positions_count_the_canonical_sequence_from_zero():
    assert ContiguousPositions()(4, 3, 5).tolist() == [list(range(10))]  # BOS 3 SEP 5


def test_a_task_with_coordinates_gets_them_as_its_sampler():
    task = TASK_REGISTRY["grid"]()
    sampler = build_sampler(ContiguousPositions(), task)
    assert isinstance(sampler, TaskCoordinates)
    n = task.prompt_length(4)
    assert torch.equal(sampler(3, n, n), task.coordinates(n, n)[None])
    one_d = TASK_REGISTRY["copy"]()
    assert isinstance(build_sampler(ContiguousPositions(), one_d), ContiguousPositions)
    with pytest.raises(ConfigError, match="2-D coordinates; use positions=contiguous"):
        build_sampler(RandomizedPositions(64), task)


def test_every_conversion_to_positions_goes_through_one_place():
    assert Positions.of(None, 3, offset=2).q.tolist() == [[2, 3, 4]]
    assert Positions.of(torch.tensor([5, 7]), 2).q.tolist() == [[5, 7]]
    grid = torch.zeros(1, 4, 2)
    assert Positions.of(grid, 4).position_dims == 2
    assert torch.equal(Positions.from_tensor(torch.tensor([1, 2])).k, torch.tensor([[1, 2]]))
    assert torch.equal(Positions.contiguous(2).q, torch.tensor([[0, 1]]))


def test_max_position_must_cover_the_longest_sequence(tiny_cfg):
    cfg = tiny_cfg("positions=randomized", "positions.max_position=40")
    with pytest.raises(ConfigError, match=r"max_position=40 is shorter than .* \(66 tokens\)"):
        build_model(cfg, build_task(cfg))


def test_a_learned_table_grows_to_every_position_the_sampler_can_draw(tiny_cfg):
    cfg = tiny_cfg("positions=randomized", "pe=learned")
    model = build_model(cfg, build_task(cfg))
    assert model.net.pe.table.num_embeddings == cfg.positions.max_position


def test_training_and_evaluation_see_randomized_positions(tiny_cfg):
    cfg = tiny_cfg("positions=randomized", "pe=sinusoidal")
    seen = []
    model = build_model(cfg, build_task(cfg))
    forward = model.net.forward
    model.net.forward = lambda tokens, positions=None, *cache: (
        seen.append(positions) or forward(tokens, positions, *cache)
    )
    model.log = lambda *a, **k: None
    prompt = torch.randint(3, 10, (2, 4))
    model.training_step(((prompt, prompt),), 0)  # one member's batch
    for split in ("val", "test"):  # one teacher-forced pass; greedy decoding, a step per token
        first = len(seen)
        model._evaluate(split, {"prompt": prompt, "answer": prompt}, 0, 0)
        again = len(seen)
        model._evaluate(split, {"prompt": prompt, "answer": prompt}, 0, 0)
        assert torch.equal(seen[again], seen[first])  # the same positions each time
    assert all(p.shape[0] == 2 for p in seen)
    assert seen[0].max() >= 10  # not 0..n-1


@pytest.mark.integration
def test_a_randomized_run_completes(tiny_cfg):
    cfg = tiny_cfg("positions=randomized", "pe=rope")
    train(cfg)
    res = json.loads((Path(cfg.paths.output_dir) / "results.json").read_text())
    assert res["status"] == "completed" and res["choices"]["positions"] == "randomized"


def test_randomized_positions_refuse_a_task_with_its_own_coordinates():
    with pytest.raises(ConfigError, match="2-D coordinates; use positions=contiguous"):
        RandomizedPositions(64).check(10, position_dims=2)


def test_randomized_positions_per_batch_and_per_layer():
    """``per=batch``: one draw for the batch (the RPE code's); ``per=sequence`` draws what it drew
    before these options existed (the same generator calls); ``layers=each``: a draw for the
    embedding and one per layer, each sorted and distinct."""
    generator = lambda: torch.Generator().manual_seed(5)  # noqa: E731
    scores = torch.rand(6, 50, generator=generator())
    before = scores.topk(8, dim=-1).indices.sort(dim=-1).values  # the sampler's earlier draw
    assert torch.equal(RandomizedPositions(50)(6, 3, 3, generator()), before)
    batch = RandomizedPositions(50, per="batch")(6, 3, 3, generator())
    assert batch.shape == (1, 8) and torch.equal(batch, before[:1])
    layered = RandomizedPositions(50, layers="each").for_layers(2)(6, 3, 3, generator())
    assert layered.shape == (6, 8, 3)
    assert (layered[:, 1:] > layered[:, :-1]).all()
    assert not torch.equal(layered[..., 0], layered[..., 1])
    assert RandomizedPositions(50).for_layers(2).draws == 1  # shared: the draw serves every layer
    with pytest.raises(ConfigError, match=r"positions.layers='all' is not a choice"):
        RandomizedPositions(50, layers="all")
