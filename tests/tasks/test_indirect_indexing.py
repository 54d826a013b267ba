"""Indirect indexing (Gopalakrishnan et al. 2025, PoPE): the paper's own examples, the generator
against the reference solver, the distribution of strings, sources and shifts, the chance level,
lengths and settings."""

import string as letters

import pytest
import torch

from pelab.chance import chance_levels
from pelab.data.datamodule import TrainBatches
from pelab.data.eval_sets import build_eval_set
from pelab.errors import ConfigError
from pelab.tasks.indirect_indexing import IndirectIndexingTask
from pelab.tokens import N_SPECIAL

ALPHABET = letters.ascii_uppercase + letters.ascii_lowercase  # the paper's 52 letters
FORMATS = ["digits", "token"]


def written(task: IndirectIndexingTask, text: str, source: str, shift: int) -> list[int]:
    """The prompt of the paper's ``<string>, <source>, <shift>`` in ``task``'s tokens."""
    d, tokens = task.delimiter, [N_SPECIAL + ALPHABET.index(c) for c in text]
    return [*tokens, d, N_SPECIAL + ALPHABET.index(source), d, *shift_tokens(task, shift)]


def shift_tokens(task: IndirectIndexingTask, shift: int) -> list[int]:
    if task.shift_format == "token":
        offsets = [*range(-task.max_shift, 0), *range(1, task.max_shift + 1)]
        return [task.shift_0 + offsets.index(shift)]
    sign = task.minus if shift < 0 else task.plus
    return [sign, *(task.digit_0 + int(c) for c in f"{abs(shift):0{task.digits}d}")]


def letter(token: int) -> str:
    return ALPHABET[token - N_SPECIAL]


# the paper's examples: section 4's and the three of appendix A.1 (string, source, shift, target)
PAPER_EXAMPLES = [
    ("QEOHOUDKfeSrMVNlCzXu", "z", -3, "N"),
    ("TzbkWoKDyscBepYvfwxEVQtgPa", "c", -8, "b"),
    ("NZTUIGWkXFrhCJDzscat", "N", 4, "I"),
    ("RBEvOPgtaGDnjhbJCLScruZpMNsyWfQxXFAzUT", "x", 2, "F"),
]


@pytest.mark.parametrize("shift_format", FORMATS)
def test_the_papers_examples(shift_format):
    task = IndirectIndexingTask(shift_format=shift_format)
    for text, source, shift, target in PAPER_EXAMPLES:
        prompt = written(task, text, source, shift)
        assert len(prompt) == task.prompt_length(len(text))
        assert [letter(t) for t in task.reference(prompt)] == [target]
        assert [letter(t) for t in task.solve(torch.tensor([prompt]))[0]] == [target]


def test_the_prompt_layout_of_each_format():
    digits = IndirectIndexingTask()  # letters 3..54, `,` 55, `+` 56, `-` 57, digits 58..67
    assert (digits.delimiter, digits.plus, digits.minus, digits.digit_0) == (55, 56, 57, 58)
    assert digits.vocab_size == 68 and digits.digit_tokens == tuple(range(58, 68))
    # A B C D E F G H , C , + 0 5 -> H (5 right of C)
    assert written(digits, "ABCDEFGH", "C", 5)[8:] == [55, 5, 55, 56, 58, 63]
    token = IndirectIndexingTask(shift_format="token", max_shift=3)  # shifts -3 -2 -1 1 2 3
    assert token.vocab_size == 3 + 52 + 1 + 6 and token.digit_tokens == ()
    assert written(token, "ABCD", "A", 3) == [3, 4, 5, 6, 55, 3, 55, 61]
    assert token.reference([3, 4, 5, 6, 55, 6, 55, 56]) == [3]  # 3 left of D: A
    assert token.prompt_length(10) == 14 and digits.prompt_length(10) == 16


@pytest.mark.parametrize("max_shift", [1, 9, 15, 120])
@pytest.mark.parametrize("shift_format", FORMATS)
def test_every_shift_is_written_and_read_back(shift_format, max_shift):
    task = IndirectIndexingTask(
        num_letters=300, max_shift=max_shift, shift_format=shift_format, eval_lengths=[40]
    )
    shifts = torch.tensor([*range(-max_shift, 0), *range(1, max_shift + 1)])
    tokens = task.encode_shift(shifts)
    assert tokens.shape == (len(shifts), task.tail_length() - 3)
    assert tokens.unique(dim=0).shape[0] == len(shifts)  # one writing per shift
    assert (tokens > task.delimiter).all() and (tokens < task.vocab_size).all()
    assert torch.equal(task.decode_shift(tokens), shifts)
    assert [shift_tokens(task, s) for s in shifts.tolist()] == tokens.tolist()


@pytest.mark.parametrize("shift_format", FORMATS)
def test_generated_answers_equal_the_reference_on_many_samples(shift_format):
    task = IndirectIndexingTask(shift_format=shift_format)
    generator = torch.Generator().manual_seed(0)
    for length in (2, 3, 16, 20, 31, 40, 52):
        prompt, answer = task.sample(500, length, generator)
        assert prompt.shape == (500, task.prompt_length(length)) and answer.shape == (500, 1)
        assert [task.reference(p) for p in prompt.tolist()] == answer.tolist()
        assert torch.equal(task.solve(prompt), answer)


def test_strings_sources_and_shifts_follow_the_papers_distribution():
    task = IndirectIndexingTask()
    n, length = 20000, 40
    prompt, answer = task.sample(n, length, torch.Generator().manual_seed(1))
    string, source = prompt[:, :length], prompt[:, length + 1]
    assert (prompt[:, length] == task.delimiter).all() and (prompt[:, length + 2] == 55).all()
    assert (string.sort(dim=1).values.diff(dim=1) > 0).all()  # distinct letters
    assert string.min() >= N_SPECIAL and string.max() < N_SPECIAL + 52
    hit = string == source[:, None]
    assert (hit.sum(dim=1) == 1).all()  # the source letter occurs once in the string
    where = hit.long().argmax(dim=1)
    shift = task.decode_shift(prompt[:, length + 3 :])
    assert (shift != 0).all() and (shift.abs() <= 15).all()
    target = where + shift
    assert ((target >= 0) & (target < length)).all()
    assert torch.equal(string.gather(1, target[:, None]), answer)
    share = torch.bincount(where, minlength=length) / n  # the source position is uniform
    assert (share - 1 / length).abs().max() < 0.01
    # given the source position, the shift is uniform over the nonzero shifts that stay inside
    middle = (where >= 15) & (where <= length - 16)  # all 30 shifts possible
    counts = torch.bincount(shift[middle] + 15, minlength=31)
    assert counts[15] == 0 and (counts[:15] > 0).all() and (counts[16:] > 0).all()
    expected = middle.sum() / 30
    assert (counts[counts > 0] - expected).abs().max() < 0.25 * expected
    first = where == 0  # from the first letter every shift is to the right
    assert shift[first].min() >= 1 and set(shift[first].tolist()) == set(range(1, 16))


def test_the_edges_of_the_length_axis():
    task = IndirectIndexingTask(num_letters=6, train_lengths=[2, 6], eval_lengths=[6])
    prompt, answer = task.sample(200, 2, torch.Generator().manual_seed(2))
    shift = task.decode_shift(prompt[:, 5:])
    assert set(shift.tolist()) == {-1, 1}  # two letters: the answer is the other one
    assert (answer[:, 0] != prompt[:, 3]).all()
    assert ((answer[:, 0] == prompt[:, 0]) | (answer[:, 0] == prompt[:, 1])).all()
    prompt, _ = task.sample(50, 6, torch.Generator().manual_seed(3))
    assert (prompt[:, :6].sort(dim=1).values == torch.arange(3, 9)).all()  # all 6 letters
    assert set(task.decode_shift(prompt[:, 9:]).tolist()) <= set(range(-5, 6)) - {0}


def test_the_chance_level_is_one_over_the_letters():
    """The answer is a uniform letter, so the best constant answer is right ``1/num_letters`` of
    the time, at every length."""
    task = IndirectIndexingTask(num_letters=8, train_lengths=[2, 8], eval_lengths=[8])
    for length in (3, 8):
        _, answer = task.sample(8000, length, torch.Generator().manual_seed(length))
        counts = torch.bincount(answer[:, 0] - N_SPECIAL, minlength=8) / 8000
        assert (counts - 1 / 8).abs().max() < 0.02
        chance = chance_levels(answer)
        assert abs(chance["exact_match"] - 1 / 8) < 0.02
        assert chance["exact_match"] == chance["token_acc"]  # one answer token
    _, answer = IndirectIndexingTask().sample(8000, 40, torch.Generator().manual_seed(4))
    assert abs(chance_levels(answer)["exact_match"] - 1 / 52) < 0.01


def test_lengths_are_honoured_and_bad_settings_refused():
    task = IndirectIndexingTask()
    assert task.train_lengths == (20, 40) and task.eval_lengths == [30, 40, 46, 52]
    assert [task.in_distribution(n) for n in task.eval_lengths] == [True, True, False, False]
    assert task.max_sequence_length() == 52 + 6 + 1 + 2
    assert task.max_train_sequence_length() == 40 + 6 + 1 + 2
    with pytest.raises(ConfigError, match=r"60 distinct letters needs task.num_letters >= 60.*52"):
        IndirectIndexingTask(eval_lengths=[40, 60])
    with pytest.raises(ConfigError, match=r"lengths must be >= 2.*got 1"):
        IndirectIndexingTask(train_lengths=[1, 40])
    with pytest.raises(ConfigError, match="task.shift_format='words' is not a choice; .*digits"):
        IndirectIndexingTask(shift_format="words")
    with pytest.raises(ConfigError, match="max_shift must be >= 1, got 0"):
        IndirectIndexingTask(max_shift=0)
    with pytest.raises(ConfigError, match="num_letters must be >= 2"):
        IndirectIndexingTask(num_letters=1)
    with pytest.raises(ConfigError, match="fixed alphabet of 65 symbols"):
        IndirectIndexingTask(num_symbols=52)
    longer = IndirectIndexingTask(num_letters=100, eval_lengths=[40, 100])
    assert longer.sample(2, 100, torch.Generator().manual_seed(0))[0].shape == (2, 106)


def test_the_spec_names_every_setting_of_the_data():
    spec = IndirectIndexingTask(shift_format="token", max_shift=7).spec()
    assert {"num_letters": 52, "max_shift": 7, "shift_format": "token"}.items() <= spec.items()
    assert spec != IndirectIndexingTask(max_shift=7).spec()


def test_training_and_test_prompts_do_not_overlap():
    task = IndirectIndexingTask(train_lengths=[20, 20], eval_lengths=[20])
    test = {tuple(p) for p in build_eval_set(task, "test", 20, 512)["prompt"]}
    stream = TrainBatches(task, batch_size=256, num_batches=40, seed=0)
    seen = {tuple(p) for i in range(len(stream)) for p in stream[i][0].tolist()}
    assert len(test) == 512 and not test & seen
