"""Fixtures shared by the test files of more than one subject (helpers and fakes are in ``tests/support/``)."""

import json

import pytest
import torch

from tests.support.tf32_flags import set_tf32_state, tf32_state


@pytest.fixture
def tf32_restored():
    """Whatever a test does to the TF32 flags, the next test starts from the state before it."""
    if not hasattr(torch._C, "_get_fp32_precision_getter"):
        yield
        return
    before = tf32_state()
    yield
    set_tf32_state(before)


@pytest.fixture
def config_file(tmp_path):
    """Write a Hugging Face ``config.json`` (a dict) under the test's directory and return its path, as
    ``plan --config`` reads it."""
    def write(document: dict, name: str = "config.json") -> str:
        path = tmp_path / name
        path.write_text(json.dumps(document))
        return str(path)
    return write
