from functools import partial

import pytest
import torch

from pelab.errors import ConfigError
from pelab.models.transformer import Transformer
from pelab.pe import PE_REGISTRY


def build(name: str = "rope", **kwargs) -> Transformer:
    args = dict(
        vocab_size=10,
        max_len=32,
        causal=True,
        pe=partial(PE_REGISTRY[name]),
        d_model=16,
        n_heads=2,
        n_layers=2,
    )
    return Transformer(**{**args, **kwargs})


def test_logits_have_one_row_per_token_and_one_column_per_symbol():
    assert build()(torch.zeros(3, 7, dtype=torch.long)).shape == (3, 7, 10)


def test_default_positions_are_zero_to_n_minus_one():
    net = build("sinusoidal")
    tokens = torch.randint(0, 10, (2, 5))
    assert torch.equal(net(tokens), net(tokens, torch.arange(5)))


def test_parameter_counts_separate_the_encoding_and_count_shared_tables_once():
    net = build("learned", max_len=32)
    counts = net.num_params()
    assert counts["pe"] == 32 * 16
    assert counts["total"] == sum(p.numel() for p in net.parameters())
    assert build("rope").num_params()["pe"] == 0


def test_heads_must_divide_the_model_dimension():
    with pytest.raises(
        ConfigError, match=r"model.net.d_model=10 is not divisible by model.net.n_heads=4"
    ):
        build(d_model=10, n_heads=4)
