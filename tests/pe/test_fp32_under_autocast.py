"""Under bf16 autocast (``trainer.precision=bf16-mixed``) the position biases, the small networks
inside encodings and stick-breaking's sums stay float32 (``pelab.pe.base.in_fp32``): each is
computed here as it is without autocast, bit for bit. The CPU's autocast rounds matmuls to bf16
as a GPU's does."""

from functools import partial
from pathlib import Path

import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from pelab.models.attention import Attention
from pelab.pe import PE_REGISTRY
from pelab.pe.base import ModelDims, ieee_matmuls, in_fp32
from pelab.pe.dape import DapePE
from pelab.pe.floater import FloaterPE
from pelab.pe.path import PathPE
from pelab.pe.stick_breaking import StickBreakingPE, stick_breaking_weights
from pelab.positions import Positions
from tests.conftest import CONFIG_DIR
from tests.pe.nets import sharp_net

DIMS = ModelDims(d_model=16, n_heads=2, n_layers=1, causal=True, max_len=64)
bf16 = partial(torch.autocast, "cpu", dtype=torch.bfloat16)


def test_fire_keeps_every_distance_apart_up_to_four_times_the_training_length():
    torch.manual_seed(0)
    fire = instantiate(OmegaConf.load(Path(CONFIG_DIR) / "pe" / "fire.yaml"))(DIMS)
    n = 4 * DIMS.max_len
    exact = fire.logit_bias(Positions.contiguous(n), 0)  # [1, h, i, j]
    with bf16():
        bias = fire.logit_bias(Positions.contiguous(n), 0)
    assert bias.dtype == torch.float32 and torch.equal(bias, exact)
    last = bias[0, :, -1]  # [h, j]: the last query's biases at distances n - 1 .. 0
    assert (last[:, 1:] != last[:, :-1]).all()  # bf16 merged neighbours from distance ~20 on


def test_dape_runs_its_mlp_on_float32_scores_and_biases():
    torch.manual_seed(0)
    dape, n = DapePE(DIMS), 32
    # float32, as the eager path hands them over under autocast: bf16 scores plus the float32 bias
    logits = torch.randn(1, 2, n, n).bfloat16() + dape.logit_bias(Positions.contiguous(n), 0)
    exact = dape.modify_logits(logits, None, None, Positions.contiguous(n), 0)
    with bf16():
        adapted = dape.modify_logits(logits, None, None, Positions.contiguous(n), 0)
    assert adapted.dtype == torch.float32 and torch.equal(adapted, exact)


def test_floater_solves_its_ode_in_float32():
    torch.manual_seed(0)
    floater = FloaterPE(DIMS)
    exact = floater.table(Positions.contiguous(32))  # [1, n, l, d]
    with bf16():
        table = floater.table(Positions.contiguous(32))
    assert table.dtype == torch.float32 and torch.equal(table, exact)


def test_path_runs_its_maps_and_products_in_float32():
    torch.manual_seed(0)
    path, n = PathPE(DIMS), 16
    x = torch.randn(1, n, DIMS.d_model)
    q, k = torch.randn(2, 1, 2, n, DIMS.head_dim).bfloat16()  # as autocast's projections give
    exact = path.input_bias(x, q.float(), k.float(), Positions.contiguous(n), 0)
    with bf16():
        bias = path.input_bias(x, q, k, Positions.contiguous(n), 0)
    assert bias.dtype == torch.float32 and torch.equal(bias, exact)


def test_stick_breaking_sums_and_weights_stay_float32():
    torch.manual_seed(0)
    logits = (4 * torch.randn(1, 2, 16, 16)).bfloat16()  # bf16, as autocast's q k^T
    with bf16():
        weights = StickBreakingPE(DIMS).normalize(logits, Positions.contiguous(16), 0)
    assert weights.dtype == torch.float32
    assert torch.equal(weights, stick_breaking_weights(logits.float()))


BIASED = sorted(
    name
    for name, cls in PE_REGISTRY.items()
    if cls.position_dims != 2 and (cls.overrides("logit_bias") or cls.overrides("input_bias"))
)


@pytest.mark.parametrize("name", BIASED)
def test_every_position_bias_reaches_attention_in_float32(name, monkeypatch):
    dtypes = []
    bias = Attention.bias

    def spy(self, *args):
        out = bias(self, *args)
        dtypes.append(out.dtype)
        return out

    monkeypatch.setattr(Attention, "bias", spy)
    net = sharp_net(PE_REGISTRY[name], n_layers=1)
    with bf16():
        net(torch.randint(0, 12, (1, 8)))
    assert dtypes == [torch.float32]


def test_fire_keeps_every_distance_apart_to_four_times_its_length_under_tf32_rounding():
    """On a GPU ``train.py``'s precision ``high`` lets matmuls read float32 as TF32 (10 mantissa
    bits): FIRE's MLP would merge the biases of neighbouring distances from about 544 tokens.
    Its island runs at ``highest`` on CUDA (``ieee_matmuls``), emulated here
    (``Tf32Matmuls``): distances stay apart to 4x a 256-token training length; without the
    island they merge (the check can fail)."""
    from tests.pe.cuda_autocast import Tf32Matmuls

    torch.manual_seed(0)
    dims = ModelDims(d_model=16, n_heads=2, n_layers=1, causal=True, max_len=256)
    fire = instantiate(OmegaConf.load(Path(CONFIG_DIR) / "pe" / "fire.yaml"))(dims)
    pos = Positions.contiguous(4 * dims.max_len)
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("high")
        with Tf32Matmuls():
            rounded = fire._bias(pos.q.float(), pos.k.float(), 0)[0, :, -1]  # [h, j]
            with ieee_matmuls("cuda"):  # the island's setting on a GPU
                kept = fire._bias(pos.q.float(), pos.k.float(), 0)[0, :, -1]
    finally:
        torch.set_float32_matmul_precision(before)
    assert (kept[:, 1:] != kept[:, :-1]).all()
    assert (rounded[:, 1:] == rounded[:, :-1]).any()  # TF32 merged neighbours


def test_on_cuda_the_islands_run_full_float32_matmuls_whatever_the_matmul_precision():
    """``train.py`` lets CUDA matmuls use TF32 (precision ``high``: 10 mantissa bits, under which
    FIRE's distances merge from about 544 tokens); inside ``in_fp32`` they are full float32 on
    CUDA (``highest``) and the setting is restored after. On the CPU, where ``high`` already is
    full float32, nothing changes."""
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("high")
        with ieee_matmuls("cuda"):
            assert torch.get_float32_matmul_precision() == "highest"
        assert torch.get_float32_matmul_precision() == "high"
        with ieee_matmuls("cpu"):
            assert torch.get_float32_matmul_precision() == "high"
        seen = []
        in_fp32(lambda x: seen.append(torch.get_float32_matmul_precision()), torch.ones(1))
        assert seen == ["high"]  # a CPU tensor: untouched
    finally:
        torch.set_float32_matmul_precision(before)


@pytest.mark.parametrize("attn_impl", ["fused", "eager"])
def test_a_float64_model_stays_float64_through_every_encodings_islands(attn_impl):
    """A numerical check's float64 model: ``in_fp32`` hands float64 inputs back as float64 and
    each encoding's own positions follow its weights' dtype, so every registered encoding runs
    in float64 end to end on both kernels, forward and backward (FIRE and GRAPE-A handed float32
    back before, issue 44)."""
    from pelab.models.dims import NetDims
    from pelab.models.transformer import Transformer
    from tests.models.test_kv_cache import position_dims, positions
    from tests.pe.nets import DIGITS

    for name in sorted(PE_REGISTRY):
        dims = NetDims(
            vocab_size=12, max_len=16, d_model=16, n_heads=2, attn_impl=attn_impl,
            position_dims=position_dims(name), digit_tokens=DIGITS,
        )  # fmt: skip
        net = Transformer(dims, PE_REGISTRY[name], causal=True).double()
        out = net(torch.randint(0, 12, (2, 9)), positions(name, 2, 9, randomized=False))
        out.sum().backward()
        assert out.dtype == torch.float64, name
