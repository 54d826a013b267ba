"""PCFG SET: nested string-editing functions applied to strings (Hupkes et al. 2020)."""

from __future__ import annotations

import string
from typing import Any

import torch
from torch import Tensor

from pelab.errors import ConfigError
from pelab.tasks.base import Task, register_task
from pelab.tokens import N_SPECIAL

UNARY = ("copy", "reverse", "shift", "echo", "swap_first_last", "repeat")
BINARY = ("append", "prepend", "remove_first", "remove_second")
FUNCTIONS = UNARY + BINARY
# the paper's 520 letters A1 .. Z20, ordered A1 .. Z1, A2 .. Z2, ... (26 letters: A1 .. Z1)
LETTERS = tuple(f"{c}{k}" for k in range(1, 21) for c in string.ascii_uppercase)
LEAF_LENGTHS = (2, 5)  # a string argument has 2 to 5 letters, uniformly


@register_task("pcfg")
class PcfgTask(Task):
    """PCFG SET (Hupkes et al. 2020, "Compositionality decomposed"): an expression of
    string-editing functions in prefix notation, applied to strings of letters -> the string it
    evaluates to. The functions (x, y strings; ``tasks/default.py`` of MathijsMul/pcfg-set)::

        copy A B C D = A B C D              append x , y = x y
        reverse A B C D = D C B A           prepend x , y = y x
        shift A B C D = B C D A             remove_first x , y = y
        echo A B C D = A B C D D            remove_second x , y = x
        swap_first_last A B C D = D B C A   repeat A B C D = A B C D A B C D

    A binary function's arguments are separated by ``,`` (it ends the first argument's last
    string). ``BOS echo append copy Q10 E4 , shift remove_second K15 D8 , H12 Q5 END ... SEP``
    -> ``Q10 E4 D8 K15 K15 END ...`` (the NoPE study's ``pcfg_instance_processor.py`` example,
    with shorter strings). Length axis: the number of functions, as the productivity split
    cuts it (train on at most 8 functions, test on 9 or more: Hupkes et al., and the NoPE
    study's ``pcfg`` ``productivity`` split).

    A sample at ``length`` functions: each function drawn uniformly from the ten (2 in 5
    binary; ``B`` binary functions take ``B + 1`` strings), arranged in a uniformly random
    tree of those nodes (a random order of the functions and strings, rotated into the one
    valid prefix expression by Raney's cycle lemma); each string has 2-5 letters (pcfg-set's
    ``--lengths``), each letter uniform over ``letters`` (the paper's 520, ``A1`` .. ``Z20``).
    The prompt is padded with ``END`` to ``7 * length + 5`` tokens (the longest expression:
    every function binary, every string 5 letters); the answer is the string padded with
    ``END`` to ``4 * length + 8`` tokens, and an expression whose string is longer is drawn
    again (none at 1 function, 1-2% at 4 to 16: ``repeat`` doubles strings). Symbols: the
    letters, the ten functions, ``,`` and ``END``.

    Differences from the study, which downloads PCFG SET's productivity files: pelab generates
    the expressions. The released data was generated with random probabilities per expression,
    resampled to match the lengths and depths of English sentences, kept below 300 characters
    (71 tokens) and with no string used twice; there, binary functions are 34% of functions
    and strings of 2 letters 17% of strings, and outputs average 12.8 tokens at 9 functions
    (here 12.5). Here each function count is drawn equally often (in the released data, 2% of
    the expressions of 1-8 functions have 1 function, 22% have 4: its dev set), and outputs
    are capped as above.

    ``solve`` evaluates a batch at once: each node's parent from the open argument slots of the
    prefix order, each node's string length bottom-up, then every answer position traced down
    the tree to the letter it copies. ``reference`` evaluates the tokens right to left on a
    stack of strings.
    """

    length_axis = "functions"
    default_train_lengths = (1, 8)
    default_eval_lengths = (4, 8, 12, 16)

    def __init__(self, letters: int = len(LETTERS), **common: Any) -> None:
        if not 2 <= letters <= len(LETTERS):
            raise ConfigError(
                f"PcfgTask: task.letters must be 2 to {len(LETTERS)} (the paper: 520), got "
                f"{letters}"
            )
        self.letters = int(letters)
        self.fixed_num_symbols = self.letters + len(FUNCTIONS) + 2
        super().__init__(**common)

    @property
    def function0(self) -> int:
        """The token of ``copy``; the functions follow in ``FUNCTIONS``' order, then ``,``
        and ``END``."""
        return N_SPECIAL + self.letters

    @property
    def comma(self) -> int:
        return self.function0 + len(FUNCTIONS)

    @property
    def end(self) -> int:
        return self.comma + 1

    def prompt_length(self, length: int) -> int:
        return 7 * length + 5

    def answer_length(self, length: int) -> int:
        return 4 * length + 8

    def sample(self, batch: int, length: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        width = self.answer_length(length)
        prompts, answers, kept = [], [], 0
        while kept < batch:  # draw again the expressions whose string is longer than the answer
            prompt = self._draw(batch - kept + 8, length, generator)  # a margin: 1-2% fail
            answer, size = self._evaluate(prompt, width)
            fits = size <= width
            prompts.append(prompt[fits])
            answers.append(answer[fits])
            kept += int(fits.sum())
        return torch.cat(prompts)[:batch], torch.cat(answers)[:batch]

    def _draw(self, batch: int, length: int, generator: torch.Generator) -> Tensor:
        """``batch`` expressions of ``length`` functions, ``[b, 7 * length + 5]``."""
        n_items = 2 * length + 1  # at most: every function binary
        kind = torch.randint(len(FUNCTIONS), (batch, length), generator=generator)
        n_strings = (kind >= len(UNARY)).sum(dim=1, keepdim=True) + 1  # [b, 1]: B + 1
        size = length + n_strings  # [b, 1]: items of each expression
        slot = torch.arange(n_items)
        # items 0 .. length - 1 are the functions, length .. length + n_strings - 1 the strings
        exists = (slot < length) | (slot - length < n_strings)  # [b, N]
        order = torch.rand(batch, n_items, generator=generator).masked_fill(~exists, 2).argsort(1)
        binary = (kind >= len(UNARY)).long()
        arity = torch.cat((1 + binary, torch.zeros(batch, length + 1, dtype=torch.long)), dim=1)
        step = (arity.gather(1, order) - 1).masked_fill(slot >= size, 0)  # [b, N]
        # Raney: the one valid rotation starts after the first minimum of the running sum
        running = step.cumsum(dim=1).masked_fill(slot >= size, n_items)
        start = running.argmin(dim=1, keepdim=True) + 1
        item = order.gather(1, (start + slot) % size)  # [b, N], prefix order; past size: junk
        inside = slot < size
        is_string = inside & (item >= length)
        is_function = inside & (item < length)
        string_index = (item - length).clamp(0, length)
        low, high = LEAF_LENGTHS
        string_length = torch.randint(low, high + 1, (batch, length + 1), generator=generator)
        letters = torch.randint(self.letters, (batch, length + 1, high), generator=generator)
        own = string_length.gather(1, string_index)  # [b, N]
        comma = is_string & (slot < size - 1)  # every string but the last ends an argument
        tokens = torch.where(is_string, own + comma.long(), is_function.long())  # [b, N]
        offset = tokens.cumsum(dim=1) - tokens
        width = self.prompt_length(length)
        prompt = torch.full((batch, width + 1), self.end)  # column ``width``: discarded writes
        function = self.function0 + kind.gather(1, item.clamp(max=length - 1))
        prompt.scatter_(1, torch.where(is_function, offset, width), function)
        prompt.scatter_(1, torch.where(comma, offset + own, width), self.comma)
        for t in range(high):
            letter = N_SPECIAL + letters[:, :, t].gather(1, string_index)
            prompt.scatter_(1, torch.where(is_string & (t < own), offset + t, width), letter)
        return prompt[:, :width]

    def solve(self, prompt: Tensor) -> Tensor:
        """The evaluated strings ``[b, answer_length(f)]``, ``f`` the most functions in the
        batch, padded with ``END``."""
        functions = ((prompt >= self.function0) & (prompt < self.comma)).sum(dim=1)
        width = self.answer_length(int(functions.max()))
        answer, size = self._evaluate(prompt, width)
        if (size > width).any():
            raise ValueError(
                f"PcfgTask: an expression evaluates to {int(size.max())} letters, more than "
                f"the {width} answer tokens"
            )
        return answer

    def _evaluate(self, prompt: Tensor, width: int) -> tuple[Tensor, Tensor]:
        """The first ``width`` tokens of each expression's string ``[b, width]`` (``END`` past
        its end) and its length ``[b]``.

        Items are the functions and the strings (runs of letters), in prefix order. Before item
        ``i`` there are ``open_i = 1 + sum_{j<i} (arity_j - 1)`` open argument slots; item ``i``
        fills the top one, so its parent is the last ``j < i`` with ``open_j <= open_i``, and it
        is that parent's argument ``open_j + arity_j - 1 - open_i`` (0: the first).
        """
        b, w = prompt.shape
        is_letter = prompt < self.function0
        after_letter = torch.cat((torch.zeros(b, 1, dtype=torch.bool), is_letter[:, :-1]), 1)
        is_function = (prompt >= self.function0) & (prompt < self.comma)
        starts = is_function | (is_letter & ~after_letter)  # [b, w]: an item's first token
        item_of = starts.long().cumsum(dim=1) - 1  # [b, w]
        n_items = starts.sum(dim=1, keepdim=True)  # [b, 1]
        n = int(n_items.max())
        where = torch.zeros(b, n + 1, dtype=torch.long)  # column n takes discarded writes
        where.scatter_(1, torch.where(starts, item_of, n), torch.arange(w).expand(b, w))
        where = where[:, :n]  # [b, n]: the first token of each item
        item = torch.arange(n)
        first = prompt.gather(1, where)
        function = (item < n_items) & (first >= self.function0) & (first < self.comma)
        kind = (first - self.function0).clamp(0, len(FUNCTIONS) - 1)  # [b, n]
        arity = torch.where(function, 1 + (kind >= len(UNARY)).long(), 0)
        letters = torch.zeros(b, n + 1, dtype=torch.long)
        letters.scatter_add_(1, torch.where(is_letter, item_of, n), is_letter.long())
        letters = letters[:, :n]  # [b, n]: a string's length, 0 for a function
        if not ((arity - 1).masked_fill(item >= n_items, 0).sum(dim=1) == -1).all():
            raise ValueError("PcfgTask: a prompt is not a complete prefix expression")
        step = arity - 1
        open_slots = 1 + step.cumsum(dim=1) - step  # [b, n]
        earlier = (item[None, None, :] < item[None, :, None]) & (
            open_slots[:, None, :] <= open_slots[:, :, None]
        )  # [b, i, j]
        parent = torch.where(earlier, item, -1).amax(dim=2)  # [b, n]; -1: the root
        up = parent.clamp(min=0)
        argument = open_slots.gather(1, up) + arity.gather(1, up) - 1 - open_slots
        has_parent = (parent >= 0) & (item < n_items)
        children = torch.zeros(b, 2 * n + 1, dtype=torch.long)  # [b, 2n]: (node, argument)
        children.scatter_(1, torch.where(has_parent, 2 * up + argument, 2 * n), item.expand(b, n))
        first_arg, second_arg = children[:, : 2 * n].view(b, n, 2).unbind(dim=2)  # [b, n] each
        depth = int(function.sum(dim=1).max())  # no path holds more functions
        size = letters
        for _ in range(depth):  # bottom-up: each pass settles one more level
            x, y = size.gather(1, first_arg), size.gather(1, second_arg)
            by_kind = torch.stack((x, x, x, x + 1, x.clamp(min=2), 2 * x, x + y, x + y, y, x), -1)
            size = torch.where(function, by_kind.gather(2, kind[..., None])[..., 0], letters)
        node = torch.zeros(b, width, dtype=torch.long)  # the root, item 0
        at = torch.arange(width).expand(b, width)  # the position in the node's string
        for _ in range(depth):  # top-down: each answer position to the letter it copies
            k = kind.gather(1, node)
            x, y = first_arg.gather(1, node), second_arg.gather(1, node)
            nx, ny = size.gather(1, x).clamp(min=1), size.gather(1, y).clamp(min=1)
            swapped = torch.where(at == 0, nx - 1, torch.where(at == nx.clamp(min=2) - 1, 0, at))
            new_at = torch.stack(
                (
                    at,  # copy
                    nx - 1 - at,  # reverse
                    (at + 1) % nx,  # shift
                    at.clamp(max=nx - 1),  # echo
                    swapped,  # swap_first_last
                    at % nx,  # repeat
                    torch.where(at < nx, at, at - nx),  # append: x then y
                    torch.where(at < ny, at, at - ny),  # prepend: y then x
                    at,  # remove_first: y
                    at,  # remove_second: x
                ),
                -1,
            )
            new_node = torch.stack(
                (x, x, x, x, x, x, torch.where(at < nx, x, y), torch.where(at < ny, y, x), y, x),
                -1,
            )
            move = function.gather(1, node)
            at = torch.where(move, new_at.gather(2, k[..., None])[..., 0], at)
            node = torch.where(move, new_node.gather(2, k[..., None])[..., 0], node)
        total = size[:, :1]  # [b, 1]
        letter = prompt.gather(1, (where.gather(1, node) + at).clamp(0, w - 1))
        return torch.where(torch.arange(width) < total, letter, self.end), total[:, 0]

    def reference(self, prompt: list[int]) -> list[int]:
        """Right to left: letters gather into a string, a ``,`` or a function ends it; a
        function pops its arguments (the first on top) and pushes its value."""
        stack: list[list[int]] = []
        run: list[int] = []
        functions = 0
        for token in reversed(prompt):
            if token < self.function0:
                run.insert(0, token)
                continue
            if token == self.end:
                continue
            if run:
                stack.append(run)
                run = []
            if token == self.comma:
                continue
            functions += 1
            name = FUNCTIONS[token - self.function0]
            x = stack.pop()
            if name in UNARY:
                stack.append(_unary(name, x))
            else:
                stack.append(_binary(name, x, stack.pop()))
        if run:
            stack.append(run)
        (value,) = stack
        return value + [self.end] * (self.answer_length(functions) - len(value))


def _unary(name: str, x: list[int]) -> list[int]:
    return {
        "copy": x,
        "reverse": x[::-1],
        "shift": x[1:] + x[:1],
        "echo": x + x[-1:],
        "swap_first_last": x[-1:] + x[1:-1] + x[:1],
        "repeat": x + x,
    }[name]


def _binary(name: str, x: list[int], y: list[int]) -> list[int]:
    return {"append": x + y, "prepend": y + x, "remove_first": y, "remove_second": x}[name]
