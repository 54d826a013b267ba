"""Model kinds: how a (prompt, answer) pair becomes a sequence, and how answers are predicted.

Decoder (causal, GPT-style; Kazemnejad et al. 2023's setting):
    ``BOS p_1 .. p_n SEP a_1 .. a_m``; next-token loss on the answer tokens only; evaluation
    decodes greedily, one token at a time, from ``BOS p SEP`` (exact match is never computed
    with teacher forcing).
Encoder (bidirectional, Deletang et al. 2023's setting):
    ``BOS p_1 .. p_n SEP BLANK x m``; the answer is read off the BLANK slots in one pass.

Every layout has the same three methods, so the LightningModule never asks which kind runs:
``teacher_forcing`` (the training sequence), ``answer_logits`` (the answer's logits, ``[b, m, V]``)
and ``predict`` (the greedy answer, ``[b, m]``). Positions, when given, cover the canonical
sequence ``BOS p_1 .. p_n SEP a_1 .. a_m`` (``n + m + 2`` tokens, ``[b|1, n + m + 2(, k)]``);
each layout slices what it feeds the model.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from pelab.pe.base import ConfigError
from pelab.tasks.base import BLANK, BOS, SEP


def _prefix(prompt: Tensor) -> Tensor:
    """``[b, n]`` -> ``BOS prompt SEP`` as ``[b, n + 2]``."""
    b = prompt.shape[0]
    bos = prompt.new_full((b, 1), BOS)
    sep = prompt.new_full((b, 1), SEP)
    return torch.cat((bos, prompt, sep), dim=1)


class DecoderLayout:
    causal = True

    @staticmethod
    def teacher_forcing(prompt: Tensor, answer: Tensor) -> tuple[Tensor, Tensor]:
        """Inputs ``[b, n + m + 1]`` and the answer's position slice (answer logits)."""
        seq = torch.cat((_prefix(prompt), answer), dim=1)
        n_prefix = prompt.shape[1] + 2
        return seq[:, :-1], slice(n_prefix - 1, None)

    @classmethod
    def answer_logits(
        cls, net: nn.Module, prompt: Tensor, answer: Tensor, positions: Tensor | None = None
    ) -> Tensor:
        inputs, answer_slice = cls.teacher_forcing(prompt, answer)
        pos = None if positions is None else positions[:, :-1]
        return net(inputs, pos)[:, answer_slice]

    @staticmethod
    @torch.no_grad()
    def predict(
        net: nn.Module, prompt: Tensor, answer_length: int, positions: Tensor | None = None
    ) -> Tensor:
        """Greedy decoding of ``answer_length`` tokens -> ``[b, m]``; each step feeds the model
        the prefix of ``positions`` that covers its tokens."""
        seq = _prefix(prompt)
        for _ in range(answer_length):
            pos = None if positions is None else positions[:, : seq.shape[1]]
            next_token = net(seq, pos)[:, -1].argmax(dim=-1, keepdim=True)
            seq = torch.cat((seq, next_token), dim=1)
        return seq[:, -answer_length:]


class EncoderLayout:
    causal = False

    @staticmethod
    def teacher_forcing(prompt: Tensor, answer: Tensor) -> tuple[Tensor, Tensor]:
        slots = answer.new_full(answer.shape, BLANK)
        seq = torch.cat((_prefix(prompt), slots), dim=1)
        return seq, slice(prompt.shape[1] + 2, None)

    @classmethod
    def answer_logits(
        cls, net: nn.Module, prompt: Tensor, answer: Tensor, positions: Tensor | None = None
    ) -> Tensor:
        inputs, answer_slice = cls.teacher_forcing(prompt, answer)
        return net(inputs, positions)[:, answer_slice]

    @staticmethod
    @torch.no_grad()
    def predict(
        net: nn.Module, prompt: Tensor, answer_length: int, positions: Tensor | None = None
    ) -> Tensor:
        slots = prompt.new_full((prompt.shape[0], answer_length), BLANK)
        seq = torch.cat((_prefix(prompt), slots), dim=1)
        return net(seq, positions)[:, -answer_length:].argmax(dim=-1)


LAYOUTS = {"decoder": DecoderLayout, "encoder": EncoderLayout}


def get_layout(kind: str) -> type[DecoderLayout] | type[EncoderLayout]:
    try:
        return LAYOUTS[kind]
    except KeyError:
        raise ConfigError(
            f"unknown model.kind {kind!r}; valid choices: {', '.join(LAYOUTS)}"
        ) from None
