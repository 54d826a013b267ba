"""A hook that ``torch.func.vmap`` cannot run for a stack's members at once gets an error
naming the encoding, the hook and the fix (issue 54), not functorch's own."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

from pelab.models.member_encodings import MemberEncodings
from pelab.pe.base import ModelDims, PositionalEncoding
from pelab.positions import Positions

DIMS = ModelDims(d_model=16, n_heads=2, n_layers=1, causal=True, max_len=8)


class Width(PositionalEncoding):
    """A Gaussian distance bias with a learned width per head, ``-(i - j)^2 / (2 w_h^2)``."""

    shift = "relative"
    pe_name = "width"

    def __init__(self, dims: ModelDims) -> None:
        super().__init__(dims)
        self.log_width = nn.Parameter(torch.zeros(dims.n_heads))  # [h]

    def width(self) -> Tensor:
        return self.log_width.exp()[:, None, None]  # [h, 1, 1]

    def logit_bias(self, pos: Positions, layer: int) -> Tensor:
        return -(pos.delta()[:, None].float() ** 2) / (2 * self.width() ** 2)


class ReadsOnTheHost(Width):
    def logit_bias(self, pos: Positions, layer: int) -> Tensor:
        if self.log_width.max().item() > 5:  # a host read of a parameter's value
            raise AssertionError("unreached")
        return super().logit_bias(pos, layer)


class WritesInPlace(Width):
    def logit_bias(self, pos: Positions, layer: int) -> Tensor:
        self.log_width.data.clamp_(max=5)  # belongs in constrain
        return super().logit_bias(pos, layer)


class DrawsNoise(Width):
    def logit_bias(self, pos: Positions, layer: int) -> Tensor:
        return super().logit_bias(pos, layer) + torch.rand(())


def stack_bias(encoding: type[PositionalEncoding]) -> Tensor:
    stack = MemberEncodings([encoding(DIMS), encoding(DIMS)])
    x = torch.zeros(4, 3, DIMS.d_model)  # 2 members x batch 2, folded
    pos = Positions(torch.arange(3)[None], torch.arange(3)[None])
    stack.embed(x, torch.zeros(4, 3, dtype=torch.long), pos)
    return stack.logit_bias(pos, 0)


def test_a_pure_hook_runs_for_every_member_at_once():
    bias = stack_bias(Width)  # [K b, h, i, j]: at width 1, -(i - j)^2 / 2
    assert bias.shape == (4, 2, 3, 3)
    assert bias[3, 1, 2, 0].item() == pytest.approx(-2.0)


@pytest.mark.parametrize("encoding", [ReadsOnTheHost, WritesInPlace, DrawsNoise])
def test_a_hook_vmap_refuses_is_named_with_its_fix(encoding):
    with pytest.raises(RuntimeError, match=r"pe=width: its logit_bias cannot run") as caught:
        stack_bias(encoding)
    message = str(caught.value)
    assert "constrain" in message and "members_at_once = False" in message


def test_members_at_once_false_runs_the_same_hook_member_by_member():
    class OneByOne(ReadsOnTheHost):
        members_at_once = False

    torch.testing.assert_close(stack_bias(OneByOne), stack_bias(Width))
