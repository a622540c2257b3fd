"""Every timed product checked once, outside the timed region, and the checker's self-test (an injected fault).

A device that is fast but wrong is not healthy. The report's timer hands each shape it has
just timed to a :class:`ResultChecker`, which checks the last timed product (left in the case's output
buffer; fp8, which has none, runs the product again) with
:func:`accounting.health.results.check_case` (Freivalds' check against a worst-case rounding
bound, and a repeat check: two identical calls must give the same bits). The seconds the checks
take are kept per dtype, so the report can say what checking cost.

``--inject-fault DTYPE:SPEC`` is the checker's self-test: the first checked product of ``DTYPE``
large enough for the fault gets one element corrupted (``add:INDEX:DELTA``) or one bit flipped
(``flip:INDEX:BIT``), as :func:`accounting.health.faults.parse_fault` reads ``SPEC``; ``@CALL``
picks which of the check's two calls is corrupted (1, the default: the checked result; 2: its
repeat only). The report then says that dtype and the device failed, and where.

>>> injected = parse_injected_fault("bf16:flip:0:14")
>>> injected.dtype, injected.fault.kind, injected.fault.index, str(injected)
('bfloat16', 'flip', 0, 'bfloat16:flip:0:14')
>>> parse_injected_fault("bf16:flip:0:16")
Traceback (most recent call last):
...
accounting.errors.AccountingError: --inject-fault: bit 16 is outside a bfloat16 product's 16-bit elements, got 'bf16:flip:0:16'
"""

import time
import types
from dataclasses import dataclass, field

import torch

from accounting.errors import AccountingError, AccountingTypeError
from accounting.health.faults import Fault, faulty, parse_fault
from accounting.health.results import ResultCheck, check_case, check_product
from accounting.memory import format_name, storage_dtype
from accounting.timing import FP8_OUT_DTYPE

CHECK_CALLS = 2
"""Calls a check makes: the checked result (the last timed product where the case writes an output buffer,
else a new call), then its repeat (a new call, compared bit for bit)."""

_OUT_OF_MEMORY_TEXTS = ("out of memory", "cublas_status_alloc_failed", "hipblas_status_alloc_failed")


def output_dtype(dtype: str) -> torch.dtype:
    """The dtype a product in ``dtype`` writes (fp8 products write bfloat16).

    >>> output_dtype("float8_e4m3fn"), output_dtype("tf32")
    (torch.bfloat16, torch.float32)
    """
    name = format_name(dtype)
    return FP8_OUT_DTYPE if name.startswith("float8") else storage_dtype(name)


@dataclass(frozen=True)
class InjectedFault:
    """A fault for one dtype's first checked product: ``dtype`` (canonical name) and the ``fault``."""

    dtype: str
    fault: Fault
    text: str = ""

    def __str__(self) -> str:
        return f"{self.dtype}:{self.text}"


def parse_injected_fault(text: str) -> InjectedFault:
    """``DTYPE:SPEC`` (``bfloat16:flip:0:30``, ``fp32:add:17:1e3@2``): which dtype's product to corrupt, and how.

    Raises :class:`AccountingError` naming ``text`` for an unknown dtype, a malformed ``SPEC``, a bit
    outside the product's elements or a ``@CALL`` the check never makes.
    """
    if not isinstance(text, str):
        raise AccountingTypeError(f"--inject-fault must be text, got {text!r}")
    dtype, separator, spec = text.strip().partition(":")
    if not separator or not dtype:
        raise AccountingError(f"--inject-fault is DTYPE:flip:INDEX:BIT or DTYPE:add:INDEX:DELTA (optionally @CALL), "
                              f"got {text!r}")
    try:
        name = format_name(dtype)
    except AccountingError as error:
        raise AccountingError(f"--inject-fault: {error}") from None
    try:
        fault = parse_fault(spec)
    except AccountingError as error:
        raise AccountingError(f"--inject-fault: {error}") from None
    bits = torch.tensor([], dtype=output_dtype(name)).element_size() * 8
    if fault.kind == "flip" and fault.amount >= bits:
        raise AccountingError(f"--inject-fault: bit {fault.amount} is outside a {name} product's {bits}-bit elements, "
                              f"got {text!r}")
    if fault.call > CHECK_CALLS:
        raise AccountingError(f"--inject-fault: the check calls the product {CHECK_CALLS} times (1: the checked "
                              f"result, 2: its repeat), so @{fault.call} never fires, got {text!r}")
    return InjectedFault(name, fault, spec.strip())


def is_out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` is a device out of memory (torch's, or cuBLAS/hipBLAS failing to allocate)."""
    # torch.cuda.OutOfMemoryError, not the later alias torch.OutOfMemoryError: torch>=2.4 is allowed.
    text = str(error).lower()
    return isinstance(error, torch.cuda.OutOfMemoryError) or any(part in text for part in _OUT_OF_MEMORY_TEXTS)


def timed_first(case):
    """The calls a check makes of ``case``: its first is the product the timer left in ``case.output`` (the
    result that was timed, at no extra call), the next run ``case.fn()`` (the repeat); without an ``output``
    buffer every call runs ``case.fn()``.

    >>> out = torch.full((2, 2), 7.0)
    >>> calls = timed_first(types.SimpleNamespace(fn=lambda: out.fill_(1.0), output=out))
    >>> calls().tolist(), calls().tolist()
    ([[7.0, 7.0], [7.0, 7.0]], [[1.0, 1.0], [1.0, 1.0]])
    """
    output = getattr(case, "output", None)
    if output is None:
        return case.fn
    pending = [lambda: output.clone()]

    def calls():
        return pending.pop()() if pending else case.fn()

    return calls


@dataclass
class ResultChecker:
    """Checks products once each, outside the timed region, keeping the seconds per dtype.

    ``fault`` (an :class:`InjectedFault`) corrupts the first checked product of its dtype that has
    the fault's element; :attr:`injected` then says which (``{"dtype", "shape"}``). Checks that could not
    run (out of memory for the check's float64 passes) are listed in :attr:`skipped`, never taken as passed.

    >>> import types
    >>> a, b = torch.randn(32, 16), torch.randn(16, 8)
    >>> checker = ResultChecker(parse_injected_fault("float32:add:3:100"))
    >>> case = types.SimpleNamespace(fn=lambda: a @ b, operands=(a, b), dtype="float32", runs_as=None)
    >>> checker("float32", case).ok, checker.injected, checker("float32", case).ok
    (False, {'dtype': 'float32', 'shape': [32, 16, 8]}, True)
    """

    fault: InjectedFault | None = None
    clock: object = time.perf_counter
    seconds: dict = field(default_factory=dict)
    checked: dict = field(default_factory=dict)
    """Products checked per dtype."""
    injected: dict | None = None
    skipped: list = field(default_factory=list)

    def _fn(self, dtype: str, fn, shape):
        fault = self.fault
        if fault is None or self.injected is not None or fault.dtype != dtype:
            return fn
        m, _k, n = shape
        if fault.fault.index >= m * n:
            return fn  # too small for the fault's element: a later, larger product gets it
        self.injected = {"dtype": dtype, "shape": list(shape)}
        return faulty(fn, fault.fault)

    def __call__(self, dtype: str, case, *, timed: bool = False) -> ResultCheck | None:
        """Check ``case`` (a :class:`accounting.timing.MatmulCase`) of ``dtype``: its :class:`ResultCheck`, or ``None``
        when the check could not run (out of memory; listed in :attr:`skipped`). ``timed``: the case has just been
        run, so its output buffer holds a product to check (:func:`timed_first`); otherwise every call is new."""
        a, b = case.operands[0], case.operands[1]
        shape = (a.shape[0], a.shape[1], b.shape[1])
        checked = types.SimpleNamespace(fn=self._fn(dtype, timed_first(case) if timed else case.fn, shape), operands=case.operands,
                                        dtype=case.dtype, runs_as=getattr(case, "runs_as", None),
                                        accumulation=getattr(case, "accumulation", None))
        started = self.clock()
        try:
            result = check_case(checked)
        except RuntimeError as error:
            if not is_out_of_memory(error):
                raise
            self.skipped.append(f"{dtype} {'x'.join(map(str, shape))}: not checked, out of memory for the check")
            result = None
        else:
            self.checked[dtype] = self.checked.get(dtype, 0) + 1
        finally:
            self.seconds[dtype] = self.seconds.get(dtype, 0.0) + self.clock() - started
        return result


def check_result(case, result: torch.Tensor, *, repeat_identical: bool | None = None) -> ResultCheck:
    """Freivalds' check of ``result``, a product ``case`` computed (fp8 scales and the dtype that ran taken from
    the case, and an fp8 case's accumulation, which picks its bound), with ``repeat_identical`` passed through (the
    sustained phase's bitwise comparison)."""
    name = format_name(getattr(case, "runs_as", None) or case.dtype)
    fp8 = name.startswith("float8")
    scales = case.operands[2:4] if fp8 else (None, None)
    return check_product(case.operands[0], case.operands[1], result, scale_a=scales[0], scale_b=scales[1], dtype=name,
                         repeat_identical=repeat_identical,
                         accumulation=getattr(case, "accumulation", None) if fp8 else None)
