"""SCAN: navigation commands -> action sequences (Lake & Baroni 2018), with its length split."""

from __future__ import annotations

from functools import cache

import torch
from torch import Tensor

from pelab.errors import ConfigError
from pelab.tasks.base import Task, register_task
from pelab.tokens import N_SPECIAL

PRIMITIVES = ("walk", "look", "run", "jump")
DIRECTIONS = {"left": "LTURN", "right": "RTURN"}
WORDS = (*PRIMITIVES, "turn", *DIRECTIONS, "opposite", "around", "twice", "thrice", "and", "after")
ACTIONS = ("WALK", "LOOK", "RUN", "JUMP", "LTURN", "RTURN")
SYMBOLS = (*WORDS, *ACTIONS, "END")
TOKEN = {symbol: N_SPECIAL + i for i, symbol in enumerate(SYMBOLS)}
END = TOKEN["END"]
MAX_WORDS = 9  # "jump around left thrice and walk opposite right thrice"
MAX_ACTIONS = 48  # "x around d thrice" twice over: 24 + 24


def _phrases() -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The 102 phrases S as tokens: words ``[102, 4]`` and actions ``[102, 24]``, padded with
    ``END``, and their numbers of words and of actions ``[102]``."""
    verbs = [([u], [u.upper()]) for u in PRIMITIVES]  # V -> U
    for u in (*PRIMITIVES, "turn"):
        act = [] if u == "turn" else [u.upper()]
        for d, turn in DIRECTIONS.items():
            verbs.append(([u, d], [turn, *act]))  # V -> D, D -> U d | turn d
            verbs.append(([u, "opposite", d], [turn, turn, *act]))
            verbs.append(([u, "around", d], [turn, *act] * 4))
    phrases = [
        (v + word, a * times)
        for v, a in verbs
        for word, times in (([], 1), (["twice"], 2), (["thrice"], 3))
    ]
    words = torch.full((len(phrases), 4), END)
    actions = torch.full((len(phrases), 24), END)
    for i, (w, a) in enumerate(phrases):
        words[i, : len(w)] = torch.tensor([TOKEN[x] for x in w])
        actions[i, : len(a)] = torch.tensor([TOKEN[x] for x in a])
    n_words = torch.tensor([len(w) for w, _ in phrases])
    return words, actions, n_words, torch.tensor([len(a) for _, a in phrases])


def _join(
    left: Tensor, n_left: Tensor, middle: Tensor | None, right: Tensor, width: int
) -> Tensor:
    """Rows ``left[:n_left] middle right`` (``middle`` one token per row, or none), padded with
    ``END`` to ``width``: ``left [m, a]``, ``n_left [m]``, ``middle [m]``, ``right [m, c]``."""
    m = left.shape[0]
    column = torch.arange(width).expand(m, width)
    at_right = column - n_left[:, None] - int(middle is not None)  # [m, width]
    from_right = right.gather(1, at_right.clamp(0, right.shape[1] - 1))
    joined = torch.where((at_right >= 0) & (at_right < right.shape[1]), from_right, END)
    if middle is not None:
        joined = torch.where(column == n_left[:, None], middle[:, None], joined)
    from_left = left.gather(1, column.clamp(max=left.shape[1] - 1))
    return torch.where(column < n_left[:, None], from_left, joined)


@cache
def _commands() -> tuple[Tensor, Tensor, Tensor]:
    """Every SCAN command, built up the grammar once per process: the 102 phrases S, each alone
    and each pair joined by ``and`` / ``after`` (20,910 commands). Words ``[20910, 9]`` and
    actions ``[20910, 48]``, padded with ``END``, and the number of actions ``[20910]``."""
    words, actions, n_words, n_actions = _phrases()
    grid = torch.meshgrid(torch.arange(102), torch.arange(102), indexing="ij")
    first, second = (i.flatten().repeat(2) for i in grid)
    conjunction = torch.tensor([TOKEN["and"], TOKEN["after"]]).repeat_interleave(102 * 102)
    after = conjunction == TOKEN["after"]  # [[x after y]] = [[y]] [[x]]
    head, tail = torch.where(after, second, first), torch.where(after, first, second)
    prompts = torch.cat(
        (
            torch.cat((words, torch.full((102, MAX_WORDS - 4), END)), dim=1),
            _join(words[first], n_words[first], conjunction, words[second], MAX_WORDS),
        )
    )
    answers = torch.cat(
        (
            torch.cat((actions, torch.full((102, MAX_ACTIONS - 24), END)), dim=1),
            _join(actions[head], n_actions[head], None, actions[tail], MAX_ACTIONS),
        )
    )
    return prompts, answers, torch.cat((n_actions, n_actions[first] + n_actions[second]))


@cache
def scan_table() -> dict[int, tuple[Tensor, Tensor]]:
    """The commands by their number of actions ``n``: ``{n: (prompts [k, w_n], answers [k,
    n])}``, each prompt padded with ``END`` to ``w_n``, the most words at ``n`` actions."""
    prompts, answers, counts = _commands()
    table = {}
    for n in counts.unique().tolist():
        rows = counts == n
        width = int((prompts[rows] != END).sum(dim=1).max())
        table[n] = (prompts[rows, :width], answers[rows, :n])
    return table


def spans(lengths: list[int]) -> str:
    """Sorted lengths as runs, e.g. ``[1, 2, 3, 5]`` -> ``"1-3, 5"``."""
    runs: list[list[int]] = []
    for n in lengths:
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else f"{r[0]}" for r in runs)


def _key(prompt: Tensor) -> Tensor:
    """One integer per command ``[b]``: its words as base-``len(SYMBOLS)`` digits, padded with
    ``END`` to ``MAX_WORDS``."""
    padded = torch.full((prompt.shape[0], MAX_WORDS), END)
    padded[:, : prompt.shape[1]] = prompt
    digits = len(SYMBOLS) ** torch.arange(MAX_WORDS)
    return ((padded - N_SPECIAL) * digits).sum(dim=1)


@cache
def _lookup() -> tuple[Tensor, Tensor, Tensor]:
    """The commands' keys sorted ``[20910]``, with their actions ``[20910, 48]`` and numbers
    of actions ``[20910]`` in the keys' order."""
    prompts, answers, counts = _commands()
    keys, order = _key(prompts).sort()
    return keys, answers[order], counts[order]


@register_task("scan")
class ScanTask(Task):
    """SCAN (Lake & Baroni 2018): a command in a small navigation language -> its actions.

    ``BOS jump opposite left and walk thrice SEP`` -> ``LTURN LTURN JUMP WALK WALK WALK``;
    ``BOS walk around right after jump twice SEP`` -> ``JUMP JUMP RTURN WALK RTURN WALK RTURN
    WALK RTURN WALK``. The paper's phrase-structure grammar and interpretation rules::

        C -> S and S | S after S | S      [[x and y]] = [[x]] [[y]]   [[x after y]] = [[y]] [[x]]
        S -> V twice | V thrice | V        [[x twice]] = [[x]] [[x]]  (thrice: three times)
        V -> D opposite d | D around d | D | U
        D -> U d | turn d                  d in {left, right},  U in {walk, look, run, jump}
        [[walk]] = WALK (LOOK, RUN, JUMP);  [[turn left]] = LTURN;  [[u left]] = LTURN [[u]]
        [[turn opposite left]] = LTURN LTURN;  [[u opposite left]] = LTURN LTURN [[u]]
        [[turn around left]] = LTURN x4;  [[u around left]] = (LTURN [[u]]) x4   (right: RTURN)

    34 verb phrases V, 102 phrases S, 102 + 2 * 102^2 = 20,910 commands, 1 to 48 actions.

    Length axis: the number of actions (the answer has exactly ``length`` tokens), as SCAN's
    length split (train on at most 22 actions, test on 24-48) and the NoPE study's
    (``len_tr25_ts48``: train on at most 25, test on 26-48) cut it. Only some counts have
    commands: 1-22, 24-28, 30, 32, 33, 36, 40 and 48 (S has 1, 2, 3, 4, 6, 8, 9, 12, 16 or 24
    actions); training draws among those in ``train_lengths``, other lengths are refused. The
    prompt has ``w_n`` tokens, the most words of a command of ``n`` actions (1 to 9), shorter
    commands padded at the end with ``END``. A sample at ``length`` is a command drawn
    uniformly from those with ``length`` actions; an evaluation set holds distinct commands
    (all of them where a length has fewer than asked, e.g. the 6 of one action). 20 symbols:
    13 words, 6 actions, ``END``.

    Differences from the study (which downloads SCAN's files): pelab builds the same 20,910
    commands from the grammar; training lengths are drawn uniformly (the study's data has as
    many examples per length as commands); in-distribution evaluation commands are training
    commands too (the study holds out 10% of its training commands for validation). ``solve``
    looks the command up in the precomputed table; ``reference`` parses and interprets it.
    """

    fixed_num_symbols = len(SYMBOLS)
    length_axis = "actions"
    default_train_lengths = (1, 22)
    default_eval_lengths = (11, 22, 24, 25, 26, 27, 28, 30, 32, 33, 36, 40, 48)
    max_length = MAX_ACTIONS

    def check_length(self, length: int) -> None:
        if length not in scan_table():
            raise ConfigError(
                f"ScanTask: no SCAN command has {length} actions; lengths with commands: "
                f"{spans(sorted(scan_table()))}"
            )

    def lengths_between(self, low: int, high: int) -> list[int]:
        return [n for n in scan_table() if low <= n <= high]

    def prompt_length(self, length: int) -> int:
        return scan_table()[length][0].shape[1]

    def sample(self, batch: int, length: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        prompts, answers = scan_table()[length]
        pick = torch.randint(0, prompts.shape[0], (batch,), generator=generator)
        return prompts[pick], answers[pick]

    def sample_eval(
        self, split: str, batch: int, length: int, generator: torch.Generator
    ) -> tuple[Tensor, Tensor]:
        """Up to ``batch`` distinct commands with ``length`` actions."""
        prompts, answers = scan_table()[length]
        pick = torch.randperm(prompts.shape[0], generator=generator)[:batch]
        return prompts[pick], answers[pick]

    def solve(self, prompt: Tensor) -> Tensor:
        """The actions of each command ``[b, m]`` (``m`` the most actions in the batch, shorter
        answers padded with ``END``), looked up in the table of every command."""
        keys, answers, counts = _lookup()
        key = _key(prompt)
        at = torch.searchsorted(keys, key).clamp(max=keys.shape[0] - 1)
        if not torch.equal(keys[at], key):
            bad = int((keys[at] != key).nonzero()[0, 0])
            raise ValueError(f"ScanTask: prompt {prompt[bad].tolist()} is not a SCAN command")
        return answers[at, : int(counts[at].max())]

    @staticmethod
    def reference(prompt: list[int]) -> list[int]:
        """Parse the command (``END`` dropped) and interpret it, rule by rule."""
        words = [SYMBOLS[t - N_SPECIAL] for t in prompt if t != END]
        for conjunction in ("and", "after"):
            if conjunction in words:
                at = words.index(conjunction)
                first, second = _phrase(words[:at]), _phrase(words[at + 1 :])
                actions = first + second if conjunction == "and" else second + first
                return [TOKEN[a] for a in actions]
        return [TOKEN[a] for a in _phrase(words)]


def _phrase(words: list[str]) -> list[str]:
    """``[[S]]``: a verb phrase ``U``, ``U d``, ``U opposite d``, ``U around d`` (or ``turn`` with
    a direction), repeated by a final ``twice``/``thrice``."""
    times = {"twice": 2, "thrice": 3}.get(words[-1], 1) if words else 1
    verb = words[:-1] if times > 1 else words
    if not verb or not (verb[0] in PRIMITIVES or (verb[0] == "turn" and len(verb) > 1)):
        raise ValueError(f"not a SCAN verb phrase: {' '.join(words)!r}")
    head, *modifiers = verb
    act = [] if head == "turn" else [head.upper()]
    if not modifiers:
        return act * times
    *how, direction = modifiers
    if direction not in DIRECTIONS or how not in ([], ["opposite"], ["around"]):
        raise ValueError(f"not a SCAN verb phrase: {' '.join(verb)!r}")
    turn = [DIRECTIONS[direction]]
    one = {(): turn + act, ("opposite",): turn + turn + act, ("around",): (turn + act) * 4}
    return one[tuple(how)] * times
