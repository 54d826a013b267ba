"""Indirect indexing: the letter at a given offset from a given letter (Gopalakrishnan et al.
2025, PoPE)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import torch
from torch import Tensor

from pelab.errors import ConfigError
from pelab.tasks.base import Task, register_task
from pelab.tokens import N_SPECIAL

ShiftFormat = Literal["digits", "token"]  # task.shift_format


@register_task("indirect_indexing")
class IndirectIndexingTask(Task):
    """``BOS Q E O H U D K f e z X u , z , - 0 3 SEP`` -> ``K`` (the letter 3 left of ``z``).

    Gopalakrishnan, Csordas, Schmidhuber and Mozer 2025, "Decoupling the 'What' and 'Where' With
    Polar Coordinate Positional Embeddings" (arXiv 2509.10534), section 4 and appendix A.1:
    a source string of distinct letters, a source letter taken from it and a signed shift; the
    answer is the letter ``shift`` places to the right (left if negative) of the source letter::

        answer = string[string.index(source) + shift]

    The string is ``length`` letters drawn uniformly without replacement from ``num_letters``
    letters (the paper: 52, ``A-Z a-z``, strings of 20-40 letters), in random order; the source
    position is uniform over the string; the shift is uniform over the nonzero shifts in
    ``[-max_shift, +max_shift]`` (the paper: 15) that keep the answer inside the string. Letters
    are tokens ``N_SPECIAL .. N_SPECIAL + num_letters - 1``; then the delimiter ``,``.

    ``shift_format="digits"`` (default) writes the prompt as the paper's character-level
    tokenisation does, ``string , source , sign digits`` with the tokens ``+ -`` and ``0-9``
    after the delimiter; the magnitude is zero-padded to the digits of ``max_shift`` (the paper
    writes ``-8``, here ``- 0 8``) so that every prompt of a length has the same size.
    ``shift_format="token"`` writes the shift as one token of its own, one per nonzero shift
    (``-max_shift .. -1, 1 .. max_shift``), so the model need not read a number:
    ``string , source , shift``. The paper's delimiter after the shift is pelab's ``SEP``.

    The length axis is the string's letters (``2 <= length <= num_letters``); the prompt has
    ``length + 4 + digits`` tokens (``length + 4`` with ``token``), the answer one token. The
    answer is a uniform letter whatever the prompt's length, so chance (the best constant answer)
    is ``1 / num_letters``. The alphabet is fixed by the settings: leave ``task.num_symbols``
    out.
    """

    length_axis = "letters in the source string"
    default_train_lengths = (20, 40)
    default_eval_lengths = (30, 40, 46, 52)
    min_length = 2
    min_length_why = "the answer is a letter other than the source letter"
    variants = ({"shift_format": "token"},)
    digit_tokens = ()  # the shift's digits with ``shift_format="digits"`` (``__init__``)

    def __init__(
        self,
        num_letters: int = 52,
        max_shift: int = 15,
        shift_format: ShiftFormat = "digits",
        **common: Any,
    ) -> None:
        if num_letters < 2:
            raise ConfigError(
                f"indirect_indexing: task.num_letters must be >= 2 (a source letter and another "
                f"one), got {num_letters}"
            )
        if max_shift < 1:
            raise ConfigError(f"indirect_indexing: task.max_shift must be >= 1, got {max_shift}")
        self.num_letters, self.max_shift = int(num_letters), int(max_shift)
        self.shift_format = shift_format
        self.delimiter = N_SPECIAL + self.num_letters
        after = self.delimiter + 1  # the first token of the shift's own alphabet
        if shift_format == "digits":
            self.digits = len(str(self.max_shift))  # the magnitude's width, zero-padded
            self.plus, self.minus, self.digit_0 = after, after + 1, after + 2
            self.digit_tokens = tuple(range(self.digit_0, self.digit_0 + 10))
            extra = 2 + 10
        else:
            self.digits = 0
            self.shift_0 = after  # the token of -max_shift; the shifts 1.. follow -1
            extra = 2 * self.max_shift
        self.fixed_num_symbols = self.num_letters + 1 + extra
        super().__init__(**common)

    @classmethod
    def settings_at(cls, length: int, directory: Path) -> dict[str, Any]:
        return {"num_letters": max(52, length)}  # a distinct letter per position

    def check_length(self, length: int) -> None:
        super().check_length(length)
        if length > self.num_letters:
            raise ConfigError(
                f"indirect_indexing: a string of {length} distinct letters needs task.num_letters"
                f" >= {length}, but it is {self.num_letters}; use lengths in "
                f"[{self.min_length}, {self.num_letters}] or raise task.num_letters"
            )

    def tail_length(self) -> int:
        """Prompt tokens after the string: ``, source ,`` and the shift."""
        return 3 + (1 + self.digits if self.shift_format == "digits" else 1)

    def prompt_length(self, length: int) -> int:
        return length + self.tail_length()

    def answer_length(self, length: int) -> int:
        return 1

    def encode_shift(self, shift: Tensor) -> Tensor:
        """The tokens of ``shift: [b]`` (nonzero), ``[b, tail_length() - 3]``."""
        if self.shift_format == "token":
            index = torch.where(shift < 0, shift + self.max_shift, shift + self.max_shift - 1)
            return (self.shift_0 + index)[:, None]
        sign = torch.where(shift < 0, self.minus, self.plus)
        powers = 10 ** torch.arange(self.digits - 1, -1, -1)  # most significant first
        magnitude = (shift.abs()[:, None] // powers) % 10
        return torch.cat((sign[:, None], self.digit_0 + magnitude), dim=1)

    def decode_shift(self, tokens: Tensor) -> Tensor:
        """The shifts ``[b]`` written by ``tokens: [b, tail_length() - 3]``."""
        if self.shift_format == "token":
            index = tokens[:, 0] - self.shift_0
            return torch.where(
                index < self.max_shift, index - self.max_shift, index - self.max_shift + 1
            )
        powers = 10 ** torch.arange(self.digits - 1, -1, -1)
        magnitude = ((tokens[:, 1:] - self.digit_0) * powers).sum(dim=1)
        return torch.where(tokens[:, 0] == self.minus, -magnitude, magnitude)

    def sample(self, batch: int, length: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        # the n largest of num_letters uniform draws: a uniform random subset in random order
        scores = torch.rand(batch, self.num_letters, generator=generator)
        string = N_SPECIAL + scores.topk(length, dim=1).indices  # [b, n], distinct per row
        source = torch.randint(0, length, (batch,), generator=generator)
        # nonzero shifts that stay inside: `left` of them to the left, `right` to the right
        left = source.clamp(max=self.max_shift)
        right = (length - 1 - source).clamp(max=self.max_shift)
        draw = (torch.rand(batch, generator=generator) * (left + right)).long()
        draw = torch.minimum(draw, left + right - 1)  # guards the float rounding at 1.0
        shift = torch.where(draw < left, draw - left, draw - left + 1)
        rows = torch.arange(batch)
        delimiter = torch.full((batch, 1), self.delimiter)
        prompt = torch.cat(
            (
                string,
                delimiter,
                string[rows, source][:, None],
                delimiter,
                self.encode_shift(shift),
            ),
            dim=1,
        )
        return prompt, string[rows, source + shift][:, None]

    def solve(self, prompt: Tensor) -> Tensor:
        length = prompt.shape[1] - self.tail_length()
        string, source = prompt[:, :length], prompt[:, length + 1 : length + 2]
        where = (string == source).long().argmax(dim=1)  # the source letter's position
        target = where + self.decode_shift(prompt[:, length + 3 :])
        return string.gather(1, target[:, None])

    def reference(self, prompt: list[int]) -> list[int]:
        length = len(prompt) - self.tail_length()
        string, source, shift_tokens = prompt[:length], prompt[length + 1], prompt[length + 3 :]
        if self.shift_format == "token":
            (token,) = shift_tokens
            shift = [*range(-self.max_shift, 0), *range(1, self.max_shift + 1)][
                token - self.shift_0
            ]
        else:
            sign, *digits = shift_tokens
            magnitude = int("".join(str(d - self.digit_0) for d in digits))
            shift = -magnitude if sign == self.minus else magnitude
        target = string.index(source) + shift
        if not 0 <= target < length:
            raise ValueError(f"shift {shift} from position {target - shift} leaves the string")
        return [string[target]]
