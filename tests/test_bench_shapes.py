"""A configured shape kept where it fits, shrunk to the device's free memory, or skipped when even that fails."""

import pytest

from accounting.bench import shapes
from accounting.bench.shapes import fitted_shape, plan_shape


def test_a_shape_that_fits_is_kept():
    assert plan_shape((8192, 8192, 8192), "bf16", 80 * 2**30) == ((8192, 8192, 8192), "")


def test_a_shape_is_shrunk_to_the_faked_free_memory(monkeypatch):
    monkeypatch.setattr(shapes, "free_memory_bytes", lambda device: 2**29)  # 0.5 GiB "free"
    shape, note = fitted_shape((16384, 16384, 16384), "float32", "cpu")
    assert shape == (4096, 4096, 4096)  # 3 × 64 MiB fits 0.8 × 512 MiB; 8192 (3 × 256 MiB) does not
    assert note == "shrunk from 16384x16384x16384 to fit 0.5 GiB free"


def test_a_shape_that_cannot_fit_is_skipped_not_crashed(monkeypatch):
    monkeypatch.setattr(shapes, "free_memory_bytes", lambda device: 2**18)  # 256 KiB "free": not even 256³ bf16 (384 KiB)
    with pytest.raises(pytest.skip.Exception, match=r"^8192x8192x8192 bfloat16 does not fit 0.0 GiB free, even shrunk"):
        fitted_shape((8192, 8192, 8192), "bf16", "cpu")
