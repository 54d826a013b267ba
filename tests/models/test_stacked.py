"""The stacked layers at K = 1 are their ``torch.nn`` namesakes bit for bit (``stacked.py``'s
promise): the same initial draws, and with the same weights the same forward and the same
gradients of input and weights."""

import pytest
import torch
from torch import nn

from pelab.models import stacked

# (stacked layer, its torch.nn namesake, an input of the layer): small shapes, one member
LAYERS = {
    "Linear": (lambda: stacked.Linear(12, 20), lambda: nn.Linear(12, 20), (3, 5, 12)),
    "Linear without bias": (
        lambda: stacked.Linear(12, 20, bias=False),
        lambda: nn.Linear(12, 20, bias=False),
        (3, 5, 12),
    ),
    "LayerNorm": (lambda: stacked.LayerNorm(12), lambda: nn.LayerNorm(12), (3, 5, 12)),
    "Embedding": (lambda: stacked.Embedding(17, 12), lambda: nn.Embedding(17, 12), (3, 5)),
}


def test_every_stacked_layer_is_pinned():
    classes = {c for c in vars(stacked).values() if isinstance(c, type)}
    defined = {c for c in classes if issubclass(c, stacked.Stacked)} - {stacked.Stacked}
    assert defined == {type(make()) for make, _, _ in LAYERS.values()}


@pytest.mark.parametrize("name", LAYERS)
def test_a_layer_draws_its_namesakes_initial_weights(name):
    make, make_reference, _ = LAYERS[name]
    torch.manual_seed(0)
    layer = make()
    torch.manual_seed(0)
    reference = make_reference()
    assert layer.state_dict().keys() == reference.state_dict().keys()
    for key, value in reference.state_dict().items():
        assert layer.state_dict()[key].shape == (1, *value.shape)  # [K = 1, ...]
        assert torch.equal(layer.state_dict()[key][0], value), key


@pytest.mark.parametrize("name", LAYERS)
def test_a_layer_computes_its_namesakes_forward_and_gradients(name):
    make, make_reference, shape = LAYERS[name]
    torch.manual_seed(1)
    reference = make_reference()
    if isinstance(reference, nn.LayerNorm):  # not its initial ones and zeros
        nn.init.normal_(reference.weight)
        nn.init.normal_(reference.bias)
    layer = make()
    layer.load_state_dict(reference.state_dict())  # a single run's weights: member 0's
    if isinstance(reference, nn.Embedding):
        inputs = [torch.randint(0, reference.num_embeddings, shape)]
    else:
        x = torch.randn(shape)
        inputs = [x.clone().requires_grad_(), x.clone().requires_grad_()]
    out, expected = layer(inputs[0]), reference(inputs[-1])
    assert torch.equal(out, expected)
    upstream = torch.randn(expected.shape)
    out.backward(upstream)
    expected.backward(upstream)
    if len(inputs) == 2:
        assert torch.equal(inputs[0].grad, inputs[1].grad)
    for key, p in reference.named_parameters():
        assert torch.equal(getattr(layer, key).grad[0], p.grad), key


def test_a_linear_layers_rows_are_its_namesakes_rows():
    """``rows`` (the queries of a fused q/k/v projection): the namesake's rows of weight and
    bias."""
    torch.manual_seed(2)
    reference = nn.Linear(12, 18)
    layer = stacked.Linear(12, 18)
    layer.load_state_dict(reference.state_dict())
    x = torch.randn(3, 5, 12)
    rows = slice(6, 12)
    expected = nn.functional.linear(x, reference.weight[rows], reference.bias[rows])
    assert torch.equal(layer(x, rows), expected)


@pytest.mark.parametrize(
    ("name", "rows"),
    [(name, None) for name in LAYERS]
    + [(name, slice(4, 10)) for name in ("Linear", "Linear without bias")],
)
def test_a_stack_of_k_gives_each_member_its_namesakes_forward_and_gradients(name, rows):
    """K = 3 members, each with its own weights, on its own rows of the folded batch: each
    member's output and the gradients of its input and weights are its namesake's (the stacked
    operations' own backward included: ``_MemberLinear``, ``_MemberAffine``). ``rows``: a
    Linear's output features of a fused projection."""
    make, make_reference, shape = LAYERS[name]
    torch.manual_seed(3)
    references = [make_reference() for _ in range(3)]
    for reference in references:
        for p in reference.parameters():
            nn.init.normal_(p)
    layers = []
    for reference in references:
        layer = make()
        layer.load_state_dict(reference.state_dict())
        layers.append(layer)
    stack = stacked.stack_members(layers)
    if isinstance(references[0], nn.Embedding):
        inputs = [torch.randint(0, 17, shape) for _ in references]
        folded = torch.cat(inputs)
    else:
        inputs = [torch.randn(shape, requires_grad=True) for _ in references]
        folded = torch.cat([x.detach() for x in inputs]).requires_grad_()
    out = stack(folded) if rows is None else stack(folded, rows)
    upstream = torch.randn(out.shape)
    out.backward(upstream)
    for k, (reference, x) in enumerate(zip(references, inputs, strict=True)):
        mine = slice(k * shape[0], (k + 1) * shape[0])
        if rows is None:
            expected = reference(x)
        else:
            bias = None if reference.bias is None else reference.bias[rows]
            expected = nn.functional.linear(x, reference.weight[rows], bias)
        torch.testing.assert_close(out[mine], expected)
        expected.backward(upstream[mine])
        if x.is_floating_point():
            torch.testing.assert_close(folded.grad[mine], x.grad)
        for key, p in reference.named_parameters():
            torch.testing.assert_close(getattr(stack, key).grad[k], p.grad, msg=key)
