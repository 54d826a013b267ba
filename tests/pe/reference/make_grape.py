"""Reference values of GRAPE for ``tests/pe/test_grape.py``, from the authors' code.

Runs the reference modules of github.com/model-architectures/GRAPE (commit below) on small seeded
inputs (b=1, n=5, h=2, d=4) with fixed parameters and writes ``grape.json`` next to this file:

* GRAPE-M: ``MSGRAPECommuting`` of ``model/llama-mha-grape-m-nonctx.py`` (learned per-head
  frequencies on canonical planes), q and k -> rotated q and k;
* GRAPE-A: ``QueryGatedAdditiveBias``, ``KeyGatedAdditiveBias`` and
  ``QueryKeyGatedAdditiveBias`` of ``model/llama-mha-grape-a-*.py``, q and k -> the bias
  ``[b, h, i, j]``.

The modules are imported from the reference files unchanged; their package's ``kv_shift`` (a
triton kernel for the unused key/value shift) is replaced by the reference's pure-PyTorch
``kv_shift_torch``. The files import ``transformers``, which pelab does not depend on, so run it
from a throwaway venv with pelab's torch on the path::

    git clone https://github.com/model-architectures/GRAPE /tmp/grape_ref  # then check out
    python -m venv /tmp/grapevenv && /tmp/grapevenv/bin/pip install transformers
    PYTHONPATH=.venv/lib/python3.11/site-packages GRAPE_REF=/tmp/grape_ref \\
        /tmp/grapevenv/bin/python tests/pe/reference/make_grape.py

(``GRAPE_COMMIT=<sha>`` names the commit when ``GRAPE_REF`` is not a git checkout.)

Values in ``grape.json`` came from commit f5b539f35066f9067bf36e1f9d802212fce7884e (CPU, torch
2.13, float32).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

REF = Path(os.environ.get("GRAPE_REF", "/tmp/grape_ref"))
OUT = Path(__file__).with_name("grape.json")
B, N, H, D = 1, 5, 2, 4


def load(name: str, file: str):
    spec = importlib.util.spec_from_file_location(f"model.{name}", REF / "model" / file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def commit() -> str:
    sha = os.environ.get("GRAPE_COMMIT")
    if sha:
        return sha
    cmd = ["git", "-C", str(REF), "rev-parse", "HEAD"]
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()


def main() -> None:
    sys.path.insert(0, str(REF))
    shift = load("kv_shift_torch", "kv_shift_torch.py")
    shift.ShiftLinear = shift.ShiftLinearTorch
    sys.modules["model.kv_shift"] = shift
    grape_m = load("grape_m_nonctx", "llama-mha-grape-m-nonctx.py")
    gated = {
        "query": load("grape_a_q", "llama-mha-grape-a-querygated.py").QueryGatedAdditiveBias,
        "key": load("grape_a_k", "llama-mha-grape-a-keygated.py").KeyGatedAdditiveBias,
        "query_key": load(
            "grape_a_qk", "llama-mha-grape-a-querykeygated.py"
        ).QueryKeyGatedAdditiveBias,
    }

    torch.manual_seed(0)
    q, k = torch.randn(B, N, H, D), torch.randn(B, N, H, D)  # the reference's layout b n h d
    out = {"commit": commit(), "shape_bnhd": [B, N, H, D], "q": q.tolist(), "k": k.tolist()}

    rot = grape_m.MSGRAPECommuting(H, D, share_across_heads=False, log_freq_scale=16.0)
    with torch.no_grad():  # RoPE's spectrum, moved per head (as after training)
        rot.log_freq.add_(torch.tensor([[0.3, -0.5], [-0.2, 0.7]]) * 16.0)
    q_rot, k_rot = rot(q, k)
    out["grape_m"] = {
        "log_freq": rot.log_freq.tolist(),  # [h, d/2], the stored parameter (log θ times 16)
        "log_freq_scale": 16.0,
        "q": q_rot.tolist(),
        "k": k_rot.tolist(),
    }

    out["grape_a"] = {}
    for gate, cls in gated.items():
        bias = cls(H, D, omega_init=0.7)
        with torch.no_grad():
            bias.omega.add_(torch.tensor([0.1, -0.2]))
        params = {name: p.tolist() for name, p in bias.named_parameters()}  # omega (pre-softplus)
        values = bias(q, k) if gate == "query_key" else bias(q if gate == "query" else k)
        out["grape_a"][gate] = {"params": params, "bias": values.tolist()}
    OUT.write_text(json.dumps(out, indent=None) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes) from {out['commit']}")


if __name__ == "__main__":
    main()
