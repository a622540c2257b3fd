"""Bytes of tensors and storages, and the bit layout of floating-point formats.

A tensor's memory is its element count times its element size; several tensors
may look into one storage (views), and a storage is paid for once and whole.

>>> import torch
>>> from accounting import tensor_bytes, storage_bytes
>>> x = torch.zeros(4, 8)
>>> tensor_bytes(x), tensor_bytes(x.to(torch.bfloat16))
(128, 64)
>>> storage_bytes(x, x[0], x.T)  # three views, one 128-byte storage
128
"""

from dataclasses import dataclass

import torch
from jaxtyping import Shaped

from accounting.errors import AccountingError, AccountingTypeError

TF32 = "tf32"
"""Name of TensorFloat-32: a compute format (1+8+10 bits) used by tensor cores for float32 matmuls.
It is never stored: tensors stay float32 (4 bytes) in memory."""

# Formats known by name. Keys are canonical names; values are the torch dtype (None for tf32).
_FORMATS: dict[str, torch.dtype | None] = {
    "float64": torch.float64,
    "float32": torch.float32,
    TF32: None,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "float8_e4m3fn": torch.float8_e4m3fn,
    "float8_e5m2": torch.float8_e5m2,
    "float8_e4m3fnuz": torch.float8_e4m3fnuz,
    "float8_e5m2fnuz": torch.float8_e5m2fnuz,
}

_ALIASES = {
    "fp64": "float64", "double": "float64",
    "fp32": "float32", "float": "float32",
    "bf16": "bfloat16",
    "fp16": "float16", "half": "float16",
    "fp8": "float8_e4m3fn", "fp8_e4m3": "float8_e4m3fn", "e4m3": "float8_e4m3fn",
    "fp8_e5m2": "float8_e5m2", "e5m2": "float8_e5m2",
}


def format_name(spec) -> str:
    """Canonical name of a floating-point format given as a torch dtype or a name.

    Accepts torch dtypes, their names (``"bfloat16"``, ``"torch.bfloat16"``), common
    aliases (``"bf16"``, ``"fp8"`` = e4m3fn) and ``"tf32"``.

    >>> format_name("bf16"), format_name(torch.float8_e5m2)
    ('bfloat16', 'float8_e5m2')
    """
    if isinstance(spec, torch.dtype):
        name = str(spec).removeprefix("torch.")
    elif isinstance(spec, str):
        name = spec.strip().lower().removeprefix("torch.")
        name = _ALIASES.get(name, name)
    else:
        raise AccountingTypeError(f"expected a torch dtype or its name, got {spec!r}")
    if name not in _FORMATS:
        known = ", ".join(_FORMATS)
        raise AccountingError(f"unknown floating-point format {spec!r}; known: {known}")
    return name


def storage_dtype(spec) -> torch.dtype:
    """The torch dtype that holds values of a format in memory (float32 for tf32).

    >>> storage_dtype("tf32")
    torch.float32
    """
    name = format_name(spec)
    return _FORMATS[name] or torch.float32


@dataclass(frozen=True)
class DtypeInfo:
    """Bit layout and range of a floating-point format.

    ``bits`` counts the bits that carry the value (19 for tf32); ``storage_bytes`` is what
    one element occupies in memory (4 for tf32, which is stored as float32).
    """

    name: str
    bits: int
    sign_bits: int
    exponent_bits: int
    mantissa_bits: int
    storage_bytes: int
    max: float
    smallest_normal: float
    eps: float
    has_infinity: bool

    @property
    def min(self) -> float:
        """Most negative finite value (formats here are sign-magnitude)."""
        return -self.max

    @property
    def tiny(self) -> float:
        """Alias of ``smallest_normal``, as ``torch.finfo`` names it."""
        return self.smallest_normal


# (exponent bits, mantissa bits, special values) for each format:
# - "ieee": the all-ones exponent holds inf and NaN; bias 2**(e-1) - 1.
# - "fn" (finite, no infinities; float8_e4m3fn): the all-ones exponent holds ordinary numbers
#   except mantissa 111 there (NaN), so the top value is 1.75 * 2**8 = 448.
# - "fnuz" (finite, unsigned zero; AMD's gfx942 formats, arXiv 2206.02915): NaN is the
#   negative-zero pattern 0x80, every other pattern is a number, and the bias is 2**(e-1),
#   one above IEEE's: float8_e4m3fnuz tops out at 1.875 * 2**7 = 240.
_LAYOUTS = {
    "float64": (11, 52, "ieee"),
    "float32": (8, 23, "ieee"),
    TF32: (8, 10, "ieee"),
    "bfloat16": (8, 7, "ieee"),
    "float16": (5, 10, "ieee"),
    "float8_e4m3fn": (4, 3, "fn"),
    "float8_e5m2": (5, 2, "ieee"),
    "float8_e4m3fnuz": (4, 3, "fnuz"),
    "float8_e5m2fnuz": (5, 2, "fnuz"),
}


def dtype_info(spec) -> DtypeInfo:
    """Bits, range and precision of a floating-point format, derived from its bit layout.

    Agrees with ``torch.finfo`` for every dtype torch has, but one figure: torch's
    ``finfo(float8_e5m2fnuz).eps`` is 0.125 (c10's ``numeric_limits`` epsilon is the bit
    pattern 0x34), while that format's next value after 1 is 1.25 — ``eps`` here is 0.25,
    the spacing its two mantissa bits give. Also knows ``"tf32"``.

    >>> info = dtype_info("bf16")
    >>> info.sign_bits, info.exponent_bits, info.mantissa_bits, info.eps
    (1, 8, 7, 0.0078125)
    >>> dtype_info(torch.float8_e4m3fn).max, dtype_info(torch.float8_e4m3fnuz).max
    (448.0, 240.0)
    """
    name = format_name(spec)
    exponent_bits, mantissa_bits, specials = _LAYOUTS[name]
    has_infinity = specials == "ieee"
    bias = 2 ** (exponent_bits - 1) - (0 if specials == "fnuz" else 1)
    top_exponent = 2**exponent_bits - 1 - bias  # the all-ones exponent field, unbiased
    if specials == "ieee":
        # The all-ones exponent is reserved for inf/NaN, so the top exponent is one below it.
        top = (2 - 2.0**-mantissa_bits) * 2.0 ** (top_exponent - 1)
    elif specials == "fn":
        # All-ones exponent is usable; only the all-ones mantissa there is NaN.
        top = (2 - 2.0 ** (1 - mantissa_bits)) * 2.0**top_exponent
    else:
        # fnuz: every pattern but 0x80 is a number, the all-ones mantissa under the all-ones exponent too.
        top = (2 - 2.0**-mantissa_bits) * 2.0**top_exponent
    return DtypeInfo(
        name=name,
        bits=1 + exponent_bits + mantissa_bits,
        sign_bits=1,
        exponent_bits=exponent_bits,
        mantissa_bits=mantissa_bits,
        storage_bytes=storage_dtype(name).itemsize,
        max=top,
        smallest_normal=2.0 ** (1 - bias),
        eps=2.0**-mantissa_bits,
        has_infinity=has_infinity,
    )


def _require_tensor(value, what: str = "x") -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise AccountingTypeError(f"{what} must be a torch.Tensor, got {type(value).__name__}: {value!r}")
    return value


def tensor_bytes(x: Shaped[torch.Tensor, "..."]) -> int:
    """Bytes the elements of ``x`` take: ``numel * element_size``.

    A view reports the bytes of its own elements, not of the storage it looks into
    (see :func:`storage_bytes` for that).

    >>> tensor_bytes(torch.zeros(4, 8, dtype=torch.float16))
    64
    """
    x = _require_tensor(x)
    return x.numel() * x.element_size()


def storage_key(x: torch.Tensor):
    """A hashable identity of the storage behind ``x``: equal for views of one storage.

    >>> x = torch.arange(6)
    >>> storage_key(x) == storage_key(x[2:]), storage_key(x) == storage_key(x.clone())
    (True, False)
    """
    storage = _require_tensor(x).untyped_storage()
    pointer = storage.data_ptr()
    if pointer == 0:
        # Meta and empty storages have no address; the storage object itself identifies them.
        return ("storage", storage._cdata)
    return (str(x.device), pointer)


def storage_bytes(*tensors: Shaped[torch.Tensor, "..."]) -> int:
    """Bytes of the distinct storages behind ``tensors``, each counted once and whole.

    A slice keeps its whole base storage alive, so it costs the whole storage.

    >>> base = torch.zeros(10_000)
    >>> storage_bytes(base[:10]), storage_bytes(base, base[::2], base.view(100, 100))
    (40000, 40000)
    """
    sizes = {}
    for position, x in enumerate(tensors):
        x = _require_tensor(x, f"tensor {position}")
        sizes[storage_key(x)] = x.untyped_storage().nbytes()
    return sum(sizes.values())


def same_storage(a: Shaped[torch.Tensor, "..."], b: Shaped[torch.Tensor, "..."]) -> bool:
    """True when ``a`` and ``b`` look into the same storage (one is a view of the other, or both of a third).

    >>> x = torch.arange(6)
    >>> same_storage(x, x.view(2, 3)), same_storage(x, x.clone())
    (True, False)
    """
    return storage_key(_require_tensor(a, "a")) == storage_key(_require_tensor(b, "b"))
