import pytest
import torch

from pelab.layouts import DecoderLayout, EncoderLayout, get_layout
from pelab.pe.base import ConfigError
from pelab.tasks import BLANK, BOS, SEP

PROMPT = torch.tensor([[5, 6, 7]])
ANSWER = torch.tensor([[7, 6, 5]])


def test_decoder_sequence_and_answer_positions():
    inputs, answer_slice = DecoderLayout.teacher_forcing(PROMPT, ANSWER)
    assert inputs.tolist() == [[BOS, 5, 6, 7, SEP, 7, 6]]
    # logits at these positions predict the answer tokens
    full = [BOS, 5, 6, 7, SEP, 7, 6, 5]
    targets = [full[i + 1] for i in range(len(full) - 1)][answer_slice]
    assert targets == [7, 6, 5]


def test_encoder_sequence_has_blank_answer_slots():
    inputs, answer_slice = EncoderLayout.teacher_forcing(PROMPT, ANSWER)
    assert inputs.tolist() == [[BOS, 5, 6, 7, SEP, BLANK, BLANK, BLANK]]
    assert list(range(8))[answer_slice] == [5, 6, 7]


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
    out = DecoderLayout.predict(oracle, PROMPT, 3)
    assert out.tolist() == [[5, 6, 7]]
    assert oracle.calls == 3  # one forward per generated token


def test_greedy_decoding_passes_the_prefix_of_the_given_positions():
    oracle = CopyOracle(offset=3)
    positions = torch.tensor([[0, 5, 9, 14, 20, 21, 30, 41]])  # BOS, 3 prompt, SEP, 3 answer
    DecoderLayout.predict(oracle, PROMPT, 3, positions)
    assert [p.tolist() for p in oracle.positions] == [
        [[0, 5, 9, 14, 20]],
        [[0, 5, 9, 14, 20, 21]],
        [[0, 5, 9, 14, 20, 21, 30]],
    ]


def test_encoder_prediction_is_one_forward_over_the_slots():
    oracle = CopyOracle(offset=0)
    out = EncoderLayout.predict(oracle, PROMPT, 2)
    assert out.tolist() == [[BLANK, BLANK]] and oracle.calls == 1


def test_unknown_model_kind_names_the_valid_choices():
    with pytest.raises(
        ConfigError, match="unknown model.kind 'seq2seq'; valid choices: decoder, encoder"
    ):
        get_layout("seq2seq")


class Recorder(torch.nn.Module):
    """Returns its input tokens as logits and remembers the positions it was given."""

    def forward(self, tokens, positions=None):
        self.positions = positions
        return torch.nn.functional.one_hot(tokens, 10).float()


@pytest.mark.parametrize("layout", [DecoderLayout, EncoderLayout])
def test_answer_logits_slice_the_canonical_positions(layout):
    net = Recorder()
    canonical = torch.arange(8)[None] * 10  # BOS, 3 prompt, SEP, 3 answer
    logits = layout.answer_logits(net, PROMPT, ANSWER, canonical)
    assert logits.shape == (1, 3, 10)
    fed = 7 if layout is DecoderLayout else 8  # the decoder never feeds the last answer token
    assert net.positions.tolist() == canonical[:, :fed].tolist()
