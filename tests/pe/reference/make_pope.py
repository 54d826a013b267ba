"""Reference values for ``tests/pe/test_pope.py``: lucidrains' PoPE-pytorch on small fixed inputs.

Writes ``tests/pe/reference/pope.json``: per case the seeded inputs (q, k, positions, the key
phase bias), the reference's transformed ``q``, ``k`` (``apply_pope_to_qk``, its interleaved
layout ``[.., (d two)]``) and its attention similarity ``q~ k~^T`` (``[b, h, i, j]``, unscaled,
``compute_attn_similarity_non_fused``), plus the reference commit and package version. The
values in the repository came from PoPE-pytorch commit
ee11cab0dda8361b02fec56975e84e419ea6a631 (package version 0.0.15), torch 2.13 on the CPU.

Re-run (the reference stays out of pelab's dependencies; its one extra dependency goes to a
throwaway directory)::

    git clone https://github.com/lucidrains/PoPE-pytorch /tmp/pope_ref
    git -C /tmp/pope_ref checkout ee11cab0dda8361b02fec56975e84e419ea6a631
    .venv/bin/python -m pip install --no-deps --target /tmp/pope_deps torch-einops-utils
    PYTHONPATH=/tmp/pope_ref:/tmp/pope_deps .venv/bin/python tests/pe/reference/make_pope.py \\
        --commit ee11cab0dda8361b02fec56975e84e419ea6a631
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import re
from pathlib import Path

import torch
from PoPE_pytorch import PoPE
from PoPE_pytorch.attention import compute_attn_similarity_non_fused

OUT = Path(__file__).with_name("pope.json")

# name, base (the reference's theta), query positions, key positions, phase bias drawn or zero
CASES = (
    ("no_phase_bias", 10000.0, [3, 5, 6, 10, 17], [3, 5, 6, 10, 17], False),
    # bias drawn from U[-2 pi, 0], two entries set outside it (the reference clamps them)
    ("phase_bias", 100.0, [0, 1, 2, 3, 4], [0, 1, 2, 3, 4], True),
    # fewer queries than keys: the queries are the last keys (the reference's inference path)
    ("query_suffix", 10000.0, [7, 9], [1, 2, 4, 7, 9], True),
)
B, H, D = 1, 2, 4


def package_version() -> str:
    """The version of the imported PoPE_pytorch: the pyproject.toml beside a checkout, else the
    installed distribution's."""
    import PoPE_pytorch

    pyproject = Path(PoPE_pytorch.__file__).parents[1] / "pyproject.toml"
    if pyproject.exists():
        match = re.search(r'^version = "([^"]+)"', pyproject.read_text(), re.M)
        if match:
            return match.group(1)
    return importlib.metadata.version("PoPE-pytorch")


def exact(t: torch.Tensor) -> list:
    """Nested lists of the float32 values, each printed with 9 significant digits (enough to read
    back the same float32)."""
    if t.dim() == 0:
        return float(f"{t.item():.9g}")
    return [exact(row) for row in t]


def case(name: str, base: float, pos_q: list[int], pos_k: list[int], bias: bool) -> dict:
    torch.manual_seed(len(name))
    pope = PoPE(D, heads=H, theta=base)
    if bias:
        with torch.no_grad():
            pope.bias.uniform_(-2 * math.pi, 0.0)
            pope.bias[0, 0], pope.bias[-1, -1] = -7.0, 0.5  # outside [-2 pi, 0]: clamped
    q = torch.randn(B, H, len(pos_q), D)
    k = torch.randn(B, H, len(pos_k), D)
    # the reference takes one position sequence: the keys', whose last entries are the queries'
    assert pos_k[len(pos_k) - len(pos_q) :] == pos_q
    emb = pope(torch.tensor(pos_k, dtype=torch.float32))
    q_out, k_out = pope.apply_pope_to_qk(emb, q, k)
    logits = compute_attn_similarity_non_fused(q, k, emb)
    return {
        "name": name,
        "base": base,
        "pos_q": pos_q,
        "pos_k": pos_k,
        "phase_bias": exact(pope.bias.detach()) if bias else None,  # [h, d], unclamped
        "q": exact(q),  # [b, h, i, d]
        "k": exact(k),  # [b, h, j, d]
        "q_out": exact(q_out),  # [b, h, i, 2d], interleaved: (mu cos, mu sin) per component
        "k_out": exact(k_out),  # [b, h, j, 2d]
        "logits": exact(logits),  # [b, h, i, j], q_out k_out^T (no 1/sqrt(d))
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commit", required=True, help="the PoPE-pytorch commit on the path")
    args = parser.parse_args()
    data = {
        "reference": "https://github.com/lucidrains/PoPE-pytorch",
        "commit": args.commit,
        "package_version": package_version(),
        "torch": torch.__version__,
        "cases": [case(*c) for c in CASES],
    }
    cases = ",\n  ".join(json.dumps(c) for c in data.pop("cases"))
    head = json.dumps(data, indent=1)[:-2]  # without the closing brace
    OUT.write_text(f'{head},\n "cases": [\n  {cases}\n ]\n}}\n')
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
