"""Choices typed ``Literal``: a value the type does not list is refused with one message, naming
the key, the value and the choices, from a config (``check_types``, before anything is built)
and from a constructor call (``pelab.errors.choices_checked``) alike."""

import typing

import pytest

from pelab.errors import ConfigError, choices_checked, literal_choices, not_a_choice
from pelab.pe import PE_REGISTRY, ModelDims
from pelab.pe.kerple import KERNELS, KernelName
from pelab.pe.rotary import LAYOUTS, RotaryLayout
from pelab.reliability.checks.validate import check_types
from pelab.tasks import TASK_REGISTRY
from pelab.tasks.grid import REFERENCES, SOLVERS, GridMode
from tests.conftest import compose_config

DIMS = ModelDims(d_model=16, n_heads=2, n_layers=1, causal=True, max_len=32)


def literal_options(cls: type) -> dict[str, tuple]:
    hints = typing.get_type_hints(cls.__init__)
    return {name: valid for name, hint in hints.items() if (valid := literal_choices(hint))}


OPTIONS = [
    pytest.param(section, name, option, valid, id=f"{section}={name}-{option}")
    for section, registry in (("pe", PE_REGISTRY), ("task", TASK_REGISTRY))
    for name, cls in sorted(registry.items())
    for option, valid in literal_options(cls).items()
]


def test_the_choices_are_found():
    found = {(p.values[0], p.values[1], p.values[2]) for p in OPTIONS}
    assert {
        ("pe", "rope", "layout"),
        ("pe", "kerple", "kernel"),
        ("task", "grid", "mode"),
    } <= found


@pytest.mark.parametrize(("section", "name", "option", "valid"), OPTIONS)
def test_a_value_outside_the_choices_is_refused_by_the_constructor_and_the_config(
    section, name, option, valid, tmp_path
):
    message = f"{section}.{option}='bogus' is not a choice; valid choices: {', '.join(valid)}"
    registry = PE_REGISTRY if section == "pe" else TASK_REGISTRY
    with pytest.raises(ConfigError) as constructed:
        registry[name](*([DIMS] if section == "pe" else []), **{option: "bogus"})
    assert str(constructed.value) == message
    cfg = compose_config([f"{section}={name}", f"{section}.{option}=bogus"], tmp_path)
    with pytest.raises(ConfigError) as configured:
        check_types(cfg, [])
    assert str(configured.value) == message


def test_a_table_keyed_by_the_choices_holds_each_of_them():
    for choices, table in ((KernelName, KERNELS), (RotaryLayout, LAYOUTS), (GridMode, SOLVERS)):
        assert typing.get_args(choices) == tuple(table)
    assert tuple(REFERENCES) == tuple(SOLVERS)


def test_the_message_writes_the_choices_as_yaml_does():
    assert literal_choices(typing.Literal["a", "b"] | None) == ("a", "b", None)
    assert literal_choices(typing.Literal["a"] | int) == ()
    error = not_a_choice("x.y", "c", ("a", None, True))
    assert str(error) == "x.y='c' is not a choice; valid choices: a, null, true"


def test_a_checked_function_leaves_a_wrong_call_to_python():
    @choices_checked("f")
    def f(mode: typing.Literal["a", "b"] = "a") -> str:
        return mode

    assert f("b") == "b" and f.__wrapped__("z") == "z"
    with pytest.raises(ConfigError, match="f.mode='z' is not a choice; valid choices: a, b"):
        f(mode="z")
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        f(other=1)
