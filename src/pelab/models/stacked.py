"""The member dimension: K models of one architecture trained as one network.

Every job is a stack of K >= 1 *members* (``seeds=[...]``, ``learning_rates=[...]``; a plain
run is a job of K = 1). The layers that hold weights store them stacked, ``[K, ...]``, and run
once for every member: ``Linear`` with one ``bmm`` over K, ``LayerNorm`` and ``Embedding`` with a
member's own row of their tables. Everything else (attention, the positional encodings, the
loss) sees the members folded into the batch, member-major: ``[K b, ...]`` holds member 0's ``b``
sequences, then member 1's, ... (attention never mixes sequences: it needs no member dimension).

With K = 1 each layer calls its ``torch.nn`` namesake's kernel on the one member's weights (a
view: its backward copies nothing), drawn as the namesake draws them: a plain run computes, bit
for bit, what a network of ``torch.nn`` layers computes. An encoding with parameters gets them
stacked too (``pelab.models.member_encodings``); each member's clipping and learning-rate step:
``pelab.models.member_steps``. ``select(net, members)`` runs a subset of the members (those
still training, or those whose batches share a shape); ``member_weights``/``load_member_weights``
move one member's weights in a single run's checkpoint format, which a K = 1 network loads.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pelab.devices import to_device
from pelab.models.member_encodings import MemberEncodings
from pelab.pe.base import PositionalEncoding


class Stacked(nn.Module):
    """A layer whose parameters carry the member dimension first (``[K, ...]``). ``members``
    selects the rows a forward uses (None: all). A checkpoint of a single run (unstacked shapes,
    as ``torch.nn`` stores them) loads into a K = 1 layer."""

    def __init__(self) -> None:
        super().__init__()
        self.members: Tensor | None = None  # indices of the selected members, None: all

    def stacked(self, name: str) -> Tensor | None:
        """Parameter ``name`` of the selected members, ``[K', ...]``."""
        p = getattr(self, name)
        if p is None or self.members is None:
            return p
        return p.index_select(0, self.members)

    def _load_from_state_dict(
        self, state_dict: dict[str, Any], prefix: str, *args: Any, **kwargs: Any
    ) -> None:
        for name, p in self._parameters.items():
            key = prefix + name
            saved = state_dict.get(key)
            if p is not None and saved is not None and saved.dim() == p.dim() - 1:
                state_dict[key] = saved.unsqueeze(0)  # a single run's checkpoint
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)


def folded(x: Tensor, k: int) -> Tensor:
    """``[k b, ...]`` -> ``[k, b ..., d]`` as one matrix per member: ``[k, rows, d]``."""
    return x.reshape(k, -1, x.shape[-1])


class Linear(Stacked):
    """``y = x W_k^T + b_k`` for member ``k``'s rows of ``x: [K b, ..., d_in]``; weights
    ``[K, d_out, d_in]``, initialised as ``torch.nn.Linear``'s (Kaiming-uniform, bias
    ``U(-1/sqrt(d_in), 1/sqrt(d_in))``)."""

    def __init__(self, d_in: int, d_out: int, bias: bool = True) -> None:
        super().__init__()
        self.in_features, self.out_features = d_in, d_out
        weight = torch.empty(d_out, d_in)
        nn.init.kaiming_uniform_(weight, a=math.sqrt(5))
        self.weight = nn.Parameter(weight[None])
        self.bias = None
        if bias:
            bound = 1 / math.sqrt(d_in) if d_in > 0 else 0.0
            self.bias = nn.Parameter(torch.empty(d_out).uniform_(-bound, bound)[None])

    def forward(self, x: Tensor, rows: slice | None = None) -> Tensor:
        """``rows``: only these output features (e.g. the queries of a fused q/k/v projection)."""
        w, b = self.stacked("weight"), self.stacked("bias")
        if rows is not None:
            w, b = w[:, rows], None if b is None else b[:, rows]
        k = w.shape[0]
        if k == 1:
            return F.linear(x, w.squeeze(0), None if b is None else b.squeeze(0))
        out = _MemberLinear.apply(folded(x, k), w, b)  # [k, rows, d_out]
        return out.reshape(*x.shape[:-1], w.shape[1])


class _MemberLinear(torch.autograd.Function):
    """``xs W_k^T + b_k`` for ``xs: [K, rows, d_in]``, ``W: [K, d_out, d_in]``, ``b: [K, d_out]``
    (or None), with a backward that gives ``dW = g^T xs`` in ``W``'s own layout: autograd's,
    through ``W.mT``, is transposed, and accumulating it into the weight copies it once per
    layer and step. Under autocast the forward's operation is cast as autocast casts it, and the
    backward computes in the gradient's dtype, each gradient returned in its input's."""

    @staticmethod
    def forward(ctx: Any, xs: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
        ctx.save_for_backward(xs, w)
        ctx.bias = b is not None
        return torch.bmm(xs, w.mT) if b is None else torch.baddbmm(b[:, None], xs, w.mT)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        xs, w = ctx.saved_tensors
        need_x, need_w, need_b = ctx.needs_input_grad
        dx = torch.bmm(grad, w.to(grad.dtype)).to(xs.dtype) if need_x else None
        dw = torch.bmm(grad.mT, xs.to(grad.dtype)).to(w.dtype) if need_w else None  # [K, o, i]
        db = grad.sum(1).to(w.dtype) if ctx.bias and need_b else None
        return dx, dw, db


class LayerNorm(Stacked):
    """``torch.nn.LayerNorm`` over the last dimension, with member ``k``'s gain and bias
    ``[K, d]``."""

    def __init__(self, d: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.d, self.eps = d, eps
        self.weight = nn.Parameter(torch.ones(1, d))
        self.bias = nn.Parameter(torch.zeros(1, d))

    def forward(self, x: Tensor) -> Tensor:
        w, b = self.stacked("weight"), self.stacked("bias")
        k = w.shape[0]
        if k == 1:
            return F.layer_norm(x, (self.d,), w.squeeze(0), b.squeeze(0), self.eps)
        normed = folded(F.layer_norm(x, (self.d,), None, None, self.eps), k)  # [k, rows, d]
        return _MemberAffine.apply(normed, w, b).reshape(x.shape)


class _MemberAffine(torch.autograd.Function):
    """``n w_k + b_k`` for ``n: [K, rows, d]``, ``w, b: [K, d]``, with a backward of 4
    operations (autograd's through ``addcmul`` takes 6: it multiplies by its scalar factor
    too)."""

    @staticmethod
    def forward(ctx: Any, normed: Tensor, w: Tensor, b: Tensor) -> Tensor:
        ctx.save_for_backward(normed, w)
        return torch.addcmul(b[:, None], normed, w[:, None])

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        normed, w = ctx.saved_tensors
        need_normed, need_w, need_b = ctx.needs_input_grad
        dn = (grad * w[:, None]).to(normed.dtype) if need_normed else None
        dw = (grad * normed).sum(1).to(w.dtype) if need_w else None
        db = grad.sum(1).to(w.dtype) if need_b else None
        return dn, dw, db


class Embedding(Stacked):
    """Member ``k``'s row ``W_k[t]`` of token ``t``; tables ``[K, V, d]``, initialised as
    ``torch.nn.Embedding``'s (``N(0, 1)``)."""

    def __init__(self, num_embeddings: int, d: int) -> None:
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, d
        weight = torch.empty(num_embeddings, d)
        nn.init.normal_(weight)
        self.weight = nn.Parameter(weight[None])

    def forward(self, tokens: Tensor) -> Tensor:
        w = self.stacked("weight")
        k, v, d = w.shape
        if k == 1:
            return F.embedding(tokens, w.squeeze(0))
        member = torch.arange(k, device=tokens.device).repeat_interleave(tokens.shape[0] // k)
        offsets = (member * v).view(-1, *([1] * (tokens.dim() - 1)))
        return F.embedding(tokens + offsets, w.reshape(k * v, d))


def members_of(net: nn.Module) -> int:
    """K, the number of members ``net`` holds."""
    for module in net.modules():
        weight = next(module.parameters(recurse=False), None)
        if isinstance(module, Stacked) and weight is not None:  # (a fixed scale holds none)
            return weight.shape[0]
        if isinstance(module, MemberEncodings):
            return module.count
    return 1


@contextmanager
def select(net: nn.Module, members: Sequence[int]) -> Iterator[None]:
    """Forwards of ``net`` inside run only ``members``, their batches folded in that order
    (``SequenceModel.selected`` skips this when every member runs in order)."""
    device = next(net.parameters()).device
    index = to_device(torch.tensor(list(members), dtype=torch.long, device="cpu"), device)
    changed = [m for m in net.modules() if isinstance(m, Stacked | MemberEncodings)]
    for module in changed:
        module.members = index
    try:
        yield
    finally:
        for module in changed:
            module.members = None


def _top_encodings(net: nn.Module) -> list[tuple[str, PositionalEncoding]]:
    """The encodings of ``net`` that are not part of another encoding, by module name."""
    found: list[tuple[str, PositionalEncoding]] = []
    for name, module in net.named_modules():
        inside = any(name.startswith(f"{outer}.") for outer, _ in found)
        if isinstance(module, PositionalEncoding) and not inside:
            found.append((name, module))
    return found


def _same_buffers(encodings: Sequence[nn.Module]) -> bool:
    buffers = [dict(e.named_buffers()) for e in encodings]
    return all(
        all(torch.equal(b[name], buffers[0][name]) for name in buffers[0]) for b in buffers[1:]
    )


def stack_members(nets: Sequence[nn.Module]) -> nn.Module:
    """One network holding every member of ``nets`` (same architecture, each initialised as its
    own single run): stacked layers get the members' weights in order; an encoding with
    parameters (or buffers that differ) gets them stacked too (``MemberEncodings``). Attention
    modules point at the encoding their network uses."""
    if len(nets) == 1:
        return nets[0]
    net = copy.deepcopy(nets[0])
    modules = [dict(n.named_modules()) for n in nets]
    for name, module in net.named_modules():
        if isinstance(module, Stacked):
            for pname, p in list(module._parameters.items()):
                if p is not None:
                    rows = [getattr(m[name], pname).detach() for m in modules]
                    setattr(module, pname, nn.Parameter(torch.cat(rows)))
    replaced: dict[int, PositionalEncoding] = {}
    for name, encoding in _top_encodings(net):
        own = [m[name] for m in modules]
        if not any(True for _ in encoding.parameters()) and _same_buffers(own):
            continue
        wrapper = MemberEncodings(own)
        parent, _, attr = name.rpartition(".")
        setattr(net.get_submodule(parent) if parent else net, attr, wrapper)
        replaced[id(encoding)] = wrapper
    for module in net.modules():
        pe = getattr(module, "_pe", None)
        if isinstance(pe, tuple) and pe and id(pe[0]) in replaced:
            module._pe = (replaced[id(pe[0])],)
    return net


def member_weights(net: nn.Module, k: int) -> dict[str, Tensor]:
    """Member ``k``'s weights as a single run's ``state_dict`` (unstacked shapes)."""
    state: dict[str, Tensor] = {}

    def visit(module: nn.Module, prefix: str) -> None:
        if isinstance(module, MemberEncodings):
            state.update({prefix + n: t.detach() for n, t in module.member(k).items()})
            return
        for name, p in module._parameters.items():
            if p is not None:
                state[prefix + name] = (p[k] if isinstance(module, Stacked) else p).detach()
        for name, buf in module._buffers.items():
            if buf is not None and name not in module._non_persistent_buffers_set:
                state[prefix + name] = buf
        for name, child in module._modules.items():
            if child is not None:
                visit(child, f"{prefix}{name}.")

    visit(net, "")
    return state


@torch.no_grad()
def load_member_weights(net: nn.Module, k: int, state: dict[str, Tensor]) -> None:
    """Member ``k`` of ``net`` takes the weights of ``state`` (``member_weights``'s format)."""
    own = member_weights(net, k)
    missing = sorted(set(own) - set(state))
    if missing:
        raise KeyError(f"a member's state lacks {', '.join(missing[:5])}")
    for key, tensor in own.items():
        tensor.copy_(state[key])


def fold(tensors: Sequence[Tensor]) -> Tensor:
    """The members' batches ``[b, ...]`` as one folded batch ``[K b, ...]``, member-major."""
    return tensors[0] if len(tensors) == 1 else torch.cat(list(tensors))


def fold_positions(positions: Sequence[Tensor], shared: bool = False) -> Tensor:
    """The members' positions ``[b|1, ...]`` folded: with ``shared`` positions (the sampler's
    ``shared``: the same for every sequence and member) and a leading 1, member 0's, broadcast;
    each member's rows otherwise."""
    first = positions[0]
    if len(positions) == 1 or (shared and all(p.shape == first.shape for p in positions)):
        return first
    rows = max(p.shape[0] for p in positions)
    return torch.cat([p.expand(rows, *p.shape[1:]) for p in positions])
