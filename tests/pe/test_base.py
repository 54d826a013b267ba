import pytest

from pelab.errors import ConfigError
from pelab.pe import PE_REGISTRY, ModelDims, PositionalEncoding, register_pe


def dims(position_dims: int) -> ModelDims:
    return ModelDims(16, 2, 1, True, 32, 10, position_dims)


def test_a_1d_encoding_on_2d_positions_names_the_encodings_that_fit():
    with pytest.raises(ConfigError, match=r"pe=rope reads 1-D positions .* 2-D .* none"):
        PE_REGISTRY["rope"](dims(2))


@pytest.mark.parametrize("name", ["none", "cope"])
def test_encodings_that_read_no_positions_accept_any_task(name):
    pe = PE_REGISTRY[name](dims(2))  # no error
    assert pe.position_dims is None and pe.dims.position_dims == 2


@pytest.mark.parametrize("shift", [None, "shifty"])
def test_registering_an_encoding_without_a_valid_shift_class_is_refused(shift):
    class Unclassified(PositionalEncoding):
        pass

    if shift is not None:
        Unclassified.shift = shift
    with pytest.raises(ValueError, match=rf"'unclassified' declares shift={shift!r}.*relative"):
        register_pe("unclassified")(Unclassified)
    assert "unclassified" not in PE_REGISTRY


@pytest.mark.parametrize(("name", "eager"), [("shaw", True), ("urpe", True), ("alibi", False)])
def test_the_kernel_question_is_answered_for_a_class_and_for_an_instance(name, eager):
    cls = PE_REGISTRY[name]
    assert cls.needs_eager_attention() == eager
    assert cls(dims(1)).needs_eager_attention() == eager
