"""PCFG SET (Hupkes et al. 2020): each function on hand-worked strings, expressions of the released
data with their targets, the parallel evaluator against the stack evaluator, the generated
expressions' grammar and tree shapes, the answer's cap, the alphabet, runs."""

import pytest
import torch

from pelab.errors import ConfigError
from pelab.tasks.pcfg import FUNCTIONS, LETTERS, UNARY, PcfgTask
from tests.tasks.run_check import learn

TASK = PcfgTask()
NAMES = {name: TASK.function0 + i for i, name in enumerate(FUNCTIONS)}
NAMES |= {name: i + 3 for i, name in enumerate(LETTERS)} | {",": TASK.comma, "END": TASK.end}


def tokens(text: str) -> list[int]:
    return [NAMES[word] for word in text.split()]


def answer(text: str, functions: int) -> list[int]:
    """``text`` padded with ``END`` to the answer length of ``functions`` functions."""
    return tokens(text) + [TASK.end] * (TASK.answer_length(functions) - len(text.split()))


EXAMPLES = [
    # each function (Hupkes et al. 2020, section 3; pcfg-set's tasks/default.py)
    ("copy A1 B1 C1 D1", "A1 B1 C1 D1"),
    ("reverse A1 B1 C1 D1", "D1 C1 B1 A1"),
    ("shift A1 B1 C1 D1", "B1 C1 D1 A1"),
    ("echo A1 B1 C1 D1", "A1 B1 C1 D1 D1"),
    ("swap_first_last A1 B1 C1 D1", "D1 B1 C1 A1"),
    ("repeat A1 B1 C1", "A1 B1 C1 A1 B1 C1"),
    ("append A1 B1 , C1 D1", "A1 B1 C1 D1"),
    ("prepend A1 B1 , C1 D1", "C1 D1 A1 B1"),
    ("remove_first A1 B1 , C1 D1", "C1 D1"),
    ("remove_second A1 B1 , C1 D1", "A1 B1"),
    # the NoPE study's pcfg_instance_processor.py
    (
        "echo append copy Q10 E4 S15 P7 , shift remove_second K15 D8 M9 W5 , H12 Q5 G10 J6 J10",
        "Q10 E4 S15 P7 D8 M9 W5 K15 K15",
    ),
    # PCFG SET's released data (am-i-compositional, data/pcfgset/pcfgset/dev, productivity/test)
    ("shift copy echo E20 T7 R4", "T7 R4 R4 E20"),
    ("copy prepend echo F4 L17 O2 , G4 F6", "G4 F6 F4 L17 O2 O2"),
    ("repeat shift L3 U2", "U2 L3 U2 L3"),
    (
        "append X6 Z11 T16 H9 , reverse remove_second Q13 Y2 C11 , repeat repeat prepend append "
        "L8 P13 X1 , D8 U1 V18 , remove_second V10 J5 I8 , copy I10 K18 J18 C4",
        "X6 Z11 T16 H9 C11 Y2 Q13",
    ),
    (
        "swap_first_last repeat append repeat remove_first echo swap_first_last copy B10 V8 A7 "
        "W14 A14 , K16 H5 B8 , repeat Z12 F16 H19 S5",
        "S5 H5 B8 K16 H5 B8 Z12 F16 H19 S5 Z12 F16 H19 S5 K16 H5 B8 K16 H5 B8 Z12 F16 H19 S5 "
        "Z12 F16 H19 K16",
    ),
]


@pytest.mark.parametrize(("expression", "value"), EXAMPLES)
def test_the_functions_and_the_released_examples(expression, value):
    functions = sum(word in FUNCTIONS for word in expression.split())
    expected = answer(value, functions)
    assert TASK.reference(tokens(expression)) == expected
    assert TASK.solve(torch.tensor([tokens(expression)])).tolist() == [expected]


def test_a_batch_of_released_examples_with_padding_at_once():
    """Prompts of different sizes, padded with END, evaluated together as one batch."""
    expressions = [e for e, _ in EXAMPLES]
    width = max(len(e.split()) for e in expressions)
    prompt = torch.tensor([tokens(e + " END" * (width - len(e.split()))) for e in expressions])
    solved = TASK.solve(prompt)
    assert solved.shape == (len(EXAMPLES), TASK.answer_length(9))
    for row, (expression, value) in zip(solved.tolist(), EXAMPLES, strict=True):
        assert row == answer(value, 9)
        assert TASK.reference(tokens(expression))[: len(value.split())] == tokens(value)


@pytest.mark.parametrize("length", [1, 2, 3, 5, 8, 13, 24])
def test_the_parallel_evaluator_equals_the_stack_evaluator(length):
    prompt, answer_ = TASK.sample(64, length, torch.Generator().manual_seed(length))
    assert torch.equal(TASK.solve(prompt), answer_)
    for p, a in zip(prompt.tolist(), answer_.tolist(), strict=True):
        assert TASK.reference(p) == a


def test_expressions_follow_the_grammar():
    """Exactly ``length`` functions, one comma per binary function, strings of 2-5 letters,
    then only END; functions drawn uniformly."""
    prompt, answer_ = TASK.sample(2000, 6, torch.Generator().manual_seed(0))
    assert prompt.shape == (2000, TASK.prompt_length(6)) == (2000, 47)
    function = (prompt >= TASK.function0) & (prompt < TASK.comma)
    binary = function & (prompt >= TASK.function0 + len(UNARY))
    assert (function.sum(dim=1) == 6).all()
    assert torch.equal((prompt == TASK.comma).sum(dim=1), binary.sum(dim=1))
    padding = (prompt == TASK.end).long()
    assert (padding.cummax(dim=1).values == padding).all()
    share = torch.bincount(prompt[function] - TASK.function0, minlength=10) / (2000 * 6)
    assert share.min() > 0.09 and share.max() < 0.11
    for row in prompt[:200].tolist():
        runs, run = [], 0
        for token in row:
            if token < TASK.function0:
                run += 1
            elif run:
                runs.append(run)
                run = 0
        assert 2 <= min(runs) and max(runs) <= 5
    ends = (answer_ == TASK.end).long()
    assert (ends.cummax(dim=1).values == ends).all() and (ends[:, 1] == 0).all()


def shape(prompt: list[int]) -> str:
    """The expression's items in prefix order: ``u`` unary, ``b`` binary, ``s`` a string."""
    items, previous = [], None
    for token in prompt:
        if TASK.function0 <= token < TASK.comma:
            items.append("u" if token < TASK.function0 + len(UNARY) else "b")
        elif token < TASK.function0 and not (previous is not None and previous < TASK.function0):
            items.append("s")
        previous = token
    return "".join(items)


def test_tree_shapes_are_uniform_given_the_functions():
    """One binary and one unary function have three trees, each a third of the time:
    ``u b s , s``, ``b u s , s``, ``b s , u s`` (Raney's rotation of a random order)."""
    prompt, _ = TASK.sample(6000, 2, torch.Generator().manual_seed(0))
    shapes = [shape(p) for p in prompt.tolist()]
    mixed = [s for s in shapes if sorted(s) == ["b", "s", "s", "u"]]
    assert sorted(set(mixed)) == ["bsus", "buss", "ubss"]
    for tree in ("bsus", "buss", "ubss"):
        assert abs(mixed.count(tree) / len(mixed) - 1 / 3) < 0.03
    assert set(shapes) - set(mixed) == {"uus", "bbsss", "bsbss"}  # both unary, both binary


def test_answers_never_exceed_their_slots_and_a_longer_string_is_refused():
    _, answer_ = TASK.sample(512, 8, torch.Generator().manual_seed(0))
    assert answer_.shape == (512, 40) and (answer_[:, 0] != TASK.end).all()
    with pytest.raises(ValueError, match="evaluates to 40 letters, more than the 20"):
        TASK.solve(torch.tensor([tokens("repeat repeat repeat A1 B1 C1 D1 E1")]))
    with pytest.raises(ValueError, match="not a complete prefix expression"):
        TASK.solve(torch.tensor([tokens("append A1 B1")]))


def test_the_alphabet_and_its_settings():
    assert TASK.num_symbols == 532 and TASK.spec()["letters"] == 520
    small = PcfgTask(letters=26)  # A1 .. Z1: pcfg-set's default alphabet
    assert small.num_symbols == 38 and small.comma == 3 + 26 + 10
    prompt, _ = small.sample(256, 8, torch.Generator().manual_seed(0))
    letters = prompt[prompt < small.function0]
    assert letters.min() >= 3 and letters.max() < 3 + 26
    for letters_ in (1, 521):
        with pytest.raises(ConfigError, match=f"task.letters must be 2 to 520.*got {letters_}"):
            PcfgTask(letters=letters_)
    with pytest.raises(ConfigError, match="fixed alphabet of 532 symbols"):
        PcfgTask(num_symbols=32)


@pytest.mark.slow
def test_a_small_model_learns_one_function_in_distribution(tmp_path):
    """One function over 26 letters: measured 99.6% exact match in 2000 steps (62 s). Nesting
    is what is hard at CPU scale: trained on 1-2 functions, 2 functions reached 39% (3000
    steps) and, with 4 layers, 61% (4000 steps, 279 s); the NoPE CPU preset (1-8 functions, 520
    letters, 4000 steps) 3% (seed 0, 870 s)."""
    settings = ("task.letters=26", "task.train_lengths=[1,1]", "task.eval_lengths=[1]")
    record = learn(tmp_path, "pcfg", 2000, *settings)
    assert record["metrics"]["test_id"]["exact_match"] >= 0.9
