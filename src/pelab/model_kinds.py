"""Model kinds: how a (prompt, answer) pair becomes a sequence, and how answers are predicted.

Decoder (causal, GPT-style; Kazemnejad et al. 2023's setting):
    ``BOS p_1 .. p_n SEP a_1 .. a_m``; next-token loss on the answer tokens only; evaluation
    decodes greedily, one token at a time, from ``BOS p SEP`` (exact match is never computed
    with teacher forcing).
Encoder (bidirectional, Deletang et al. 2023's setting):
    ``BOS p_1 .. p_n SEP BLANK x m``; the answer is read off the BLANK slots in one pass.
    ``encoder_bare`` feeds Deletang et al.'s own layout, ``p_1 .. p_n BLANK x m``: the input
    followed by empty answer slots, with no BOS or SEP, on the first ``n + m`` positions.
Encoder–decoder (Vaswani et al. 2017):
    the encoder reads ``BOS p_1 .. p_n SEP``; the decoder reads ``SEP a_1 .. a_{m-1}`` (``SEP``
    is its start token) and predicts ``a_1 .. a_m`` with cross-attention to the encoder's
    output; teacher forcing in training, greedy decoding at evaluation.

Every model kind has the same three methods, so the LightningModule never asks which kind runs:
``teacher_forcing`` (the training inputs), ``answer_logits`` (the answer's logits, ``[b, m, V]``)
and ``predict`` (the greedy answer, ``[b, m]``); ``net_options`` are the arguments of the kind
for the network's constructor. Positions cover the canonical sequence
``BOS p_1 .. p_n SEP a_1 .. a_m`` (``n + m + 2`` tokens, ``[b|1, n + m + 2(, k)]``, from the run's
sampler in ``pelab.positions``); each kind slices what it feeds the model.

Greedy decoding uses the network's key/value cache when it offers one (``supports_kv_cache``):
the prompt is fed once, then one token per step, so ``m`` steps cost ``O(m)`` one-token forwards.
Encodings that cannot use a cache (``supports_kv_cache = False``, e.g. RoPE with
``scaling=dynamic_ntk``, whose frequencies change with the length) and networks without one fall
back to a full forward over the prefix at every step; both paths give the same tokens (tested).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import ClassVar

import torch
from torch import Tensor, nn

from pelab.errors import ConfigError
from pelab.tokens import BLANK, BOS, SEP

log = logging.getLogger(__name__)


def _prefix(prompt: Tensor) -> Tensor:
    """``[b, n]`` -> ``BOS prompt SEP`` as ``[b, n + 2]``."""
    b = prompt.shape[0]
    bos = prompt.new_full((b, 1), BOS)
    sep = prompt.new_full((b, 1), SEP)
    return torch.cat((bos, prompt, sep), dim=1)


def greedy(
    step: Callable[[Tensor, Tensor], Tensor],
    start: Tensor,
    answer_length: int,
    positions: Tensor,
    cached: bool,
) -> Tensor:
    """Greedy decoding of ``answer_length`` tokens after ``start: [b, s]`` -> ``[b, m]``.

    ``step(tokens, positions)`` returns the logits ``[b, n, V]`` of ``tokens``; ``positions``
    cover ``start`` and every generated token but the last. ``cached``: ``step`` keeps a
    key/value cache, so each step feeds only the tokens not fed yet (the whole ``start`` first,
    then the last prediction); otherwise each step feeds everything so far.
    """
    s = start.shape[1]
    seq = torch.cat((start, start.new_empty(start.shape[0], answer_length)), dim=1)
    for t in range(s, s + answer_length):  # seq[:, :t] is known; predict seq[:, t]
        first = (0 if t == s else t - 1) if cached else 0
        seq[:, t] = step(seq[:, first:t], positions[:, first:t])[:, -1].argmax(dim=-1)
    return seq[:, s:]


def _cached(net: nn.Module, use_cache: bool) -> bool:
    """Whether greedy decoding on ``net`` feeds one token per step (networks without the
    ``supports_kv_cache`` property, e.g. test doubles, decode with full forwards)."""
    supported = getattr(net, "supports_kv_cache", None)
    if use_cache and supported is False:
        _note_full_forwards()
    return use_cache and bool(supported)


@functools.cache
def _note_full_forwards() -> None:
    log.info(
        "this encoding cannot decode with a key/value cache: greedy decoding re-runs the whole "
        "prefix at every step (O(n) full forwards for n answer tokens)"
    )


class DecoderKind:
    net_options: ClassVar[dict[str, bool]] = {"causal": True}
    markers: ClassVar[int] = 2  # tokens fed before the answer besides the prompt: BOS, SEP

    @staticmethod
    def teacher_forcing(prompt: Tensor, answer: Tensor) -> tuple[Tensor, Tensor]:
        """Inputs ``[b, n + m + 1]`` and the answer's position slice (answer logits)."""
        seq = torch.cat((_prefix(prompt), answer), dim=1)
        n_prefix = prompt.shape[1] + 2
        return seq[:, :-1], slice(n_prefix - 1, None)

    @classmethod
    def answer_logits(
        cls, net: nn.Module, prompt: Tensor, answer: Tensor, positions: Tensor
    ) -> Tensor:
        inputs, answer_slice = cls.teacher_forcing(prompt, answer)
        return net(inputs, positions[:, :-1])[:, answer_slice]

    @staticmethod
    @torch.no_grad()
    def predict(
        net: nn.Module,
        prompt: Tensor,
        answer_length: int,
        positions: Tensor,
        use_cache: bool = True,
    ) -> Tensor:
        """Greedy decoding of ``answer_length`` tokens from ``BOS prompt SEP`` -> ``[b, m]``;
        each step feeds the model the slice of ``positions`` that covers its tokens."""
        prefix = _prefix(prompt)
        if not _cached(net, use_cache):
            return greedy(net, prefix, answer_length, positions, cached=False)
        cache = net.new_cache(prefix.shape[1] + answer_length - 1)
        return greedy(
            lambda tokens, pos: net(tokens, pos, cache), prefix, answer_length, positions, True
        )


class EncoderKind:
    """The encoder on ``BOS p_1 .. p_n SEP BLANK x m``; a subclass changes the layout through
    ``inputs`` (the tokens fed), ``fed_positions`` (their positions) and ``markers``."""

    net_options: ClassVar[dict[str, bool]] = {"causal": False}
    markers: ClassVar[int] = 2  # BOS, SEP

    @staticmethod
    def inputs(prompt: Tensor, slots: Tensor) -> Tensor:
        """``[b, n]``, ``[b, m]`` -> the tokens fed, ``[b, n + markers + m]``."""
        return torch.cat((_prefix(prompt), slots), dim=1)

    @staticmethod
    def fed_positions(positions: Tensor, n: int, m: int) -> Tensor:
        """The canonical positions ``[b|1, n + m + 2(, k)]`` of the tokens fed."""
        return positions

    @classmethod
    def teacher_forcing(cls, prompt: Tensor, answer: Tensor) -> tuple[Tensor, Tensor]:
        seq = cls.inputs(prompt, answer.new_full(answer.shape, BLANK))
        return seq, slice(prompt.shape[1] + cls.markers, None)

    @classmethod
    def answer_logits(
        cls, net: nn.Module, prompt: Tensor, answer: Tensor, positions: Tensor
    ) -> Tensor:
        inputs, answer_slice = cls.teacher_forcing(prompt, answer)
        fed = cls.fed_positions(positions, prompt.shape[1], answer.shape[1])
        return net(inputs, fed)[:, answer_slice]

    @classmethod
    @torch.no_grad()
    def predict(
        cls,
        net: nn.Module,
        prompt: Tensor,
        answer_length: int,
        positions: Tensor,
        use_cache: bool = True,
    ) -> Tensor:
        """One forward over the prompt and ``BLANK`` slots (``use_cache`` has nothing to do)."""
        seq = cls.inputs(prompt, prompt.new_full((prompt.shape[0], answer_length), BLANK))
        fed = cls.fed_positions(positions, prompt.shape[1], answer_length)
        return net(seq, fed)[:, -answer_length:].argmax(dim=-1)


class BareEncoderKind(EncoderKind):
    """The encoder on ``p_1 .. p_n BLANK x m``, no BOS or SEP (the layout of Deletang et al.
    2023 and Ruoss et al. 2023)."""

    markers: ClassVar[int] = 0

    @staticmethod
    def inputs(prompt: Tensor, slots: Tensor) -> Tensor:
        return torch.cat((prompt, slots), dim=1)

    @staticmethod
    def fed_positions(positions: Tensor, n: int, m: int) -> Tensor:
        """For 1-D positions the first ``n + m`` canonical ones (contiguous positions then run
        ``0 .. n + m - 1``, as in Deletang et al.'s code); for a task's k-D coordinates
        ``[b|1, n + m + 2, k]`` those of the prompt and answer tokens."""
        if positions.dim() == 3:
            return torch.cat((positions[:, 1 : n + 1], positions[:, n + 2 : n + m + 2]), dim=1)
        return positions[:, : n + m]


class EncoderDecoderKind:
    """Source ``BOS p SEP`` for the encoder, target ``SEP a_1 .. a_{m-1}`` for the decoder.

    Positions: the encoder gets the canonical positions of its tokens, ``positions[:, :n+2]``.
    The decoder gets those of its tokens, ``positions[:, n+1 : n+m+1]``, shifted so that its
    start token sits where ``BOS`` sits: ``- positions[SEP] + positions[BOS]``. With contiguous
    positions the encoder and the decoder thus each count from 0 (``0..n+1`` and ``0..m-1``), as
    in the original Transformer, where the sinusoids of each start at its first token; with
    randomized positions the decoder keeps the sampled gaps between its tokens and starts at the
    encoder's first position, so both stay inside ``[0, max_position)`` and see the same
    distribution of offsets. (Continuing the canonical positions into the decoder instead would
    make every answer position depend on the prompt length, which the encoder–decoder
    separates.) k-D positions are shifted per coordinate.
    """

    net_options: ClassVar[dict[str, bool]] = {}  # bidirectional encoder, causal decoder
    markers: ClassVar[int] = 2  # BOS, SEP

    @staticmethod
    def teacher_forcing(prompt: Tensor, answer: Tensor) -> tuple[Tensor, Tensor]:
        """Encoder tokens ``[b, n + 2]`` and decoder tokens ``[b, m]``; the decoder's logits at
        position ``t`` predict ``a_{t+1}``."""
        source = _prefix(prompt)
        target = torch.cat((source[:, -1:], answer[:, :-1]), dim=1)
        return source, target

    @staticmethod
    def split_positions(
        positions: Tensor, prompt_length: int, answer_length: int
    ) -> tuple[Tensor, Tensor]:
        """Canonical positions ``[b|1, n + m + 2(, k)]`` -> the encoder's ``[b|1, n + 2(, k)]``
        and the decoder's ``[b|1, m(, k)]`` (see the class docstring)."""
        n, m = prompt_length, answer_length
        source = positions[:, : n + 2]
        shift = positions[:, n + 1 : n + 2] - positions[:, :1]  # SEP's position - BOS's
        return source, positions[:, n + 1 : n + m + 1] - shift

    @classmethod
    def answer_logits(
        cls, net: nn.Module, prompt: Tensor, answer: Tensor, positions: Tensor
    ) -> Tensor:
        source, target = cls.teacher_forcing(prompt, answer)
        source_pos, target_pos = cls.split_positions(positions, prompt.shape[1], answer.shape[1])
        return net(source, target, source_pos, target_pos)

    @classmethod
    @torch.no_grad()
    def predict(
        cls,
        net: nn.Module,
        prompt: Tensor,
        answer_length: int,
        positions: Tensor,
        use_cache: bool = True,
    ) -> Tensor:
        """Encode ``BOS prompt SEP`` once, then decode greedily from ``SEP`` -> ``[b, m]``."""
        source = _prefix(prompt)
        source_pos, target_pos = cls.split_positions(positions, prompt.shape[1], answer_length)
        memory = net.encode(source, source_pos)
        start = source[:, -1:]
        if not _cached(net, use_cache):
            return greedy(
                lambda tokens, pos: net.decode(tokens, memory, pos),
                start,
                answer_length,
                target_pos,
                cached=False,
            )
        cache = net.new_cache(answer_length)
        return greedy(
            lambda tokens, pos: net.decode(tokens, memory, pos, cache),
            start,
            answer_length,
            target_pos,
            cached=True,
        )


ModelKind = type[DecoderKind] | type[EncoderKind] | type[EncoderDecoderKind]
MODEL_KINDS: dict[str, ModelKind] = {
    "decoder": DecoderKind,
    "encoder": EncoderKind,
    "encoder_bare": BareEncoderKind,
    "encoder_decoder": EncoderDecoderKind,
}


def get_model_kind(kind: str) -> ModelKind:
    try:
        return MODEL_KINDS[kind]
    except KeyError:
        raise ConfigError(
            f"unknown model.kind {kind!r}; valid choices: {', '.join(MODEL_KINDS)}"
        ) from None
