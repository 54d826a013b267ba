"""The attention kernel and dtype a run records (``pelab.kernels``): read from what one forward
dispatches, under the run's precision, leaving the run as it was."""

from contextlib import nullcontext
from functools import partial

import pytest
import torch

from pelab.assembly import build_model, build_task
from pelab.kernels import attention_kernels
from pelab.models.attention import Attention
from tests.conftest import TINY, compose_config

bf16 = partial(torch.autocast, "cpu", dtype=torch.bfloat16)
F32, FLASH = "float32", "flash (cpu)"


def model_of(tmp_path, *overrides: str):
    cfg = compose_config([*TINY, *overrides], tmp_path)
    return build_model(cfg, build_task(cfg))


@pytest.mark.parametrize(
    ("overrides", "context", "want"),
    [
        (["pe=rope"], nullcontext, {"kernel": "flash (cpu)", "dtype": "float32"}),
        (["pe=rope"], bf16, {"kernel": "flash (cpu)", "dtype": "bfloat16"}),
        # a bias runs the fused kernel in float32 under autocast (pelab.pe.base.in_fp32)
        (["pe=t5_bias"], bf16, {"kernel": "flash (cpu)", "dtype": "float32"}),
        (["pe=cope"], bf16, {"kernel": "eager", "dtype": "bfloat16"}),
        (["pe=rope", "model.net.attn_impl=eager"], nullcontext, {"kernel": "eager", "dtype": F32}),
        (["model=encoder_decoder", "pe=rope"], nullcontext, {"kernel": FLASH, "dtype": F32}),
    ],
)  # fmt: skip
def test_the_kernel_and_dtype_are_those_the_forward_dispatched(tmp_path, overrides, context, want):
    assert attention_kernels(model_of(tmp_path, *overrides), context) == want


def test_layers_that_differ_are_listed_in_order(tmp_path):
    model = model_of(tmp_path, "pe=rope", "model.net.n_layers=2")
    model.net.blocks[1].attn.attend = model.net.blocks[1].attn.attend_eager
    assert attention_kernels(model, nullcontext)["kernel"] == "flash (cpu), eager"


def test_reading_the_kernels_leaves_the_run_as_it_was(tmp_path):
    model = model_of(tmp_path, "pe=rope", "model.net.dropout=0.1")
    layers = [m for m in model.net.modules() if isinstance(m, Attention)]
    chosen = [layer.attend for layer in layers]
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    model.train()
    attention_kernels(model, nullcontext)
    assert model.training and all(m.training for m in model.modules())
    assert torch.equal(torch.get_rng_state(), rng)
    assert [layer.attend for layer in layers] == chosen
    assert all(torch.equal(v, weights[k]) for k, v in model.state_dict().items())
