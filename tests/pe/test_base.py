import pytest

from pelab.errors import ConfigError
from pelab.pe import PE_REGISTRY, ModelDims


def dims(position_dims: int) -> ModelDims:
    return ModelDims(16, 2, 1, True, 32, 10, position_dims)


def test_a_1d_encoding_on_2d_positions_names_the_encodings_that_fit():
    with pytest.raises(ConfigError, match=r"pe=rope reads 1-D positions .* 2-D .* none"):
        PE_REGISTRY["rope"](dims(2))


@pytest.mark.parametrize("name", ["none", "cope"])
def test_encodings_that_read_no_positions_accept_any_task(name):
    pe = PE_REGISTRY[name](dims(2))  # no error
    assert pe.position_dims is None and pe.dims.position_dims == 2
