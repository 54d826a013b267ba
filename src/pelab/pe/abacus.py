"""Abacus embeddings: a learned vector per digit's place within its number."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from pelab.errors import ConfigError
from pelab.pe.base import ModelDims, PositionalEncoding, register_pe
from pelab.positions import Positions


def digit_places(tokens: Tensor, digits: Tensor) -> Tensor:
    """The place of each token in its number, ``[b, n]`` -> ``[b, n]``: 0 for a token that is not
    one of ``digits: [D]``, else 1 for the first digit of a maximal run of digit tokens (as
    written, left to right), 2 for the next, ... ``BOS 1 2 3 + 4 5 SEP`` -> ``0 1 2 3 0 1 2 0``.

    Vectorised: with ``c_t`` the number of digits up to ``t``, a digit's place is ``c_t`` minus
    ``c`` at the last non-digit before it (``cummax`` of ``c`` kept at the non-digits only)."""
    is_digit = (tokens[..., None] == digits).any(dim=-1)  # [b, n]
    count = is_digit.long().cumsum(dim=-1)  # [b, n]
    before_run = torch.where(is_digit, 0, count).cummax(dim=-1).values  # [b, n]
    return count - before_run  # 0 at every non-digit


@register_pe("abacus")
class AbacusPE(PositionalEncoding):
    """McLeish et al. 2024, "Transformers Can Do Arithmetic with the Right Embeddings" (Abacus).

    ``x_t += E[a_t + k·[a_t > 0]]``: ``a_t`` is the place of token ``t`` in its number
    (``digit_places``: 0 for a token that is no digit, 1, 2, ... along each maximal run of the
    digit tokens ``ModelDims.digit_tokens``, from the first digit as written), ``E`` a learned
    table and ``k ~ U{0, .., max_k}`` an offset drawn once per forward in training (one per batch)
    from torch's global RNG, like dropout (so a seeded run draws the same offsets); ``k = 0`` in
    evaluation. The offset trains the rows of places beyond the training numbers' lengths, which
    is how Abacus reaches longer numbers. As the released code (``abacus.py``, ``Abacus.forward``
    and ``Abacus.helper``): one offset per batch, inclusive of ``max_k`` (``random.randint``;
    ``max_abacus_len: 100`` in its configs), added to every digit's place; every non-digit token
    gets row 0, a learned vector (shared by them all, a reparametrisation of their token vectors).

    Places are counted from the first digit as written, as the paper's code counts them; the
    paper writes every number least significant digit first, so there place 1 is the units
    digit and digits of the same significance share a row. ``task=addition`` writes its operands
    most significant digit first, zero-padded to the same width: operand digits of the same
    significance still share a place, and the default answer (most significant first, one digit
    longer) has place ``i + 1`` where the operands' digits of that significance have ``i``; with
    ``reverse_answer`` the answer's places run the other way. ``binary_addition`` writes every
    number least significant bit first, as the paper. Counting from the last digit instead would
    make a token's place depend on later tokens (not causal).

    The table has ``max_len + max_k + 1`` rows (``max_len``: the run's longest sequence, which
    bounds its longest number), so a sequence longer than ``max_len + max_k`` tokens in
    evaluation (``max_len`` in training) is refused: a learned row cannot extrapolate. The rows
    start as ``N(0, init_std²)``; the default 1.0 is pelab's token-table scale (the reference
    gives both tables the same std, ``d^-1/2``). A task without digit tokens is refused
    (``needs_digit_tokens``). No key/value cache: a token's place depends on the tokens before
    it, which the cache does not keep, so greedy decoding re-runs full forwards.
    """

    position_dims = None  # reads no positions: its indices come from the tokens
    members_at_once = False  # each member draws its own offset from the RNG, as its single run
    shift = "relative"  # nothing to shift
    needs_digit_tokens = True
    supports_kv_cache = False

    def __init__(self, dims: ModelDims, max_k: int = 100, init_std: float = 1.0) -> None:
        super().__init__(dims)
        if isinstance(max_k, bool) or not isinstance(max_k, int) or max_k < 0:
            raise ConfigError(
                f"pe.max_k must be an integer >= 0 (the largest training offset), got {max_k!r}"
            )
        if not init_std > 0:
            raise ConfigError(f"pe.init_std must be > 0, got {init_std}")
        self.max_k = max_k
        self.register_buffer("digits", torch.tensor(dims.digit_tokens), persistent=False)
        self.table = nn.Embedding(dims.max_len + max_k + 1, dims.d_model)
        nn.init.normal_(self.table.weight, std=init_std)

    def places(self, tokens: Tensor) -> Tensor:
        """The table rows of ``tokens: [b, n]``, ``[b, n]``: ``digit_places`` plus, in training,
        one random offset ``k ~ U{0..max_k}`` on every digit."""
        places = digit_places(tokens, self.digits)
        if self.training and self.max_k:
            k = torch.randint(0, self.max_k + 1, (), device=tokens.device)
            places = places + k * (places > 0)
        return places

    def embed(self, x: Tensor, tokens: Tensor, pos: Positions) -> Tensor:
        # a number has at most n digits: checked on shapes only (no device sync)
        reach = tokens.shape[1] + (self.max_k if self.training else 0)
        if reach >= self.table.num_embeddings:
            raise ConfigError(
                f"pe=abacus has rows for digit places up to {self.table.num_embeddings - 1}, but "
                f"a sequence of {tokens.shape[1]} tokens may hold a number of that many digits"
                + (f", plus an offset of up to {self.max_k} in training" if self.training else "")
                + "; the table is sized by the run's longest sequence and a learned row cannot "
                "extrapolate"
            )
        return x + self.table(self.places(tokens)).to(x.dtype)

    def extra_repr(self) -> str:
        return f"rows={self.table.num_embeddings}, max_k={self.max_k}, digits={len(self.digits)}"
