"""PaTH (Yang et al. 2025): the accumulated Householder products against matrices written out,
their defining properties, and the layer's maps."""

import pytest
import torch

from pelab.errors import ConfigError
from pelab.pe.base import ModelDims
from pelab.pe.path import PathPE, path_bias
from pelab.positions import Positions
from tests.pe.nets import sharp_net

DIMS = ModelDims(d_model=8, n_heads=2, n_layers=2, causal=True, max_len=16)


def unit(shape: tuple[int, ...]) -> torch.Tensor:
    return torch.nn.functional.normalize(torch.randn(shape, dtype=torch.float64), dim=-1)


def by_matrices(q, k, w, beta) -> torch.Tensor:
    """``q_i^T (H_i ... H_{j+1} - I) k_j`` with every ``H`` formed as a matrix, one head."""
    n, d = q.shape
    eye = torch.eye(d, dtype=q.dtype)
    out = torch.zeros(n, n, dtype=q.dtype)
    for i in range(n):
        for j in range(i + 1):
            product = eye
            for s in range(i, j, -1):  # H_i H_{i-1} ... H_{j+1}
                product = product @ (eye - beta[s] * torch.outer(w[s], w[s]))
            out[i, j] = q[i] @ (product - eye) @ k[j]
    return out


def test_the_bias_equals_the_product_of_householder_matrices():
    torch.manual_seed(0)
    q, k = (
        torch.randn(2, 3, 6, 4, dtype=torch.float64),
        torch.randn(2, 3, 6, 4, dtype=torch.float64),
    )
    w, beta = unit((2, 3, 6, 4)), 2 * torch.rand(2, 3, 6, dtype=torch.float64)
    bias = path_bias(q, k, w, beta)
    for b in range(2):
        for h in range(3):
            expected = by_matrices(q[b, h], k[b, h], w[b, h], beta[b, h])
            torch.testing.assert_close(bias[b, h], expected)


def test_hand_computed_reflection():
    # beta = 2: H is the reflection across the plane orthogonal to w
    q = torch.tensor([[[[1.0, 0.0], [1.0, 2.0]]]])  # [1, 1, 2, 2]
    k = torch.tensor([[[[3.0, 1.0], [0.0, 1.0]]]])
    w = torch.tensor([[[[0.0, 1.0], [1.0, 0.0]]]])  # H_1 flips the first coordinate
    bias = path_bias(q, k, w, torch.full((1, 1, 2), 2.0))[0, 0]
    # q_1^T H_1 k_0 = (-1, 2) . (3, 1) = -1, minus q_1 . k_0 = 5: -6; diagonal and above: 0
    assert bias.tolist() == [[0.0, 0.0], [-6.0, 0.0]]


def test_beta_zero_is_no_encoding_and_a_unit_transform_keeps_norms():
    q, k, w = torch.randn(1, 1, 5, 4), torch.randn(1, 1, 5, 4), unit((1, 1, 5, 4)).float()
    assert path_bias(q, k, w, torch.zeros(1, 1, 5)).abs().max() == 0
    # beta = 2 reflections are orthogonal: the score keeps |q| |k| as its bound
    scores = q @ k.transpose(-1, -2) + path_bias(q, k, w, torch.full((1, 1, 5), 2.0))
    bound = q.norm(dim=-1)[..., :, None] * k.norm(dim=-1)[..., None, :]
    assert (scores.abs() <= bound + 1e-5).all()


def test_a_token_changes_only_pairs_whose_span_holds_its_transform():
    pe = PathPE(DIMS)
    x, q, k = torch.randn(1, 7, 8), torch.randn(1, 2, 7, 4), torch.randn(1, 2, 7, 4)
    changed = x.clone()
    changed[0, 3] += 1.0
    pos = Positions.contiguous(7)
    diff = (pe.input_bias(x, q, k, pos, 0) - pe.input_bias(changed, q, k, pos, 0)).abs()[0]
    diff = diff.amax(0)
    i, j = torch.meshgrid(torch.arange(7), torch.arange(7), indexing="ij")
    # w_3 and beta_3 act on pairs with j < 3 <= i; the short convolution (kernel 3) carries x_3
    # into w_4 and w_5 too, so pairs with j < 5 and i >= 3 may change, and no other
    reached = (j < 5) & (i >= 3) & (j < i)
    assert (diff[(j < 3) & (i >= 3)] > 1e-6).all() and (diff[~reached] == 0).all()


def test_the_maps_give_unit_vectors_and_betas_in_zero_two_per_layer():
    pe = PathPE(DIMS)
    x = torch.randn(2, 5, 8) * 10
    w, beta = pe.maps[1](x)
    assert w.shape == (2, 2, 5, 4) and beta.shape == (2, 2, 5)
    torch.testing.assert_close(w.norm(dim=-1), torch.ones(2, 2, 5))
    assert ((beta > 0) & (beta < 2)).all()
    assert not torch.allclose(pe.maps[0](x)[0], w)


def test_the_model_runs_it_on_the_fused_kernel_with_finite_gradients():
    net = sharp_net(PathPE).train()
    assert all(block.attn.attend == block.attn.attend_fused for block in net.blocks)
    net(torch.randint(0, 12, (2, 9))).sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in net.pe.parameters())


@pytest.mark.parametrize("options", [{"rank": 0}, {"kernel": 0}])
def test_bad_sizes_are_refused(options):
    with pytest.raises(ConfigError, match="pe.rank and pe.kernel must be >= 1"):
        PathPE(DIMS, **options)
