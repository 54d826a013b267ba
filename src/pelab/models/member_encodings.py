"""An encoding with parameters in a stack of K members (``pelab.models.stacked``): its
parameters and buffers stacked ``[K, ...]`` like the layers', and each hook run once for all
members: ``torch.func.vmap`` over the stacked parameters and the members' slices ``[K, b, ...]``
of the folded batch ``[K b, ...]``, so a stack launches about what one member launches (a GPU
runs small models launch-bound; ``benchmarks/operations.py`` counts it). What a hook memoises
per member lasts the forward, as in a single run; what does not read the parameters is shared.
Where the members' positions differ (``positions=randomized``) or an encoding declares
``members_at_once = False`` (it draws random numbers, or its solver writes in place), each hook
runs member ``k`` on its row of the parameters and its own slice in turn and joins what the
members return. No encoding is named here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor, nn
from torch._C._functorch import is_batchedtensor

from pelab.pe.base import PositionalEncoding
from pelab.positions import Positions


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
        self.prefix_only = first.prefix_only
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
            # a buffer a single run's checkpoint keeps, a stack's keeps too (stacked)
            self.register_buffer(_key(name), torch.stack(rows), persistent=name in self.saved)
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
            if returned_none:  # vmap returns tensors only
                return torch.zeros((), device=pos.q.device), shared.new()
            return answer, shared.new()

        vmapped = torch.func.vmap(member, in_dims=(0, 0, *dims), randomness="error")
        try:
            answers, new = vmapped(state, carried, *args)
        except RuntimeError as error:
            if "vmap" not in str(error):
                raise
            raise RuntimeError(not_at_once(self.pe_name, hook, error)) from error
        carried.update(new)
        return None if returned_none else _unfold(answers, self.batch // n)


def not_at_once(name: str, hook: str, error: BaseException) -> str:
    """What to change when ``torch.func.vmap`` refused an encoding's hook (``error``)."""
    first = str(error).strip().splitlines()[0]
    return (
        f"pe={name}: its {hook} cannot run for a stack's members at once (torch.func.vmap: "
        f"{first}). A hook must be a pure function of its inputs and parameters: no in-place "
        "write to a parameter (do it in `constrain`), no host read of a parameter's value "
        "(`.item()`, `float()`, `if` on it), no random numbers. Or declare `members_at_once = "
        "False` on the class: the members then run it one after another (docs/encodings.md, "
        "'Adding an encoding')."
    )


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
