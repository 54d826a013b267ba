"""The worked example of docs/encodings.md ("Adding an encoding") runs as written: its module
registers an encoding that a model runs on the fused kernel, with the formula it states; its
example test passes; the command it gives for an encoding's tests is a make target."""

import re
import sys
import types
from functools import partial
from pathlib import Path

import torch

from pelab.models.dims import NetDims
from pelab.models.transformer import Transformer
from pelab.pe import PE_REGISTRY
from pelab.positions import Positions

DOC = Path(__file__).resolve().parents[2] / "docs" / "encodings.md"


def example_blocks() -> list[tuple[str, str]]:
    text = DOC.read_text()
    section = text[text.index("## Adding an encoding") : text.index("## Absolute encodings")]
    return re.findall(r"```(\w+)\n(.*?)```", section, re.S)


def test_the_documented_example_encoding_runs_as_written(monkeypatch):
    blocks = example_blocks()
    assert [lang for lang, _ in blocks] == ["python", "yaml", "python", "bash"]
    (_, source), (_, config), (_, test), (_, command) = blocks
    # register temporarily, beside a log_bias a user made from this very example
    registry = {name: cls for name, cls in PE_REGISTRY.items() if name != "log_bias"}
    monkeypatch.setattr("pelab.pe.base.PE_REGISTRY", registry)
    module = types.ModuleType("pelab.pe.log_bias")
    exec(compile(source, "log_bias.py", "exec"), module.__dict__)
    monkeypatch.setitem(sys.modules, "pelab.pe.log_bias", module)
    cls = module.LogBiasPE
    assert "_target_: pelab.pe.log_bias.LogBiasPE" in config and cls.shift == "relative"
    net = Transformer(NetDims(vocab_size=12, max_len=16, d_model=8, n_heads=2), partial(cls), True)
    assert net.blocks[0].attn.attend == net.blocks[0].attn.attend_fused
    assert net(torch.randint(0, 12, (2, 7))).isfinite().all()
    bias = net.pe.logit_bias(Positions.contiguous(3), 0)  # [1, 1, i, j]
    distance = torch.tensor([[0.0, 1, 2], [1, 0, 1], [2, 1, 0]])
    assert torch.allclose(bias[0, 0], -torch.log1p(distance))
    tests: dict = {}
    exec(compile(test, "test_log_bias.py", "exec"), tests)
    [example] = [f for name, f in tests.items() if name.startswith("test_")]
    example()  # the documented test passes on the documented module
    assert command.startswith("make test-encoding PE=log_bias")
    makefile = (DOC.parents[1] / "Makefile").read_text()
    assert "\ntest-encoding:" in makefile and '-k "$(PE)"' in makefile
