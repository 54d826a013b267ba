import pytest
import torch

from pelab.models.attention import Attention, causal_mask
from pelab.pe.base import ModelDims, NoPE, PositionalEncoding
from pelab.positions import Positions

DIMS = ModelDims(d_model=8, n_heads=2, n_layers=1, causal=True, max_len=16)


def test_causal_mask_aligns_the_last_queries_with_the_last_keys():
    assert causal_mask(3, 3, torch.device("cpu")).tolist() == [
        [True, False, False],
        [True, True, False],
        [True, True, True],
    ]
    # two new queries over five keys (a decoding step): each sees every key up to itself
    assert causal_mask(2, 5, torch.device("cpu")).tolist() == [
        [True, True, True, True, False],
        [True, True, True, True, True],
    ]


class Recorder(PositionalEncoding):
    """Records the order of hook calls and checks what each hook receives."""

    def __init__(self) -> None:
        super().__init__(DIMS)
        self.calls: list[str] = []

    def transform_qk(self, q, k, pos, layer):
        self.calls.append("transform_qk")
        return q, k

    def logit_bias(self, pos, layer):
        self.calls.append("logit_bias")
        assert layer == 3
        return torch.full((1, 1, pos.q.shape[-1], pos.k.shape[-1]), 1e4)  # huge, would unmask

    def modify_logits(self, logits, q, k, pos, layer):
        self.calls.append("modify_logits")
        assert logits.shape == (1, 2, 4, 4) and layer == 3
        return logits

    def modify_probs(self, probs, pos, layer):
        self.calls.append("modify_probs")
        assert torch.allclose(probs.sum(-1), torch.ones(1, 2, 4))
        assert (probs.triu(diagonal=1) == 0).all()  # the mask came after the bias
        return probs

    def modify_output(self, out, probs, pos, layer):
        self.calls.append("modify_output")
        return out


def test_eager_attention_calls_every_hook_in_order_and_masks_after_the_encoding():
    pe = Recorder()
    attn = Attention(8, 2, causal=True, pe=pe, layer=3)
    assert attn.attend == attn.attend_eager  # chosen at construction from the overridden hooks
    attn(torch.randn(1, 4, 8), Positions.contiguous(4))
    assert pe.calls == [
        "transform_qk",
        "logit_bias",
        "modify_logits",
        "modify_probs",
        "modify_output",
    ]


def test_encodings_with_only_qk_and_bias_hooks_get_the_fused_kernel():
    class BiasOnly(PositionalEncoding):
        def logit_bias(self, pos, layer):
            return torch.zeros(1, 1, pos.q.shape[-1], pos.k.shape[-1])

    attn = Attention(8, 2, causal=True, pe=BiasOnly(DIMS), layer=0)
    assert attn.attend == attn.attend_fused
    assert not BiasOnly.needs_eager_attention() and Recorder.needs_eager_attention()


class PerLayerBias(PositionalEncoding):
    """A fresh bias per call that depends on the layer: ``(layer + 1) * B`` for a fixed ``B``."""

    def __init__(self) -> None:
        super().__init__(DIMS)
        self.layers: list[int] = []
        self.base = torch.randn(1, 2, 5, 5, generator=torch.Generator().manual_seed(0))

    def logit_bias(self, pos, layer):
        self.layers.append(layer)
        return (layer + 1) * self.base


@pytest.mark.parametrize("impl", ["eager", "fused"])
def test_both_kernels_give_the_bias_hook_their_layer(impl):
    pe = PerLayerBias()
    for layer in (5, 2):
        Attention(8, 2, causal=True, pe=pe, layer=layer, impl=impl)(
            torch.randn(1, 5, 8), Positions.contiguous(5)
        )
    assert pe.layers == [5, 2]


def test_fused_kernel_masks_each_layers_own_bias():
    # two layers of one forward (one Positions): the masked bias of layer 0 must not serve layer 1
    torch.manual_seed(0)
    pe, pos, x = PerLayerBias(), Positions.contiguous(5), torch.randn(2, 5, 8)
    for layer in (0, 1):
        fused = Attention(8, 2, causal=True, pe=pe, layer=layer, impl="fused")
        eager = Attention(8, 2, causal=True, pe=pe, layer=layer, impl="eager")
        eager.load_state_dict(fused.state_dict())
        torch.testing.assert_close(fused(x, pos), eager(x, Positions.contiguous(5)))


class DetailOnAnOffset(PositionalEncoding):
    """A bias of 300 plus a detail in [0, 4): the offset cancels in the softmax, the detail
    matters, and bf16 (spacing 2 between 256 and 512) would round the detail away."""

    def __init__(self) -> None:
        super().__init__(DIMS)
        self.detail = 4 * torch.rand(1, 2, 6, 6, generator=torch.Generator().manual_seed(0))

    def logit_bias(self, pos, layer):
        return 300 + self.detail


def test_both_kernels_keep_the_bias_float32_under_bf16_autocast():
    torch.manual_seed(0)
    pe, x = DetailOnAnOffset(), torch.randn(2, 6, 8)
    fused = Attention(8, 2, causal=True, pe=pe, layer=0, impl="fused")
    eager = Attention(8, 2, causal=True, pe=pe, layer=0, impl="eager")
    eager.load_state_dict(fused.state_dict())
    exact = eager(x, Positions.contiguous(6))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        outs = [attn(x, Positions.contiguous(6)).float() for attn in (fused, eager)]
    for out in outs:  # bf16 projections and q, k, v: 3e-3 off here; a bf16 bias: 0.27
        torch.testing.assert_close(out, exact, atol=2e-2, rtol=0)


def test_shared_encoding_is_not_registered_in_each_layer():
    pe = Recorder()
    pe.weight = torch.nn.Parameter(torch.zeros(3))
    attn = Attention(8, 2, causal=True, pe=pe, layer=0)
    assert all(not name.startswith("pe") for name, _ in attn.named_parameters())


def test_positions_memo_computes_once_per_forward():
    pos = Positions.contiguous(4)
    calls = []
    for _ in range(3):
        pos.memo("key", lambda: calls.append(1) or len(calls))
    assert calls == [1]
    assert pos.delta()[0].tolist()[1] == [1, 0, -1, -2]


def mha_reference(attn: Attention) -> torch.nn.MultiheadAttention:
    """``torch.nn.MultiheadAttention`` with ``attn``'s weights: the same ``[q; k; v]`` input
    projection and output projection, no biases."""
    d = attn.qkv.in_features
    mha = torch.nn.MultiheadAttention(d, attn.n_heads, bias=False, batch_first=True)
    with torch.no_grad():
        mha.in_proj_weight.copy_(attn.qkv.weight[0])  # member 0 of [K, 3d, d]
        mha.out_proj.weight.copy_(attn.proj.weight[0])
    return mha.eval()


@pytest.mark.parametrize("impl", ["eager", "fused"])
def test_cross_attention_is_multi_head_attention_from_x_to_the_context(impl):
    torch.manual_seed(0)
    attn = Attention(8, 2, causal=False, pe=NoPE(DIMS), layer=0, impl=impl).eval()
    x, context = torch.randn(2, 3, 8), torch.randn(2, 5, 8)
    pos = Positions(torch.arange(3)[None], torch.arange(5)[None])  # decoder and encoder tokens
    reference, _ = mha_reference(attn)(x, context, context)
    torch.testing.assert_close(attn(x, pos, context=context), reference)
    # the same module, without a context, is self-attention
    reference, _ = mha_reference(attn)(x, x, x)
    torch.testing.assert_close(attn(x, Positions.contiguous(3)), reference)


def test_cross_attention_is_invariant_to_the_order_of_the_context():
    torch.manual_seed(0)
    attn = Attention(8, 2, causal=False, pe=NoPE(DIMS), layer=0).eval()
    x, context = torch.randn(1, 3, 8), torch.randn(1, 5, 8)
    perm = torch.tensor([3, 0, 4, 1, 2])
    pos = Positions(torch.arange(3)[None], torch.arange(5)[None])
    moved = Positions(pos.q, pos.k[:, perm])
    torch.testing.assert_close(attn(x, pos, context=context), attn(x, moved, context[:, perm]))
