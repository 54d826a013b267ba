"""Abacus (McLeish et al. 2024): digit places within numbers, the training offset, the table rows
it adds, its refusals, and runs through the model."""

import json
from pathlib import Path

import pytest
import torch
from torch.func import vmap

from pelab.assembly import build_model, build_task
from pelab.errors import ConfigError
from pelab.models.dims import NetDims
from pelab.models.transformer import Transformer
from pelab.pe.abacus import AbacusPE, digit_places
from pelab.pe.base import ModelDims
from pelab.positions import Positions
from pelab.tasks import TASK_REGISTRY
from pelab.tokens import BLANK, BOS, N_SPECIAL, SEP
from pelab.train import train
from tests.conftest import compose_config

DIGITS = tuple(range(N_SPECIAL, N_SPECIAL + 10))  # addition's digits: token 3 + d for digit d
PLUS = N_SPECIAL + 10
DIMS = ModelDims(d_model=8, n_heads=2, n_layers=1, causal=True, max_len=16, digit_tokens=DIGITS)


def digits(text: str) -> list[int]:
    """``"123+45"`` -> addition's tokens."""
    return [PLUS if c == "+" else N_SPECIAL + int(c) for c in text]


def places(tokens: list[int]) -> list[int]:
    return digit_places(torch.tensor([tokens]), torch.tensor(DIGITS))[0].tolist()


def reference_places(tokens: list[int]) -> list[int]:
    """Plain Python: count along each run of digits, restart after any other token."""
    out, run_length = [], 0
    for t in tokens:
        run_length = run_length + 1 if t in DIGITS else 0
        out.append(run_length)
    return out


def test_places_count_each_number_from_its_first_digit_as_written():
    # the brief's example, BOS 1 2 3 + 4 5 SEP
    assert places([BOS, *digits("123+45"), SEP]) == [0, 1, 2, 3, 0, 1, 2, 0]
    # addition.py's docstring example with its answer: BOS 4 7 5 + 0 6 8 SEP 0 5 4 3
    assert places([BOS, *digits("475+068"), SEP, *digits("0543")]) == [
        *[0, 1, 2, 3, 0, 1, 2, 3],
        *[0, 1, 2, 3, 4],
    ]
    # encoder_bare: no BOS, digits at the very start; BLANK answer slots are no digits
    assert places([*digits("12+3"), BLANK, BLANK]) == [1, 2, 0, 1, 0, 0]
    assert places([BOS, PLUS, PLUS, SEP]) == [0, 0, 0, 0]  # no digits at all
    assert places(digits("9")) == [1]


def test_places_match_a_plain_python_count_on_random_sequences():
    tokens = torch.randint(0, N_SPECIAL + 11, (64, 20), generator=torch.Generator().manual_seed(0))
    got = digit_places(tokens, torch.tensor(DIGITS))
    for row, expected in zip(got.tolist(), map(reference_places, tokens.tolist()), strict=True):
        assert row == expected


def test_in_evaluation_embed_adds_the_table_row_of_each_place():
    pe = AbacusPE(DIMS).eval()
    tokens = torch.tensor([[BOS, *digits("123+45"), SEP]])
    x = torch.randn(1, 8, 8)
    added = pe.embed(x, tokens, Positions.contiguous(8)) - x
    rows = pe.table.weight[[0, 1, 2, 3, 0, 1, 2, 0]]
    torch.testing.assert_close(added[0], rows)
    # every non-digit token gets row 0, a learned vector (as the reference's nn.Embedding)
    assert added[0, 0].abs().sum() > 0


def test_training_adds_one_offset_per_batch_to_every_digit_within_bounds():
    pe = AbacusPE(DIMS, max_k=3).train()
    tokens = torch.tensor([[BOS, *digits("12+345"), SEP], [BOS, *digits("9+9"), *[SEP] * 4]])
    base = digit_places(tokens, pe.digits)
    offsets = set()
    for _ in range(200):
        shifted = pe.places(tokens)
        assert (shifted[base == 0] == 0).all()  # non-digits keep row 0
        k = (shifted - base)[base > 0].unique()
        assert k.numel() == 1  # the same offset for every digit of the batch
        offsets.add(int(k))
    assert offsets == {0, 1, 2, 3}  # U{0..max_k}, both ends included


def test_the_offset_is_drawn_from_the_global_rng_in_training_only():
    pe = AbacusPE(DIMS).train()
    tokens = torch.tensor([[BOS, *digits("123+45"), SEP]])
    torch.manual_seed(7)
    first = [pe.places(tokens) for _ in range(5)]
    torch.manual_seed(7)
    again = [pe.places(tokens) for _ in range(5)]
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))  # seeded: the same
    assert len({int(p.max()) for p in first}) > 1  # and it varies from step to step
    no_offset = AbacusPE(DIMS, max_k=0).train()
    pe.eval()
    state = torch.get_rng_state()
    assert torch.equal(pe.places(tokens), digit_places(tokens, pe.digits))
    assert torch.equal(no_offset.places(tokens), digit_places(tokens, pe.digits))
    assert torch.equal(torch.get_rng_state(), state)  # evaluation (or max_k = 0) draws nothing


def test_under_vmap_each_member_draws_its_own_offset():
    """The members' batched step (``pelab.members``: ``vmap(randomness="different")``)."""
    pe = AbacusPE(DIMS, max_k=100).train()
    tokens = torch.tensor([[BOS, *digits("123+45"), SEP]]).expand(8, 1, 8)  # 8 members
    base = digit_places(tokens[0], pe.digits)
    torch.manual_seed(0)
    shifted = vmap(pe.places, randomness="different")(tokens)  # [8, 1, 8]
    k = (shifted - base)[:, base > 0]  # [8, digits]
    assert (k == k[:, :1]).all() and (k >= 0).all() and (k <= 100).all()
    assert k[:, 0].unique().numel() > 1


def test_the_table_covers_the_longest_number_plus_the_largest_offset():
    pe = AbacusPE(DIMS, max_k=5)
    assert pe.table.num_embeddings == 16 + 5 + 1  # max_len + max_k + 1: row 0 for non-digits
    longest = torch.full((1, 16), DIGITS[0])  # one number filling the longest sequence
    pe.train()
    torch.manual_seed(0)
    assert int(pe.places(longest).max()) <= 21
    pe.embed(torch.zeros(1, 16, 8), longest, Positions.contiguous(16))
    with pytest.raises(ConfigError, match="up to 21.*17 tokens.*offset of up to 5"):
        pe.embed(torch.zeros(1, 17, 8), torch.full((1, 17), DIGITS[0]), Positions.contiguous(17))
    pe.eval()  # no offset: numbers of up to max_len + max_k digits
    pe.embed(torch.zeros(1, 21, 8), torch.full((1, 21), DIGITS[0]), Positions.contiguous(21))
    with pytest.raises(ConfigError, match="cannot extrapolate"):
        pe.embed(torch.zeros(1, 22, 8), torch.full((1, 22), DIGITS[0]), Positions.contiguous(22))


def test_a_model_without_digit_tokens_is_refused():
    with pytest.raises(ConfigError, match=r"no digit tokens \(ModelDims.digit_tokens.*addition"):
        AbacusPE(ModelDims(8, 2, 1, True, 16))


def test_a_task_without_digit_tokens_is_refused_naming_the_tasks_that_have_them(tmp_path):
    cfg = compose_config(["pe=abacus", "task=copy"], tmp_path)
    having = ", ".join(sorted(n for n, c in TASK_REGISTRY.items() if c.digit_tokens))
    assert {"addition", "binary_addition", "compute_sqrt", "summation"} <= set(having.split(", "))
    with pytest.raises(ConfigError, match="task=copy declares no digit tokens") as error:
        build_model(cfg, build_task(cfg))
    assert "Task.digit_tokens) with these settings; tasks that declare them" in str(error.value)
    assert having in str(error.value)
    cfg = compose_config(["pe=abacus", "task=sort"], tmp_path)  # sort's symbols are no digits
    with pytest.raises(ConfigError, match="task=sort declares no digit tokens"):
        build_model(cfg, build_task(cfg))
    cfg = compose_config(["pe=abacus", "task=sort", "task.digits=3"], tmp_path)
    assert build_model(cfg, build_task(cfg)).net.dims.digit_tokens == DIGITS


@pytest.mark.parametrize("max_k", [-1, 2.5, True, "100"])
def test_a_bad_max_k_is_refused(max_k):
    with pytest.raises(ConfigError, match=f"pe.max_k must be an integer >= 0.*{max_k!r}"):
        AbacusPE(DIMS, max_k=max_k)


def test_a_bad_init_std_is_refused():
    with pytest.raises(ConfigError, match="pe.init_std must be > 0, got 0"):
        AbacusPE(DIMS, init_std=0)


def test_the_model_passes_the_tasks_digits_and_decodes_without_a_cache():
    task = TASK_REGISTRY["addition"]()
    dims = NetDims(vocab_size=task.vocab_size, max_len=40, digit_tokens=task.digit_tokens)
    net = Transformer(dims, AbacusPE, causal=True)
    assert net.pe.dims.digit_tokens == task.digit_tokens == DIGITS
    assert not net.supports_kv_cache  # a place depends on the tokens before it
    # a digit's place, hence the output, changes with a digit before it in its number
    net.eval()
    a = torch.tensor([[BOS, *digits("12+34"), SEP]])
    b = torch.tensor([[BOS, PLUS, *digits("2+34"), SEP]])  # "1" -> "+": "2" is now a first digit
    assert not torch.allclose(net(a)[0, 2], net(b)[0, 2], atol=1e-4)


@pytest.mark.parametrize("model", ["decoder", "encoder", "encoder_bare", "encoder_decoder"])
@pytest.mark.integration
def test_a_tiny_addition_run_completes_in_every_model_kind(tiny_cfg, model):
    cfg = tiny_cfg("pe=abacus", "task=addition", f"model={model}", "seed=3")
    train(cfg)
    record = json.loads((Path(cfg.paths.output_dir) / "results.json").read_text())
    assert record["status"] == "completed", record.get("error")
    rows = record["model_dims"]["max_len"] + 100 + 1
    tables = 2 if model == "encoder_decoder" else 1  # the encoder's and the decoder's
    assert record["params"]["pe"] == tables * rows * cfg.model.net.d_model
    assert record["model_dims"]["digit_tokens"] == list(DIGITS)
