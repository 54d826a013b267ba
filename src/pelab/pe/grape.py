"""GRAPE (Zhang et al. 2026, "Group Representational Position Encoding", ICLR 2026,
arXiv 2512.07805): a position ``n`` acts on queries and keys as an element ``G(n) = exp(n ω L)``
of a one-parameter group, so ``G(m)ᵀ G(n) = G(n - m)`` and scores read offsets only.

* ``grape_m`` (multiplicative, ``SO(d)``): rotations with rank-2 skew generators
  ``L = a bᵀ - b aᵀ``; RoPE is the case of the canonical coordinate planes with RoPE's spectrum.
* ``grape_a`` (additive, unipotent ``GL(d+2)``): with ``q̂ = [q; 1; 0]``, ``k̂ = [k; 0; 1]`` and a
  nilpotent ``A`` (``A² = 0``, ``exp(n A) = I + n A``) the score gains a bias linear in the
  offset; ALiBi (constant slope) and FoX (per-token forget gates) are exact special cases.

Reference code: github.com/model-architectures/GRAPE (``model/llama-mha-grape-*.py``).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor, nn

from pelab.errors import ConfigError
from pelab.pe.base import ModelDims, PositionalEncoding, in_fp32, register_pe
from pelab.pe.bias import alibi_slopes
from pelab.pe.fox import forget_bias
from pelab.pe.rotary import rotate_interleaved
from pelab.positions import Positions

Generators = Literal["rope", "learned_commuting", "learned"]  # pe.generators (grape_m)
Gate = Literal["none", "query", "key", "query_key", "forget"]  # pe.gate (grape_a)


def rank2_generators(a: Tensor, b: Tensor, freq: Tensor) -> Tensor:
    """``L = Σ_i θ_i (a_i b_iᵀ - b_i a_iᵀ)``: ``a, b: [h, r, d]``, ``freq: [h|1, r]`` ->
    ``[h, d, d]``, a skew-symmetric matrix per head."""
    ab = torch.einsum("hr,hrd,hre->hde", freq.expand(a.shape[0], -1), a, b)
    return ab - ab.transpose(-1, -2)


@register_pe("grape_m")
class GrapeM(PositionalEncoding):
    """Multiplicative GRAPE: ``q̃_n = G(n) q_n``, ``k̃_m = G(m) k_m`` with ``G(n) = exp(n L)``,
    ``L = Σ_i θ_i L_i`` a sum of rank-2 skew generators ``L_i = a_i b_iᵀ - b_i a_iᵀ``, so
    ``q̃_nᵀ k̃_m = q_nᵀ G(m - n) k_m`` and ``|G(n) x| = |x|``. Per layer (as the reference code).

    ``generators``:

    * ``rope``: the canonical planes ``L_i = U_i J U_iᵀ`` on dims ``(2i, 2i+1)`` (``J`` the 90°
      rotation) and RoPE's ``θ_i = base^(-2i/d)``, fixed: exactly ``pe=rope``.
    * ``learned_commuting`` (default; the paper's trained "GRAPE-M-nonctx"): the same planes, so
      the ``L_i`` commute and ``G`` is a block rotation, with learned ``θ_i = exp(φ_i / s)``
      (``s = log_freq_scale``, the reference's learning-rate trick) initialised to RoPE's,
      one spectrum for all heads (``share_across_heads``) or one per head.
    * ``learned``: ``a_i, b_i`` learned too (per head; start on RoPE's planes): the planes tilt
      and their generators stop commuting (``exp(L_1) exp(L_2) ≠ exp(L_2) exp(L_1)``), but
      ``G(n) = exp(n L)`` of their sum is still a one-parameter group, so the relative law and
      norms hold exactly; computed by ``matrix_exp`` per distinct position, ``O(d³)`` each.
    """

    shift = "relative"

    def __init__(
        self,
        dims: ModelDims,
        generators: Generators = "learned_commuting",
        base: float = 10000.0,
        share_across_heads: bool = True,
        log_freq_scale: float = 16.0,
    ) -> None:
        super().__init__(dims)
        self.generators = generators
        d, h, n_layers = dims.head_dim, dims.n_heads, dims.n_layers
        if d % 2:
            raise ConfigError(f"pe=grape_m rotates pairs of dims: head_dim={d} must be even")
        if log_freq_scale <= 0:
            raise ConfigError(f"pe.log_freq_scale must be > 0, got {log_freq_scale}")
        self.log_freq_scale = float(log_freq_scale)
        inv_freq = base ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)  # RoPE's θ_i, [d/2]
        if self.generators == "rope":
            self.register_buffer("inv_freq", inv_freq[None], persistent=False)  # [1, d/2]
            return
        heads = 1 if share_across_heads else h
        log_freq = (inv_freq.log() * self.log_freq_scale).expand(n_layers, heads, -1)
        self.log_freq = nn.Parameter(log_freq.clone())  # [layers, h|1, d/2]
        if self.generators == "learned":
            eye = torch.eye(d)
            # L_i = U_i J U_iᵀ = L(e_2i+1, e_2i): RoPE's planes and orientation
            self.a = nn.Parameter(eye[1::2].expand(n_layers, h, -1, -1).clone())  # [l, h, r, d]
            self.b = nn.Parameter(eye[0::2].expand(n_layers, h, -1, -1).clone())

    def frequencies(self, layer: int) -> Tensor:
        """``θ_i``: ``[h|1, d/2]``."""
        if self.generators == "rope":
            return self.inv_freq
        return torch.exp(self.log_freq[layer].float() / self.log_freq_scale)

    def generator(self, layer: int) -> Tensor:
        """``L`` of ``generators=learned``: ``[h, d, d]``."""
        return rank2_generators(
            self.a[layer].float(), self.b[layer].float(), self.frequencies(layer)
        )

    def transform_qk(
        self, q: Tensor, k: Tensor, pos: Positions, layer: int
    ) -> tuple[Tensor, Tensor]:
        key = (id(self), "grape_m", None if self.generators == "rope" else layer)
        rot_q, rot_k = pos.memo(
            key, lambda: (self.action(pos.q, layer), self.action(pos.k, layer))
        )
        return self.apply(q, rot_q), self.apply(k, rot_k)

    def action(self, positions: Tensor, layer: int) -> Tensor:
        """``G(n)`` at ``positions: [b|1, n]``: block rotations as complex factors
        ``[b|1, h|1, n, d/2]``, or (``learned``) matrices ``[b|1, h, n, d, d]``."""
        n = positions.float()
        if self.generators != "learned":
            angles = n[:, None, :, None] * self.frequencies(layer)[None, :, None, :]
            return torch.polar(torch.ones_like(angles), angles)
        distinct, index = torch.unique(n, return_inverse=True)  # exp once per position value
        generators = distinct.double()[:, None, None, None] * self.generator(layer).double()
        rotations = torch.linalg.matrix_exp(generators).float()  # float64: exp(n L) for large n
        return rearrange(rotations[index], "b n h d e -> b h n d e")

    def apply(self, x: Tensor, rotation: Tensor) -> Tensor:
        if self.generators != "learned":
            return rotate_interleaved(x, rotation).to(x.dtype)
        return torch.einsum("bhnde,bhne->bhnd", rotation, x.float()).to(x.dtype)


def softplus_inverse(y: float) -> float:
    return math.log(math.expm1(y))


@register_pe("grape_a")
class GrapeA(PositionalEncoding):
    """Additive GRAPE (section 4; FoX in appendix C). Per layer and head ``h``::

        logit_ij += (j - i) β_h ω_h (λ_q(q_i) + λ_k(k_j))      (gate: query | key | query_key)
        λ_q(q) = softplus(v_hᵀ q / √d),  λ_k(k) = softplus(u_hᵀ k / √d),  |u_h| = |v_h| = 1
        logit_ij += (j - i) β_h                                  (gate: none, ALiBi)
        logit_ij += Σ_{l=j+1..i} log σ(w_h · x_l + c_h)          (gate: forget, FoX)

    ``β_h`` are ALiBi's slopes, ``ω_h = softplus(ω̃_h) ≥ 0`` (initially ``omega_init``), and
    ``u_h, v_h ~ N(0, 1/d)`` normalised to unit length, as the reference code. ``query`` and
    ``key`` keep one of the two gates (GRAPE-A-Q, GRAPE-A-K). The bias is the score of
    ``q̂ = [q; 1; 0]`` and ``k̂ = [k; 0; 1]`` through ``exp((j - i) A)^(-ᵀ) = I - (j - i) Aᵀ`` for a
    rank-1 nilpotent ``A ∝ e_(d+2) e_(d+1)ᵀ``. The default is ``query_key`` (GRAPE-A-QK, the
    paper's best GRAPE-A); the path-integral GRAPE-AP (section 5) is not included. Causal only:
    the paper's bias is a penalty on keys before the query.
    """

    shift = "relative"
    position_dims = 1
    causal_only = True

    def __init__(
        self,
        dims: ModelDims,
        gate: Gate = "query_key",
        omega_init: float = 1.0,
        normalize_gate_vectors: bool = True,
    ) -> None:
        super().__init__(dims)
        self.gate = gate
        if omega_init <= 0:
            raise ConfigError(f"pe.omega_init must be > 0, got {omega_init}")
        self.normalize_gate_vectors = normalize_gate_vectors
        d, h, n_layers = dims.head_dim, dims.n_heads, dims.n_layers
        self.register_buffer("slopes", alibi_slopes(h), persistent=False)  # β_h, [h]
        if self.gate == "forget":
            self.supports_kv_cache = False  # D needs the gates of every earlier token
            self.gates = nn.ModuleList(nn.Linear(dims.d_model, h) for _ in range(n_layers))
            for g in self.gates:  # FoX's init: N(0, 0.02) weights, zero bias
                nn.init.normal_(g.weight, std=0.02)
                nn.init.zeros_(g.bias)
        elif self.gate != "none":
            self.omega = nn.Parameter(torch.full((n_layers, h), softplus_inverse(omega_init)))
            if self.gate in ("query", "query_key"):  # v gates the queries
                self.v = nn.Parameter(torch.randn(n_layers, h, d) / d**0.5)
            if self.gate in ("key", "query_key"):  # u gates the keys
                self.u = nn.Parameter(torch.randn(n_layers, h, d) / d**0.5)

    def logit_bias(self, pos: Positions, layer: int) -> Tensor | None:
        if self.gate != "none":
            return None
        # (j - i) β_h: [b|1, h, i, j]
        return pos.memo(
            (id(self), "alibi"), lambda: -self.slopes[:, None, None] * pos.delta()[:, None]
        )

    def input_bias(
        self, x: Tensor, q: Tensor, k: Tensor, pos: Positions, layer: int
    ) -> Tensor | None:
        if self.gate == "none":
            return None
        if self.gate == "forget":  # x: [b, n, d_model]
            log_f = in_fp32(lambda x: F.logsigmoid(self.gates[layer](x)), x)
            return forget_bias(rearrange(log_f, "b n h -> b h n"))
        return in_fp32(lambda q, k: self.gated_bias(q, k, pos, layer), q, k)

    def gate_of(self, name: str, x: Tensor, layer: int) -> Tensor:
        """``softplus(wᵀ x / √d)`` for ``x: [b, h, n, d]`` -> ``[b, h, n]``."""
        w = getattr(self, name)[layer].to(x.dtype)  # float32 (in_fp32), float64 in checks
        if self.normalize_gate_vectors:
            w = F.normalize(w, dim=-1, eps=1e-6)
        return F.softplus(torch.einsum("bhnd,hd->bhn", x, w) / math.sqrt(x.shape[-1]))

    def gated_bias(self, q: Tensor, k: Tensor, pos: Positions, layer: int) -> Tensor:
        rate = torch.zeros((), device=q.device)
        if self.gate in ("query", "query_key"):
            rate = rate + self.gate_of("v", q, layer)[..., :, None]  # [b, h, i, 1]
        if self.gate in ("key", "query_key"):
            rate = rate + self.gate_of("u", k, layer)[..., None, :]  # [b, h, 1, j]
        slope = self.slopes * F.softplus(self.omega[layer].to(q.dtype))  # β_h ω_h, [h]
        return -pos.delta()[:, None].to(q.dtype) * slope[:, None, None] * rate  # [b, h, i, j]
