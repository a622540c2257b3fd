"""Model FLOPs and napkin training time (``accounting.transformer_flops``): what mutation testing found unchecked (issue 15).

The truths: ``FlopCounterMode`` on the reference GPT (one sequence when no batch is given); the
definition of the training time (FLOPs over devices × peak × MFU); and messages that name the
offending argument.
"""

import pytest

from accounting import TransformerConfig, training_flops, training_time, transformer_flops
from accounting.errors import AccountingError, AccountingTypeError
from tests.test_model_flops import counted_step

TINY = TransformerConfig(layers=1, width=16, heads=2, sequence_length=8, vocabulary=32)


def test_without_a_batch_size_one_sequence_is_counted():
    forward, backward = counted_step(TINY, 1)
    flops = transformer_flops(TINY)
    assert (flops.forward, flops.backward) == (forward.get_total_flops(), backward.get_total_flops())
    assert flops.tokens == TINY.sequence_length


def test_without_devices_or_mfu_the_time_is_one_device_at_half_its_peak():
    flops, peak = 6.3e24, 989.4e12
    assert training_time(flops, peak).seconds == pytest.approx(flops / (1 * peak * 0.5), rel=1e-12)


@pytest.mark.parametrize("devices, words", [(1, " on 1 device of "), (2, " on 2 devices of "), (8, " on 8 devices of ")])
def test_the_summary_says_device_or_devices_as_the_count_needs(devices, words):
    assert words in str(training_time(6.3e24, 989.4e12, devices=devices))


@pytest.mark.parametrize("call, error, message", [
    pytest.param(lambda: training_time(1e21, 1e15, mfu=0), AccountingError, "mfu must be positive, got 0", id="mfu-0"),
    pytest.param(lambda: training_time(1e21, 1e15, mfu=-0.3), AccountingError, "mfu must be positive, got -0.3",
                 id="mfu-negative"),
    pytest.param(lambda: training_flops(-7e9, 1e12), AccountingError, "parameters must be non-negative, got -7000000000.0",
                 id="negative-float-parameters"),
    pytest.param(lambda: training_flops(7e9, -1e12), AccountingError, "tokens must be non-negative, got -1000000000000.0",
                 id="negative-float-tokens"),
    pytest.param(lambda: transformer_flops(TINY, embeddings="yes"), AccountingTypeError,
                 "embeddings must be True or False, got 'yes'", id="embeddings-not-bool"),
])
def test_bad_arguments_are_named_with_their_value(call, error, message):
    with pytest.raises(error) as caught:
        call()
    assert str(caught.value) == message
