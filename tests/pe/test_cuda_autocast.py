"""Every encoding under CUDA's autocast policy, emulated on the CPU (``tests/pe/cuda_autocast``):
a stack of two members, as a decoder and as an encoder (and the encoder-decoder with one
encoding of each kind), forward, backward and greedy decoding (cached where the encoding allows
it), under bf16 autocast with CUDA's float32 and promote lists. A GPU run mixes bf16 and float32
where the CPU's autocast never does (softmax, layer_norm, cumsum, softplus in float32 beside bf16
matmuls): nothing may fail, go non-finite, or drift from float32 by more than bf16's rounding."""

from functools import partial

import pytest
import torch
import torch.nn.functional as F

from pelab.model_kinds import DecoderKind, EncoderDecoderKind
from pelab.models.dims import NetDims
from pelab.models.encoder_decoder import EncoderDecoder
from pelab.models.stacked import stack_members
from pelab.models.transformer import Transformer
from pelab.pe import PE_REGISTRY
from tests.models.test_kv_cache import MAX_LEN, VOCAB, position_dims, positions
from tests.pe.cuda_autocast import CudaFp32Policy
from tests.pe.nets import DIGITS

REPRESENTATIVES = ["rope", "t5_bias", "learned", "fire"]  # rotation, bias, table, a network
CASES = [(pe, kind) for kind in ("decoder", "encoder") for pe in sorted(PE_REGISTRY)]
CASES += [(pe, "encoder_decoder") for pe in REPRESENTATIVES]
cuda_like = partial(torch.autocast, "cpu", dtype=torch.bfloat16)


def member(pe: str, kind: str, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    sizes = dict(vocab_size=VOCAB, max_len=MAX_LEN, d_model=16, n_heads=2)
    sizes["position_dims"] = position_dims(pe)
    if kind == "encoder_decoder":
        return EncoderDecoder(NetDims(**sizes), PE_REGISTRY[pe])
    dims = NetDims(**sizes, digit_tokens=DIGITS)
    return Transformer(dims, PE_REGISTRY[pe], causal=kind == "decoder")


def losses_and_answers(net, kind: str, pe: str):
    """Each member's cross-entropy on random targets, and greedy answers of 4 tokens."""
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(3, VOCAB, (4, 9), generator=g)  # 2 members x 2 sequences
    pos = positions(pe, 4, 9, randomized=False)
    if kind == "encoder_decoder":
        logits = net(tokens, tokens[:, :6], pos, positions(pe, 4, 6, randomized=False))
    else:
        logits = net(tokens, pos)
    targets = torch.randint(0, VOCAB, logits.shape[:-1], generator=g)
    each = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), reduction="none")
    losses = each.view(2, -1).mean(dim=1)
    model_kind = EncoderDecoderKind if kind == "encoder_decoder" else DecoderKind
    canonical = positions(pe, 4, 5 + 4 + 2, randomized=False)
    answers = model_kind.predict(net, tokens[:, :5], 4, canonical) if kind != "encoder" else None
    return losses, answers


@pytest.mark.parametrize(("pe", "model"), CASES)
def test_every_encoding_runs_under_cudas_autocast_policy(pe, model):
    if model != "decoder" and PE_REGISTRY[pe].causal_only:
        pytest.skip(f"pe={pe} is defined for causal models only")
    net = stack_members([member(pe, model, seed) for seed in (0, 1)]).eval()
    reference, _ = losses_and_answers(net, model, pe)
    policy = CudaFp32Policy()
    with cuda_like(), policy:
        losses, answers = losses_and_answers(net, model, pe)
        losses.sum().backward()
    assert torch.isfinite(losses).all(), pe
    torch.testing.assert_close(losses, reference, rtol=0.05, atol=0.05)
    grads = [p.grad for p in net.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads), pe
    assert answers is None or answers.shape == (4, 4)


def test_the_emulation_casts_what_cuda_casts():
    """The check of the check: on the eager path (CoPE) the bf16 logits' softmax goes to
    float32, as CUDA's autocast sends it; the CPU's own autocast leaves it bf16."""
    net = member("cope", "decoder", 0).eval()
    policy = CudaFp32Policy()
    with cuda_like(), policy:
        losses_and_answers(stack_members([net, member("cope", "decoder", 1)]), "decoder", "cope")
    assert policy.seen.get("softmax", 0) >= 1, policy.seen
