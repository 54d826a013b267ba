import pytest
import torch

from pelab.errors import ConfigError
from pelab.model_kinds import (
    BareEncoderKind,
    DecoderKind,
    EncoderDecoderKind,
    EncoderKind,
    get_model_kind,
)
from pelab.models.transformer import Memory
from pelab.positions import contiguous
from pelab.tokens import BLANK, BOS, SEP

PROMPT = torch.tensor([[5, 6, 7]])
ANSWER = torch.tensor([[7, 6, 5]])


def test_decoder_sequence_and_answer_positions():
    inputs, answer_slice = DecoderKind.teacher_forcing(PROMPT, ANSWER)
    assert inputs.tolist() == [[BOS, 5, 6, 7, SEP, 7, 6]]
    # logits at these positions predict the answer tokens
    full = [BOS, 5, 6, 7, SEP, 7, 6, 5]
    targets = [full[i + 1] for i in range(len(full) - 1)][answer_slice]
    assert targets == [7, 6, 5]


def test_encoder_sequence_has_blank_answer_slots():
    inputs, answer_slice = EncoderKind.teacher_forcing(PROMPT, ANSWER)
    assert inputs.tolist() == [[BOS, 5, 6, 7, SEP, BLANK, BLANK, BLANK]]
    assert list(range(8))[answer_slice] == [5, 6, 7]


def test_bare_encoder_sequence_is_the_prompt_then_blank_slots_without_markers():
    inputs, answer_slice = BareEncoderKind.teacher_forcing(PROMPT, ANSWER)
    assert inputs.tolist() == [[5, 6, 7, BLANK, BLANK, BLANK]]
    assert list(range(6))[answer_slice] == [3, 4, 5]


def test_bare_encoder_prediction_reads_the_slots_on_the_first_positions():
    net = Recorder()
    canonical = torch.arange(8)[None] * 10  # BOS, 3 prompt, SEP, 3 answer
    out = BareEncoderKind.predict(net, PROMPT, 3, canonical)
    assert out.tolist() == [[BLANK] * 3]  # the Recorder echoes its input: the slots are blank
    assert net.positions.tolist() == [[0, 10, 20, 30, 40, 50]]  # n + m positions, from 0


def test_bare_encoder_feeds_k_d_coordinates_of_the_prompt_and_slots_only():
    net = Recorder()
    grid = torch.tensor([[[9, 9], [0, 0], [0, 1], [0, 2], [8, 8], [1, 0], [1, 1], [1, 2]]])
    BareEncoderKind.answer_logits(net, PROMPT, ANSWER, grid)  # BOS and SEP at [9 9], [8 8]
    assert net.positions.tolist() == [[[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]]]
    BareEncoderKind.predict(net, PROMPT, 3, grid)
    assert net.positions.tolist() == [[[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]]]


class CopyOracle(torch.nn.Module):
    """Predicts, at every position, the token found ``offset`` positions back (or token 3)."""

    def __init__(self, offset: int, vocab: int = 10) -> None:
        super().__init__()
        self.offset, self.vocab = offset, vocab
        self.calls = 0
        self.positions = []

    def forward(self, tokens, positions=None):
        self.calls += 1
        self.positions.append(positions)
        shifted = torch.roll(tokens, self.offset, dims=1)
        shifted[:, : self.offset] = 3
        return torch.nn.functional.one_hot(shifted, self.vocab).float()


def test_greedy_decoding_feeds_back_its_own_predictions():
    # copy of length 3: answer token t sits at position 4 + t, its source at 1 + t
    oracle = CopyOracle(offset=3)
    out = DecoderKind.predict(oracle, PROMPT, 3, contiguous(8))
    assert out.tolist() == [[5, 6, 7]]
    assert oracle.calls == 3  # one forward per generated token


def test_greedy_decoding_passes_the_prefix_of_the_given_positions():
    oracle = CopyOracle(offset=3)
    positions = torch.tensor([[0, 5, 9, 14, 20, 21, 30, 41]])  # BOS, 3 prompt, SEP, 3 answer
    DecoderKind.predict(oracle, PROMPT, 3, positions)
    assert [p.tolist() for p in oracle.positions] == [
        [[0, 5, 9, 14, 20]],
        [[0, 5, 9, 14, 20, 21]],
        [[0, 5, 9, 14, 20, 21, 30]],
    ]


def test_encoder_prediction_is_one_forward_over_the_slots():
    oracle = CopyOracle(offset=0)
    out = EncoderKind.predict(oracle, PROMPT, 2, contiguous(7))
    assert out.tolist() == [[BLANK, BLANK]] and oracle.calls == 1


def test_unknown_model_kind_names_the_valid_choices():
    with pytest.raises(
        ConfigError,
        match="unknown model.kind 'seq2seq'; valid choices: decoder, encoder, encoder_bare, "
        "encoder_decoder",
    ):
        get_model_kind("seq2seq")


class Recorder(torch.nn.Module):
    """Returns its input tokens as logits and remembers the positions it was given."""

    def forward(self, tokens, positions=None):
        self.positions = positions
        return torch.nn.functional.one_hot(tokens, 10).float()


@pytest.mark.parametrize("kind", [DecoderKind, EncoderKind, BareEncoderKind])
def test_answer_logits_slice_the_canonical_positions(kind):
    net = Recorder()
    canonical = torch.arange(8)[None] * 10  # BOS, 3 prompt, SEP, 3 answer
    logits = kind.answer_logits(net, PROMPT, ANSWER, canonical)
    assert logits.shape == (1, 3, 10)
    # the decoder never feeds the last answer token; the bare encoder feeds no BOS or SEP
    fed = {DecoderKind: 7, EncoderKind: 8, BareEncoderKind: 6}[kind]
    assert net.positions.tolist() == canonical[:, :fed].tolist()


def test_encoder_decoder_sequences_start_the_decoder_at_sep():
    source, target = EncoderDecoderKind.teacher_forcing(PROMPT, ANSWER)
    assert source.tolist() == [[BOS, 5, 6, 7, SEP]]
    assert target.tolist() == [[SEP, 7, 6]]  # its logits predict 7, 6, 5


@pytest.mark.parametrize(
    ("canonical", "source", "target"),
    [
        # contiguous: the encoder and the decoder each count from 0, as in the original Transformer
        ([0, 1, 2, 3, 4, 5, 6, 7], [0, 1, 2, 3, 4], [0, 1, 2]),
        # randomized: the decoder keeps its gaps and starts where BOS sits
        ([0, 5, 9, 14, 20, 21, 30, 41], [0, 5, 9, 14, 20], [0, 1, 10]),
        ([3, 5, 9, 14, 20, 21, 30, 41], [3, 5, 9, 14, 20], [3, 4, 13]),
    ],
)
def test_encoder_decoder_positions_give_each_stack_its_own_slice(canonical, source, target):
    enc, dec = EncoderDecoderKind.split_positions(torch.tensor([canonical]), 3, 3)
    assert enc.tolist() == [source] and dec.tolist() == [target]


def test_encoder_decoder_grid_coordinates_put_answer_cells_where_prompt_cells_sit():
    # the grid task's canvas, 2 x 2: BOS (0,0), prompt (r, 1+c), SEP (0,3), answer (r, 4+c)
    canonical = [(0, 0), (0, 1), (0, 2), (1, 1), (1, 2), (0, 3), (0, 4), (0, 5), (1, 4), (1, 5)]
    enc, dec = EncoderDecoderKind.split_positions(torch.tensor([canonical]), 4, 4)
    assert enc.tolist() == [[list(c) for c in canonical[:6]]]
    # SEP a00 a01 a10 -> (0,0) and cell (r, c) at (r, 1 + c), as prompt cell (r, c) in the encoder
    assert dec.tolist() == [[[0, 0], [0, 1], [0, 2], [1, 1]]]


class CopyingEncoderDecoder(torch.nn.Module):
    """A test double: the decoder's step ``t`` predicts source token ``t + 1`` (a copy of the
    prompt), and every call's tokens and positions are recorded. With ``cache`` it keeps a
    cache of the tokens fed so far, as the real model does."""

    def __init__(self, supports_kv_cache: bool, vocab: int = 10) -> None:
        super().__init__()
        self.supports_kv_cache, self.vocab = supports_kv_cache, vocab
        self.fed: list[tuple[list, list | None]] = []

    def new_cache(self, capacity):
        return []

    def encode(self, tokens, positions=None):
        return Memory(torch.nn.functional.one_hot(tokens, self.vocab).float(), positions)

    def decode(self, tokens, memory, positions=None, cache=None):
        self.fed.append((tokens.tolist(), None if positions is None else positions.tolist()))
        done = 0 if cache is None else len(cache)
        if cache is not None:
            cache.extend(tokens.unbind(1))
        steps = torch.arange(done, done + tokens.shape[1]) + 1  # the source slot to copy
        return memory.states[:, steps]

    def forward(self, source, target, source_positions=None, target_positions=None):
        return self.decode(target, self.encode(source, source_positions), target_positions)


@pytest.mark.parametrize("cached", [True, False])
def test_encoder_decoder_greedy_decoding_feeds_the_decoder_its_own_positions(cached):
    net = CopyingEncoderDecoder(supports_kv_cache=cached)
    positions = torch.tensor([[0, 5, 9, 14, 20, 21, 30, 41]])  # BOS, 3 prompt, SEP, 3 answer
    assert EncoderDecoderKind.predict(net, PROMPT, 3, positions).tolist() == [[5, 6, 7]]
    if cached:  # the start token, then each prediction but the last, one at a time
        assert net.fed == [([[SEP]], [[0]]), ([[5]], [[1]]), ([[6]], [[10]])]
    else:
        assert net.fed == [
            ([[SEP]], [[0]]),
            ([[SEP, 5]], [[0, 1]]),
            ([[SEP, 5, 6]], [[0, 1, 10]]),
        ]


def test_encoder_decoder_answer_logits_are_the_teacher_forced_decoder_logits():
    net = CopyingEncoderDecoder(supports_kv_cache=False)
    positions = torch.tensor([[0, 5, 9, 14, 20, 21, 30, 41]])
    logits = EncoderDecoderKind.answer_logits(net, PROMPT, ANSWER, positions)
    assert logits.argmax(-1).tolist() == [[5, 6, 7]]
    assert net.fed == [([[SEP, 7, 6]], [[0, 1, 10]])]


class CachedCopyOracle(CopyOracle):
    """``CopyOracle`` with a cache: it sees only the new tokens and keeps the earlier ones."""

    supports_kv_cache = True

    def new_cache(self, capacity):
        return {"tokens": torch.zeros(1, 0, dtype=torch.long), "capacity": capacity}

    def forward(self, tokens, positions=None, cache=None):
        seen = torch.cat((cache["tokens"], tokens), dim=1)
        assert seen.shape[1] <= cache["capacity"]
        cache["tokens"] = seen
        return super().forward(seen, positions)[:, -tokens.shape[1] :]


def test_cached_greedy_decoding_feeds_each_new_token_with_its_own_position():
    oracle = CachedCopyOracle(offset=3)
    positions = torch.tensor([[0, 5, 9, 14, 20, 21, 30, 41]])
    assert DecoderKind.predict(oracle, PROMPT, 3, positions).tolist() == [[5, 6, 7]]
    assert [p.tolist() for p in oracle.positions] == [[[0, 5, 9, 14, 20]], [[21]], [[30]]]


@pytest.mark.parametrize("kind", [DecoderKind, EncoderKind, BareEncoderKind])
def test_markers_count_the_tokens_fed_before_the_answer_besides_the_prompt(kind):
    inputs, _ = kind.teacher_forcing(PROMPT, ANSWER)
    first_answer_token = PROMPT.shape[1] + kind.markers  # where figures draw the divider
    expected = ANSWER[0, 0] if kind is DecoderKind else BLANK
    assert inputs[0, first_answer_token] == expected
    assert inputs[0, first_answer_token - 1] == (SEP if kind.markers else PROMPT[0, -1])
