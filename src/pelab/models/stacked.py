"""The member dimension: K models of one architecture trained as one network.

Every job is a stack of K >= 1 *members* (``seeds=[...]``, ``learning_rates=[...]``; a plain
run is a job of K = 1). The layers that hold weights store them stacked, ``[K, ...]``, and run
once for every member: ``Linear`` with one ``bmm`` over K, ``LayerNorm`` and ``Embedding`` with a
member's own row of their tables. Everything else (attention, the positional encodings, the
loss) sees the members folded into the batch, member-major: ``[K b, ...]`` holds member 0's ``b``
sequences, then member 1's, and so on. Attention never mixes sequences, so it needs no member
dimension.

With K = 1 each layer calls the kernel of its ``torch.nn`` namesake on the one member's weights
(a view: its backward copies nothing),
and initialises them with the same random draws in the same order: a plain run computes, bit for
bit, what a network of ``torch.nn`` layers computes.

Positional encodings act through their hooks (``pelab.pe.base``). An encoding without parameters
(and with the same buffers in every member) runs once on the folded batch. One with parameters
gets them stacked ``[K, ...]`` like the layers' (``MemberEncodings``), and each hook runs once
for all members: ``torch.func.vmap`` over the stacked parameters and the members' slices
``[K, b, ...]`` of the folded batch, so a stack launches about what one member launches (a GPU
runs small models launch-bound; ``benchmarks/operations.py`` counts it). Where the members'
positions differ (``positions=randomized``) or an encoding declares ``members_at_once = False``
(it draws random numbers, or its solver writes in place), each hook runs member ``k`` on its
row of the parameters and its own slice in turn and joins what the members return. No encoding
is named here.

``select(net, members)`` runs a subset of the members (those still training, or those whose
batches share a shape); ``member_state``/``load_member`` move one member's weights in the format
of a single run's checkpoint (unstacked shapes), which a K = 1 network also loads.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch._C._functorch import is_batchedtensor

from pelab.devices import to_device
from pelab.pe.base import PositionalEncoding
from pelab.positions import Positions


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


class MemberEncodings(PositionalEncoding):
    """One encoding per member (an encoding with parameters), its parameters and buffers
    stacked ``[K, ...]`` like a ``Stacked`` layer's (``names``: each one's name in the
    encoding) and its code in ``encoding``, member 0's module, which holds no state of its
    own here (not registered: each hook runs it on the members' tensors, ``functional_call``).

    Each hook runs once for all members (``torch.func.vmap`` over the stacked state and the
    members' slices ``[K, b, ...]`` of the folded tensors ``[K b, ...]``; shared positions and
    broadcast ``[1, ...]`` tensors as they are). Where it cannot (``members_at_once`` False, or
    the members' positions differ), member ``k`` gets its row of the state, its slice ``[b, ...]``
    and its own ``Positions`` (so what the encoding memoises per forward stays its own), and the
    members' answers are joined, a broadcast ``[1, ...]`` expanded to the member's ``b``."""

    shift = "absolute"  # never registered; the members' own classes declare theirs

    def __init__(self, encodings: Sequence[PositionalEncoding]) -> None:
        nn.Module.__init__(self)
        first = encodings[0]
        object.__setattr__(self, "encoding", first)  # the code, not the state: not registered
        self.dims, self.pe_name = first.dims, getattr(first, "pe_name", type(first).__name__)
        self.supports_kv_cache = first.supports_kv_cache
        self.members_at_once = first.members_at_once
        self.count = len(encodings)
        own = [dict(e.named_parameters()) for e in encodings]
        self.names = list(own[0])  # the parameters' names in the encoding, then the buffers'
        for name in self.names:
            rows = torch.stack([o[name].detach() for o in own])
            self.register_parameter(_key(name), nn.Parameter(rows))
        self.saved = set(self.names)  # what a single run's state_dict holds: + persistent buffers
        for module_name, module in first.named_modules():
            prefix = f"{module_name}." if module_name else ""
            for name in module._buffers:
                if name not in module._non_persistent_buffers_set:
                    self.saved.add(prefix + name)
        for name, _ in first.named_buffers():
            rows = [e.get_buffer(name) for e in encodings]
            self.register_buffer(_key(name), torch.stack(rows), persistent=False)
            self.names.append(name)
        self.constrains = any(
            type(m).constrain is not PositionalEncoding.constrain
            for m in first.modules()
            if isinstance(m, PositionalEncoding)
        )
        self.members: Tensor | None = None  # indices of the selected members, None: all
        self.batch = 0  # the folded batch of the current forward (``embed`` comes first)

    def train(self, mode: bool = True) -> MemberEncodings:
        super().train(mode)
        self.encoding.train(mode)  # not registered, so not reached otherwise
        return self

    def overrides(self, hook: str) -> bool:  # type: ignore[override]
        return self.encoding.overrides(hook)

    def needs_eager_attention(self) -> bool:  # type: ignore[override]
        return self.encoding.needs_eager_attention()

    def state(self, selected: bool = True) -> dict[str, Tensor]:
        """The stacked parameters and buffers ``[K', ...]`` (of the selected members), by their
        name in the encoding."""
        tensors = {**self._parameters, **self._buffers}
        state = {name: tensors[_key(name)] for name in self.names}
        if selected and self.members is not None:
            return {name: t.index_select(0, self.members) for name, t in state.items()}
        return state

    def member(self, k: int) -> dict[str, Tensor]:
        """Member ``k``'s parameters and persistent buffers, by their name in its single run's
        encoding (views of the stacked rows)."""
        return {n: t[k] for n, t in self.state(selected=False).items() if n in self.saved}

    @torch.no_grad()
    def constrain(self) -> None:
        """The encoding's constraint (``PositionalEncoding.constrain``), in place on the stacked
        parameters of every member."""
        if self.constrains:
            _call(self.encoding, "constrain", self.state(selected=False), ())

    def embed(self, x: Tensor, tokens: Tensor, pos: Positions) -> Tensor:
        self.batch = x.shape[0]
        return self._each("embed", pos, (x, tokens), None)

    def layer_input(self, x: Tensor, pos: Positions, layer: int) -> Tensor:
        return self._each("layer_input", pos, (x,), layer)

    def transform_qk(
        self, q: Tensor, k: Tensor, pos: Positions, layer: int
    ) -> tuple[Tensor, Tensor]:
        return self._each("transform_qk", pos, (q, k), layer)

    def logit_bias(self, pos: Positions, layer: int) -> Tensor | None:
        return self._each("logit_bias", pos, (), layer)

    def input_bias(
        self, x: Tensor, q: Tensor, k: Tensor, pos: Positions, layer: int
    ) -> Tensor | None:
        return self._each("input_bias", pos, (x, q, k), layer)

    def modify_logits(
        self, logits: Tensor, q: Tensor, k: Tensor, pos: Positions, layer: int
    ) -> Tensor:
        return self._each("modify_logits", pos, (logits, q, k), layer)

    def normalize(self, logits: Tensor, pos: Positions, layer: int) -> Tensor:
        return self._each("normalize", pos, (logits,), layer)

    def modify_probs(self, probs: Tensor, pos: Positions, layer: int) -> Tensor:
        return self._each("modify_probs", pos, (probs,), layer)

    def modify_output(self, out: Tensor, probs: Tensor, pos: Positions, layer: int) -> Tensor:
        return self._each("modify_output", pos, (out, probs), layer)

    def _each(
        self, hook: str, pos: Positions, tensors: tuple[Tensor, ...], layer: int | None
    ) -> Any:
        """``hook(*tensors, pos[, layer])`` of each selected member on its slice: all at once
        where the encoding allows it and the positions are shared, else one after another."""
        state = pos.memo(("member state", id(self)), self.state)  # [K', ...] each
        n = self.count if self.members is None else len(self.members)
        b = self.batch // n
        extra = () if layer is None else (layer,)
        if self.members_at_once and pos.q.shape[0] != self.batch:
            return self._at_once(hook, pos, tensors, extra, state, n)
        answers = []
        for i in range(n):
            own = [_slice(t, i, b, self.batch) for t in tensors]
            member_pos = pos.memo(("member", i, n), lambda i=i: _member_positions(pos, i, b, n))
            row = {name: t[i] for name, t in state.items()}
            answers.append(_call(self.encoding, hook, row, (*own, member_pos, *extra)))
        return _join(answers, b)

    def _at_once(
        self,
        hook: str,
        pos: Positions,
        tensors: tuple[Tensor, ...],
        extra: tuple[int, ...],
        state: dict[str, Tensor],
        n: int,
    ) -> Any:
        """The hook run once under ``torch.func.vmap`` over the members: the state and the
        folded tensors split ``[K', b, ...]``; the shared positions and broadcast tensors as
        they are. What the hook memoises per member (a bias from its weights) leaves the call
        stacked ``[K', ...]`` and enters the forward's later calls again, so an encoding
        computes it once per forward, as a single run does."""
        carried = pos.memo(("member memo", id(self)), dict)  # key -> its value [K', ...]
        args = [t.unflatten(0, (n, -1)) if t.shape[0] == self.batch else t for t in tensors]
        dims = [0 if t.shape[0] == self.batch else None for t in tensors]
        returned_none = False

        def member(row: dict[str, Tensor], memo: dict, *own: Tensor) -> Any:
            nonlocal returned_none
            shared = _SharedMemo(pos.q, pos.k, pos, memo)
            answer = _call(self.encoding, hook, row, (*own, shared, *extra))
            returned_none = answer is None
            return (torch.zeros(()) if answer is None else answer), shared.new()

        vmapped = torch.func.vmap(member, in_dims=(0, 0, *dims), randomness="error")
        answers, new = vmapped(state, carried, *args)
        carried.update(new)
        return None if returned_none else _unfold(answers, self.batch // n)


class _SharedMemo(Positions):
    """The shared positions inside ``vmap``. What the hook memoises and does not depend on a
    member (a T5 bucket index, a distance matrix: no batched tensor in it) goes to the
    forward's ``Positions``, so later layers and hooks reuse it, as in a single run. What does
    starts from ``carried`` (earlier calls' values, batched again) and what this call adds is
    ``new``, for the caller to carry on."""

    def __init__(self, q: Tensor, k: Tensor, outer: Positions, carried: dict) -> None:
        super().__init__(q, k)
        self.outer = outer
        self._memo.update(carried)
        self.carried = set(carried)

    def memo(self, key: Any, compute: Callable[[], Any]) -> Any:
        if key in self.outer._memo:
            return self.outer._memo[key]
        if key in self._memo:
            return self._memo[key]
        value = compute()
        leaves = torch.utils._pytree.tree_leaves(value)
        if not any(isinstance(t, Tensor) and is_batchedtensor(t) for t in leaves):
            self.outer._memo[key] = value
        else:
            self._memo[key] = value
        return value

    def new(self) -> dict:
        """The batched values this call memoised (those made of tensors alone)."""
        return {
            key: value
            for key, value in self._memo.items()
            if key not in self.carried
            and all(isinstance(t, Tensor) for t in torch.utils._pytree.tree_leaves(value))
        }


def _key(name: str) -> str:
    """A parameter's or buffer's name in the encoding as an attribute name (no dots)."""
    return "member_" + name.replace(".", "__")


class _Hook(nn.Module):
    """One method of an encoding as a module's forward (what ``functional_call`` runs)."""

    def __init__(self, encoding: PositionalEncoding, hook: str) -> None:
        super().__init__()
        self.encoding, self.hook = encoding, hook

    def forward(self, *args: Any) -> Any:
        return getattr(self.encoding, self.hook)(*args)


def _call(encoding: PositionalEncoding, hook: str, state: dict[str, Tensor], args: tuple) -> Any:
    """``encoding.hook(*args)`` with its parameters and buffers ``state`` (by name)."""
    named = {f"encoding.{name}": t for name, t in state.items()}
    return torch.func.functional_call(_Hook(encoding, hook), named, args)


def _unfold(answers: Any, b: int) -> Any:
    """Answers ``[K', b|1, ...]`` (tuples elementwise) as one folded answer ``[K' b, ...]``."""
    if isinstance(answers, tuple):
        return tuple(_unfold(a, b) for a in answers)
    return answers.expand(answers.shape[0], b, *answers.shape[2:]).flatten(0, 1)


def _slice(t: Tensor, i: int, b: int, batch: int) -> Tensor:
    """Member ``i``'s rows of a folded ``[batch, ...]`` tensor (a broadcast ``[1, ...]`` as it
    is)."""
    return t[i * b : (i + 1) * b] if t.shape[0] == batch else t


def _member_positions(pos: Positions, i: int, b: int, n: int) -> Positions:
    """Member ``i``'s own ``Positions`` (its rows where the positions are per sequence)."""
    batch = b * n
    return Positions(_slice(pos.q, i, b, batch), _slice(pos.k, i, b, batch))


def _join(answers: list[Any], b: int) -> Any:
    """The members' answers as one folded answer (None stays None; tuples elementwise)."""
    first = answers[0]
    if first is None:
        return None
    if isinstance(first, tuple):
        return tuple(_join(list(parts), b) for parts in zip(*answers, strict=True))
    return torch.cat([a.expand(b, *a.shape[1:]) if a.shape[0] != b else a for a in answers])


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


def member_state(net: nn.Module, k: int) -> dict[str, Tensor]:
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
def load_member(net: nn.Module, k: int, state: dict[str, Tensor]) -> None:
    """Member ``k`` of ``net`` takes the weights of ``state`` (``member_state``'s format)."""
    own = member_state(net, k)
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


def member_parameters(net: nn.Module) -> list[tuple[Tensor, int | None]]:
    """Every parameter of ``net`` with its member: None for a stacked one (``[K, ...]``, every
    member: a layer's or an encoding's), 0 for one of a network of one member alone (its
    encoding's, unstacked)."""
    stacked = {
        id(p)
        for m in net.modules()
        if isinstance(m, Stacked | MemberEncodings)
        for p in m.parameters(recurse=False)
    }
    return [(p, None if id(p) in stacked else 0) for p in net.parameters()]


@torch.no_grad()
def clip_member_norms(net: nn.Module, max_norm: float) -> None:
    """``torch.nn.utils.clip_grad_norm_`` for each member on its own gradient: member ``k``'s
    gradient times ``min(1, max_norm / (||g_k|| + 1e-6))``. The stacked gradients ``[K, ...]``
    are reduced in one operation over their concatenated rows (a temporary copy of them) and
    scaled by one ``foreach`` operation, not a few per parameter (fewer launches: aten
    operations of a 40-step run at K = 8 over K = 1, rope 1.47x -> 1.36x)."""
    owners = [(p, k) for p, k in member_parameters(net) if p.grad is not None]
    if not owners:
        return
    stacked = [p.grad for p, k in owners if k is None]  # [K, ...] each
    own = [(p.grad, k) for p, k in owners if k is not None]  # one member's encoding
    squares = torch.zeros(members_of(net), device=owners[0][0].device)  # [K]
    if stacked:  # [K, sum of the parameters' sizes]: each member's squared norm
        squares += torch.cat([g.reshape(len(g), -1) for g in stacked], dim=1).square().sum(dim=1)
    for grad, k in own:
        squares[k] += grad.square().sum()
    coef = (max_norm / (squares.sqrt() + 1e-6)).clamp(max=1.0)
    if stacked:
        torch._foreach_mul_(stacked, [coef.view(-1, *[1] * (g.dim() - 1)) for g in stacked])
    for grad, k in own:
        grad.mul_(coef[k])


@torch.no_grad()
def scale_member_steps(net: nn.Module, before: Sequence[Tensor], rates: Sequence[float]) -> None:
    """Scale each member's part of the optimizer step just taken by ``rates[k]``: every
    parameter of ``net`` moves from its value ``before`` the step by that fraction of it (0
    keeps a member's weights; the rates are host numbers, copied once per device and dtype),
    in two ``foreach`` operations over all parameters."""
    weights = {}  # the rates on each parameter's device, in its dtype: [K]
    params, olds, each = [], list(before), []
    for p, owner in member_parameters(net):
        key = (p.device, p.dtype)
        if key not in weights:
            weights[key] = to_device(torch.tensor(rates, dtype=p.dtype, device="cpu"), p.device)
        rate = weights[key]
        params.append(p)
        each.append(rate.view(-1, *[1] * (p.dim() - 1)) if owner is None else rate[owner])
    if len(olds) != len(params):
        raise ValueError(f"{len(olds)} values from before the step for {len(params)} parameters")
    torch._foreach_lerp_(olds, params, each)  # old + rate (new - old), in place of old
    torch._foreach_copy_(params, olds)
