"""Named model sizes (``accounting.model_mfu.sizes``): what mutation testing found unchecked (issue 15).

The truth is the model torch builds from the size (on ``meta``: shapes only): its parameters'
shapes must show every override, and the MLP must stay 4 × the width it ends up with.
"""

import pytest
import torch

from accounting.errors import AccountingError, AccountingTypeError
from accounting.model_mfu.gpt import GPT
from accounting.model_mfu.sizes import MODEL_SIZES, model_size


def _shapes(size) -> dict:
    with torch.device("meta"):
        model = GPT(size.config)
    return {name: tuple(parameter.shape) for name, parameter in model.named_parameters()}


@pytest.mark.parametrize("overrides", [dict(width=32), dict(width=32, vocabulary=100), dict(layers=3, seq=16),
                                       dict(heads=2, vocabulary=50)])
def test_every_override_reaches_the_model_and_the_mlp_stays_four_times_the_width(overrides):
    base = MODEL_SIZES["tiny"].config
    shapes = _shapes(model_size("tiny", **overrides))
    width = overrides.get("width", base.width)
    vocabulary = overrides.get("vocabulary", base.vocabulary)
    assert shapes["token_embedding.weight"] == (vocabulary, width)
    assert shapes["position_embedding"] == (overrides.get("seq", base.sequence_length), width)
    assert shapes["blocks.0.up.weight"] == (4 * width, width) and shapes["blocks.0.down.weight"] == (width, 4 * width)
    assert sum(name.endswith(".up.weight") for name in shapes) == overrides.get("layers", base.layers)


@pytest.mark.parametrize("call, error, message", [
    pytest.param(lambda: model_size(3), AccountingTypeError, "model size must be a name such as 'tiny', got 3",
                 id="name-not-text"),
    pytest.param(lambda: model_size("tiny", layers=0), AccountingError, "layers must be a positive integer, got 0",
                 id="layers-0"),
    pytest.param(lambda: model_size("tiny", vocabulary=0), AccountingError,
                 "vocabulary must be a positive integer, got 0", id="vocabulary-0"),
])
def test_bad_sizes_are_named_with_their_value(call, error, message):
    with pytest.raises(error) as caught:
        call()
    assert str(caught.value) == message
