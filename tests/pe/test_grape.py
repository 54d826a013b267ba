"""GRAPE (grape_m, grape_a): its special cases (RoPE, ALiBi, FoX), its defining properties, and
the reference code's outputs (``reference/grape.json``, written by ``reference/make_grape.py``)."""

import json
from pathlib import Path

import pytest
import torch

from pelab.errors import ConfigError
from pelab.pe.base import ModelDims
from pelab.pe.bias import AlibiPE
from pelab.pe.fox import ForgettingPE
from pelab.pe.grape import GrapeA, GrapeM
from pelab.pe.rotary import RotaryPE
from pelab.positions import Positions

REFERENCE = json.loads((Path(__file__).parent / "reference" / "grape.json").read_text())
DIMS = ModelDims(d_model=32, n_heads=4, n_layers=2, causal=True, max_len=64)
SMALL = ModelDims(d_model=8, n_heads=2, n_layers=1, causal=True, max_len=16)  # the reference's


def qk(b=2, h=4, n=7, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, h, n, d, generator=g), torch.randn(b, h, n, d, generator=g)


def positions(offset=0):
    """Sorted random positions per row, ``[2, 7]``, plus ``offset``."""
    g = torch.Generator().manual_seed(1)
    return Positions.from_tensor(
        torch.rand(2, 40, generator=g).topk(7).indices.sort().values + offset
    )


def scores(pe, q, k, pos, layer=0):
    q, k = pe.transform_qk(q, k, pos, layer)
    return q @ k.transpose(-1, -2)


def perturbed(pe: GrapeM, seed=2) -> GrapeM:
    """Parameters moved off their RoPE initialisation."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in pe.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g) * (16.0 if p.dim() == 3 else 1.0))
    return pe


@pytest.mark.parametrize("generators", ["rope", "learned_commuting", "learned"])
def test_grape_m_equals_rope_with_ropes_generators(generators):
    """``rope`` always, the learned ones at initialisation (they start from RoPE)."""
    q, k = qk()
    grape, rope = GrapeM(DIMS, generators=generators), RotaryPE(DIMS)
    for layer in range(DIMS.n_layers):
        got, want = (
            grape.transform_qk(q, k, positions(), layer),
            rope.transform_qk(q, k, positions(), layer),
        )
        torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("generators", ["learned_commuting", "learned"])
def test_learned_grape_m_differs_from_rope_once_trained(generators):
    q, k = qk()
    grape = perturbed(GrapeM(DIMS, generators=generators))
    assert not torch.allclose(
        scores(grape, q, k, positions()), scores(RotaryPE(DIMS), q, k, positions()), atol=1e-3
    )


@pytest.mark.parametrize("generators", ["rope", "learned_commuting", "learned"])
def test_grape_m_keeps_norms_and_scores_read_offsets_only(generators):
    q, k = qk()
    grape = perturbed(GrapeM(DIMS, generators=generators, share_across_heads=False))
    rq, rk = grape.transform_qk(q, k, positions(), 1)
    torch.testing.assert_close(rq.norm(dim=-1), q.norm(dim=-1))
    torch.testing.assert_close(rk.norm(dim=-1), k.norm(dim=-1))
    near, far = scores(grape, q, k, positions(), 1), scores(grape, q, k, positions(offset=29), 1)
    torch.testing.assert_close(near, far, atol=5e-5, rtol=1e-5)


def test_learned_generators_do_not_commute_but_form_a_one_parameter_group():
    """With tilted planes the rank-2 generators no longer commute, so ``exp(n L)`` is not the
    product of the planes' rotations; it is still a group, ``G(n)ᵀ G(m) = G(m - n)``, and
    orthogonal."""
    grape = perturbed(GrapeM(SMALL, generators="learned"))
    with torch.no_grad():
        a, b, freq = grape.a[0, 0], grape.b[0, 0], grape.frequencies(0)[0]
        planes = [freq[i] * (torch.outer(a[i], b[i]) - torch.outer(b[i], a[i])) for i in range(2)]
        e0, e1 = (torch.linalg.matrix_exp(p) for p in planes)
        assert not torch.allclose(e0 @ e1, e1 @ e0, atol=1e-3)
        assert not torch.allclose(
            torch.linalg.matrix_exp(planes[0] + planes[1]), e0 @ e1, atol=1e-3
        )
        g = grape.action(torch.tensor([[3.0, 11.0, 8.0]]), 0)[0, 0]  # G(3), G(11), G(8): [n, d, d]
        torch.testing.assert_close(g[0].T @ g[1], g[2], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(g[1].T @ g[1], torch.eye(4), atol=1e-5, rtol=1e-5)


def test_grape_m_matches_the_reference_code():
    """The reference's ``MSGRAPECommuting`` (per-head learned θ) rotates the half-layout planes
    ``(i, i + d/2)`` by ``-nθ``, i.e. ``exp(nθ L(e_i, e_(i+d/2)))``. ``learned`` set to exactly
    those planes gives its outputs as they are; ``learned_commuting`` (RoPE's planes
    ``L(e_2i+1, e_2i)``) gives them after the permutation that maps one set of oriented planes
    onto the other."""
    ref = REFERENCE["grape_m"]
    to_bhnd = lambda x: torch.tensor(x).transpose(1, 2)  # noqa: E731  reference layout b n h d
    q, k, want_q, want_k = map(to_bhnd, (REFERENCE["q"], REFERENCE["k"], ref["q"], ref["k"]))
    log_freq = torch.tensor(ref["log_freq"])
    pos = Positions.contiguous(q.shape[2])

    learned = GrapeM(SMALL, generators="learned", share_across_heads=False)
    eye = torch.eye(4)
    with torch.no_grad():
        learned.log_freq.copy_(log_freq[None])
        learned.a.copy_(eye[:2].expand(1, 2, 2, 4))  # a_i = e_i
        learned.b.copy_(eye[2:].expand(1, 2, 2, 4))  # b_i = e_(i + d/2)
    got_q, got_k = learned.transform_qk(q, k, pos, 0)
    torch.testing.assert_close(got_q, want_q, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(got_k, want_k, atol=1e-6, rtol=1e-5)

    commuting = GrapeM(SMALL, generators="learned_commuting", share_across_heads=False)
    with torch.no_grad():
        commuting.log_freq.copy_(log_freq[None])
    perm = torch.tensor([2, 0, 3, 1])  # interleaved dim 2i <- i + d/2, 2i + 1 <- i
    got_q, got_k = commuting.transform_qk(q[..., perm], k[..., perm], pos, 0)
    back = perm.argsort()
    torch.testing.assert_close(got_q[..., back], want_q, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(got_k[..., back], want_k, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("gate", ["query", "key", "query_key"])
def test_grape_a_matches_the_reference_code(gate):
    ref = REFERENCE["grape_a"][gate]
    q, k = (torch.tensor(REFERENCE[x]).transpose(1, 2) for x in ("q", "k"))
    grape = GrapeA(SMALL, gate=gate)
    with torch.no_grad():
        for name, value in ref["params"].items():
            getattr(grape, name)[0].copy_(torch.tensor(value))
    x = torch.zeros(1, 5, SMALL.d_model)  # unread by the q/k gates
    got = grape.input_bias(x, q, k, Positions.contiguous(5), 0)
    want = torch.tensor(ref["bias"])
    causal = torch.ones(5, 5, dtype=torch.bool).tril()  # the reference sets the rest to 0
    torch.testing.assert_close(got[..., causal], want[..., causal], atol=1e-6, rtol=1e-5)
    assert want.abs().max() > 0.1  # the comparison is not of zeros


@pytest.mark.parametrize("pos", [Positions.contiguous(7), positions()])
def test_grape_a_without_gates_is_alibi(pos):
    grape, alibi = GrapeA(DIMS, gate="none"), AlibiPE(DIMS)
    got, want = grape.logit_bias(pos, 0), alibi.logit_bias(pos, 0)
    causal = pos.delta() >= 0  # [b|1, i, j]: keys up to the query
    torch.testing.assert_close(
        got.expand_as(want)[causal[:, None].expand_as(want)], want[causal[:, None].expand_as(want)]
    )
    assert list(grape.parameters()) == []


def test_grape_a_with_forget_gates_is_fox():
    grape, fox = GrapeA(DIMS, gate="forget"), ForgettingPE(DIMS)
    for layer in range(DIMS.n_layers):  # the same gate weights (trained-looking ones)
        torch.nn.init.normal_(fox.parts["gate"].gates[layer].weight, std=0.5)
        grape.gates[layer].load_state_dict(fox.parts["gate"].gates[layer].state_dict())
    x = torch.randn(2, 7, DIMS.d_model)
    q, k = qk()
    for layer in range(DIMS.n_layers):
        got = grape.input_bias(x, q, k, positions(), layer)
        torch.testing.assert_close(got, fox.input_bias(x, q, k, positions(), layer))
    assert not grape.supports_kv_cache and GrapeA(DIMS).supports_kv_cache


def test_grape_a_gated_bias_is_a_nonpositive_slope_times_the_offset():
    """Keys before the query are penalised in proportion to their distance, at a rate set by
    the query's and the key's gates: for constant q and k the bias is ``-(i - j) r`` (Toeplitz)."""
    grape = GrapeA(DIMS)
    q, k = qk()
    x = torch.zeros(2, 7, DIMS.d_model)
    bias = grape.input_bias(x, q, k, Positions.contiguous(7), 0)
    causal = torch.ones(7, 7, dtype=torch.bool).tril()
    assert (bias[..., causal] <= 0).all() and (bias.diagonal(dim1=-2, dim2=-1) == 0).all()
    same = grape.input_bias(
        x, q[:, :, :1].expand_as(q), k[:, :, :1].expand_as(k), Positions.contiguous(7), 0
    )
    rate = -same[..., 1, 0]  # [b, h]
    offsets = torch.arange(7)[:, None] - torch.arange(7)
    torch.testing.assert_close(same, -offsets * rate[..., None, None])
    assert (rate > 0).all()


@pytest.mark.parametrize(
    ("cls", "option", "value", "choices"),
    [
        (GrapeM, "generators", "lie", "rope, learned_commuting, learned"),
        (GrapeA, "gate", "value", "none, query, key, query_key, forget"),
    ],
)
def test_bad_options_name_the_value_and_the_choices(cls, option, value, choices):
    with pytest.raises(ConfigError, match=f"'{value}'.*{choices}"):
        cls(DIMS, **{option: value})
