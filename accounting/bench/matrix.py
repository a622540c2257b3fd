"""The benchmark matrix in ``benchmarks.json``: shapes, dtypes, MFU floors and the regression gate.

One section per device kind (``cpu``, ``cuda``) and a ``regression`` section::

    {"regression": {"metric": "median", "threshold_percent": 10,
                    "per_kind": {"cuda": 5}, "per_benchmark": {"test_cpu_matmul[float16-1024x1024x1024]": 20}},
     "cpu": {"dtypes": ["float32"], "shapes": [[1024, 1024, 1024]], "quick_shapes": [[512, 512, 512]],
             "floors": {"float32": 0.3}, "rounds": 10, "min_time_s": 1.5}}

``rounds`` are the timed rounds of each benchmark at least; ``min_time_s`` (optional, 0 when
absent) asks for more until the rounds fill that many seconds (:func:`accounting.timing.rounds_for`).

An optional ``model`` section holds the training-step benchmark
(:mod:`accounting.model_mfu`) per device kind: the named ``size`` and ``quick_size``, the
precision policies to run, a model-MFU floor per policy and the rounds::

    "model": {"cpu": {"size": "small", "quick_size": "tiny", "precisions": ["fp32"],
                      "floors": {"fp32": 0.01}, "rounds": 3}}

Optional per kind: ``fallback_size``, the size to run where ``size`` does not fit the device even at batch 1,
and ``sizes``, per named size its own ``precisions``, ``floors`` and ``chip_floors`` (keyed as the matmul
sections' are), overriding the kind's for that size.

``floors`` are MFU floors per dtype; ``chip_floors`` (optional) override them per chip,
keyed by the peak table's row name (``"MI300X"``; any other key is an error). A
section that lists a float8 dtype needs every shape's K and N divisible by 16
(``torch._scaled_mm``). Keys starting with ``_`` are notes
(JSON has no comments) and are kept, not checked. The file is validated as it is
loaded: every error names the entry, e.g. ``cuda.floors.bfloat16``.

An optional ``fleet`` section holds what the fleet command compares across ranks
(:mod:`accounting.bench.fleet_settings`); the entry checks shared by the sections are in
:mod:`accounting.bench.document_checks`.

``regression.threshold_percent`` is the smallest slowdown the regression gate
(:mod:`accounting.gate`) calls a regression; ``per_kind`` overrides it per device kind,
``per_benchmark`` per benchmark (its pytest-benchmark ``name`` or ``fullname``, the node id).

>>> config = parse_benchmarks({
...     "regression": {"metric": "median", "threshold_percent": 10},
...     "cpu": {"dtypes": ["fp32"], "shapes": [[256, 128, 64]], "floors": {"fp32": 0.25}},
... })
>>> config.device("cpu").dtypes, config.floor("cpu", "float32"), config.compare_fail
(('float32',), 0.25, 'median:10%')
"""

import json
import numbers
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from accounting.bench.document_checks import check_keys, fail, mapping
from accounting.bench.fleet_settings import (  # noqa: F401 (the fleet's names, importable from here as before)
    DEFAULT_BUSY_CPU_SHARE,
    DEFAULT_FIGURE_FRACTIONS,
    DEFAULT_STRAGGLER_FRACTION,
    FLEET_COLLECTIVES,
    FLEET_FIGURES,
    FLEET_SCOPES,
    FleetSettings,
    parse_fleet,
)
from accounting.errors import AccountingError
from accounting.hardware.native import kind_reason
from accounting.hardware.peaks import CHIP_ROWS, find_chip
from accounting.memory import format_name
from accounting.model_mfu.sizes import MODEL_SIZES
from accounting.model_mfu.step import STEP_POLICIES
from accounting.timing import FP8_ALIGNMENT

BENCHMARKS_ENV = "ACCOUNTING_BENCHMARKS"
"""Environment variable naming the benchmarks file to load instead of the default."""
BENCHMARKS_FILE = "benchmarks.json"
KINDS = ("cpu", "cuda")
METRICS = ("min", "max", "mean", "median", "stddev", "iqr")
"""Statistics ``--benchmark-compare-fail`` accepts."""
DEFAULT_ROUNDS = 10
MAX_MIN_TIME_S = 60.0
"""The most ``min_time_s`` may ask of one benchmark: a minute of rounds (a larger value is a typo)."""
_KIND_KEYS = {"dtypes", "shapes", "quick_shapes", "floors", "chip_floors", "rounds", "min_time_s"}
_REGRESSION_KEYS = {"metric", "threshold_percent", "per_kind", "per_benchmark"}
_MODEL_KEYS = {"size", "quick_size", "precisions", "floors", "rounds", "fallback_size", "sizes"}
_MODEL_SIZE_KEYS = {"precisions", "floors", "chip_floors"}


@dataclass(frozen=True)
class DeviceMatrix:
    """What to benchmark on one kind of device."""

    kind: str
    dtypes: tuple[str, ...]
    shapes: tuple[tuple[int, int, int], ...]
    quick_shapes: tuple[tuple[int, int, int], ...]
    floors: dict = field(default_factory=dict)
    chip_floors: dict = field(default_factory=dict)
    rounds: int = DEFAULT_ROUNDS
    min_time_s: float = 0.0
    """Seconds the timed rounds should fill at least (more rounds than ``rounds`` for fast shapes)."""


@dataclass(frozen=True)
class ModelMatrix:
    """The training-step benchmark on one kind of device: sizes by name, policies, model-MFU floors."""

    kind: str
    size: str
    quick_size: str
    precisions: tuple[str, ...]
    floors: dict = field(default_factory=dict)
    rounds: int = DEFAULT_ROUNDS
    fallback_size: str | None = None
    sizes: dict = field(default_factory=dict)
    """Size name -> :class:`ModelSizeMatrix`: that size's own policies and floors."""

    def precisions_of(self, size: str) -> tuple[str, ...]:
        """The policies ``size`` runs: its own list, else the kind's."""
        own = self.sizes.get(size)
        return own.precisions if own is not None and own.precisions else self.precisions


@dataclass(frozen=True)
class ModelSizeMatrix:
    """One size's overrides: policies (empty: the kind's), floors per policy, and per chip."""

    precisions: tuple[str, ...] = ()
    floors: dict = field(default_factory=dict)
    chip_floors: dict = field(default_factory=dict)


@dataclass(frozen=True)
class BenchConfig:
    """A validated ``benchmarks.json``."""

    devices: dict
    regression_metric: str
    regression_threshold_percent: float
    source: str = BENCHMARKS_FILE
    fleet: FleetSettings = field(default_factory=FleetSettings)
    regression_per_kind: dict = field(default_factory=dict)
    """Device kind -> threshold percent, overriding ``regression_threshold_percent``."""
    regression_per_benchmark: dict = field(default_factory=dict)
    """Benchmark name or fullname -> threshold percent, overriding both."""
    models: dict = field(default_factory=dict)

    def device(self, kind: str) -> DeviceMatrix:
        """The matrix for ``"cpu"`` or ``"cuda"``."""
        if kind not in self.devices:
            raise AccountingError(f"{self.source} has no {kind!r} section; it has {', '.join(self.devices) or 'none'}")
        return self.devices[kind]

    def floor(self, kind: str, dtype, chip: str | None = None) -> float:
        """The MFU floor for ``dtype`` on ``kind``; ``chip`` (a table row or a device name) may override it.

        >>> config = parse_benchmarks({"regression": {"metric": "median", "threshold_percent": 5},
        ...     "cuda": {"dtypes": ["bf16"], "shapes": [[8192, 8192, 8192]], "floors": {"bf16": 0.6},
        ...              "chip_floors": {"MI300X": {"bf16": 0.4}}}})
        >>> config.floor("cuda", "bf16"), config.floor("cuda", "bf16", chip="AMD Instinct MI300X")
        (0.6, 0.4)
        """
        matrix = self.device(kind)
        name = format_name(dtype)
        if name not in matrix.floors:
            raise AccountingError(f"{self.source}: {kind}.floors has no floor for {name}")
        if chip is not None:
            row = chip if chip in matrix.chip_floors else _chip_row(chip)
            if row in matrix.chip_floors and name in matrix.chip_floors[row]:
                return matrix.chip_floors[row][name]
        return matrix.floors[name]

    def regression_threshold(self, kind: str | None = None, benchmark: str | None = None) -> float:
        """The regression threshold in percent for ``benchmark`` (a fullname) on device ``kind``.

        A ``per_benchmark`` entry matches the fullname (node id) or the name after its last ``::``.

        >>> config = parse_benchmarks({"regression": {"metric": "median", "threshold_percent": 10,
        ...     "per_kind": {"cuda": 5}, "per_benchmark": {"test_mm[bf16]": 20}},
        ...     "cpu": {"dtypes": ["fp32"], "shapes": [[64, 64, 64]], "floors": {"fp32": 0.1}}})
        >>> config.regression_threshold("cpu"), config.regression_threshold("cuda", "tests/t.py::test_mm[fp32]")
        (10.0, 5.0)
        >>> config.regression_threshold("cuda", "tests/t.py::test_mm[bf16]")
        20.0
        """
        if benchmark is not None:
            for key in (benchmark, benchmark.rsplit("::", 1)[-1]):
                if key in self.regression_per_benchmark:
                    return self.regression_per_benchmark[key]
        return self.regression_per_kind.get(kind, self.regression_threshold_percent)

    def model(self, kind: str) -> ModelMatrix:
        """The training-step benchmark for ``"cpu"`` or ``"cuda"``."""
        if kind not in self.models:
            raise AccountingError(f"{self.source} has no model.{kind} section; it has "
                                  f"{', '.join(f'model.{k}' for k in self.models) or 'no model section'}")
        return self.models[kind]

    def model_floor(self, kind: str, precision: str, size: str | None = None, chip: str | None = None) -> float:
        """The model-MFU floor of a precision policy on ``kind``: the size's floor on this chip (a table row or a
        device name), else the size's, else the kind's.

        >>> config = parse_benchmarks({"regression": {"metric": "median", "threshold_percent": 5},
        ...     "cpu": {"dtypes": ["fp32"], "shapes": [[64, 64, 64]], "floors": {"fp32": 0.1}},
        ...     "model": {"cpu": {"size": "small", "quick_size": "tiny", "precisions": ["fp32"],
        ...                       "floors": {"fp32": 0.02}}}})
        >>> config.model_floor("cpu", "fp32"), config.model("cpu").size
        (0.02, 'small')
        """
        matrix = self.model(kind)
        own = matrix.sizes.get(size)
        if own is not None:
            row = None if chip is None else (chip if chip in own.chip_floors else _chip_row(chip))
            for table in (own.chip_floors.get(row, {}), own.floors):
                if precision in table:
                    return table[precision]
        if precision not in matrix.floors:
            raise AccountingError(f"{self.source}: model.{kind}.floors has no floor for {precision}")
        return matrix.floors[precision]

    @property
    def compare_fail(self) -> str:
        """The ``--benchmark-compare-fail`` expression, e.g. ``median:10%``."""
        return f"{self.regression_metric}:{self.regression_threshold_percent:g}%"


def _chip_row(device_name: str) -> str | None:
    chip = find_chip(device_name)
    return chip.row if chip else None


# ---- validation (the helpers: accounting.bench.document_checks) ------------------------------------


def _dtype(value, kind, source, where) -> str:
    try:
        name = format_name(value)
    except AccountingError:
        fail(source, where, f"has unknown dtype {value!r}")
    reason = kind_reason(kind, name)  # the kind-wide part of native_dtypes' rule: a section is for any such device
    if reason:  # only a CPU refuses a format (tf32, float8): those belong in the cuda section
        fail(source, where, f"has dtype {value!r}, which a CPU cannot run: {reason}; list it under cuda")
    return name


def _shapes(value, source, where, *, required) -> tuple:
    if value is None and not required:
        return ()
    if not isinstance(value, list) or (required and not value):
        fail(source, where, f"must be a non-empty list of [m, k, n] shapes, got {value!r}")
    shapes = []
    for position, shape in enumerate(value):
        if not isinstance(shape, list) or len(shape) != 3:
            fail(source, f"{where}[{position}]", f"must be [m, k, n], got {shape!r}")
        for size in shape:
            if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
                fail(source, f"{where}[{position}]", f"= {shape!r}: sizes must be positive integers, got {size!r}")
        shapes.append(tuple(shape))
    return tuple(shapes)


def _check_fp8_alignment(shapes, dtypes, source, where):
    """float8 runs through ``torch._scaled_mm``, which needs K and N divisible by ``FP8_ALIGNMENT``."""
    fp8 = [name for name in dtypes if name.startswith("float8")]
    if not fp8:
        return
    for position, (m, k, n) in enumerate(shapes):
        if k % FP8_ALIGNMENT or n % FP8_ALIGNMENT:
            fail(source, f"{where}[{position}]",
                  f"= {[m, k, n]!r}: {fp8[0]} (torch._scaled_mm) needs k and n divisible by {FP8_ALIGNMENT}")


def _chip(key: str, source, where) -> str:
    """A ``chip_floors`` key: a row of the peak table, exactly."""
    if key not in CHIP_ROWS:
        chip = find_chip(key)
        hint = f" (did you mean {chip.row!r}?)" if chip is not None else ""
        fail(source, where, f"is not a row of the peak table{hint}; rows: {', '.join(CHIP_ROWS)}")
    return key


def _floor(value, source, where) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < value <= 1:
        fail(source, where, f"= {value!r}: an MFU floor must be a number in (0, 1]")
    return float(value)


def _floors(value, dtypes, kind, source, where) -> dict:
    floors = {}
    for key, floor in mapping(value, source, where).items():
        if key.startswith("_"):
            continue
        name = _dtype(key, kind, source, f"{where}.{key}")
        if name not in dtypes:
            fail(source, f"{where}.{key}", f"is a floor for {name}, which {kind}.dtypes does not list")
        floors[name] = _floor(floor, source, f"{where}.{key}")
    return floors


def _kind(kind: str, value, source: str) -> DeviceMatrix:
    value = mapping(value, source, kind)
    check_keys(value, _KIND_KEYS, source, kind)
    dtypes = value.get("dtypes")
    if not isinstance(dtypes, list) or not dtypes:
        fail(source, f"{kind}.dtypes", f"must be a non-empty list of dtype names, got {dtypes!r}")
    names = tuple(_dtype(dtype, kind, source, f"{kind}.dtypes[{i}]") for i, dtype in enumerate(dtypes))
    shapes = _shapes(value.get("shapes"), source, f"{kind}.shapes", required=True)
    quick_given = _shapes(value.get("quick_shapes"), source, f"{kind}.quick_shapes", required=False)
    _check_fp8_alignment(shapes, names, source, f"{kind}.shapes")
    _check_fp8_alignment(quick_given, names, source, f"{kind}.quick_shapes")
    quick = quick_given or shapes[:1]
    floors = _floors(value.get("floors", {}), names, kind, source, f"{kind}.floors")
    missing = [name for name in names if name not in floors]
    if missing:
        fail(source, f"{kind}.floors", f"has no floor for {', '.join(missing)}")
    chip_floors = {}
    for chip, table in mapping(value.get("chip_floors", {}), source, f"{kind}.chip_floors").items():
        if not chip.startswith("_"):
            where = f"{kind}.chip_floors.{chip}"
            chip_floors[_chip(chip, source, where)] = _floors(table, names, kind, source, where)
    rounds = value.get("rounds", DEFAULT_ROUNDS)
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds <= 0:
        fail(source, f"{kind}.rounds", f"= {rounds!r}: must be a positive integer")
    min_time = value.get("min_time_s", 0.0)
    if isinstance(min_time, bool) or not isinstance(min_time, numbers.Real) or not 0 <= min_time <= MAX_MIN_TIME_S:
        fail(source, f"{kind}.min_time_s", f"= {min_time!r}: must be a number of seconds in [0, {MAX_MIN_TIME_S:g}]")
    return DeviceMatrix(kind, names, shapes, quick, floors, chip_floors, rounds, float(min_time))


def _model_kind(kind: str, value, source: str) -> ModelMatrix:
    where = f"model.{kind}"
    value = mapping(value, source, where)
    check_keys(value, _MODEL_KEYS, source, where)
    sizes = {}
    for key in ("size", "quick_size"):
        name = value.get(key)
        if name not in MODEL_SIZES:
            fail(source, f"{where}.{key}", f"= {name!r}: must be one of {', '.join(MODEL_SIZES)}")
        sizes[key] = name
    precisions = value.get("precisions")
    if not isinstance(precisions, list) or not precisions:
        fail(source, f"{where}.precisions", f"must be a non-empty list of precision policies, got {precisions!r}")
    _check_policies(precisions, source, f"{where}.precisions")
    floors = {}
    for key, floor in mapping(value.get("floors", {}), source, f"{where}.floors").items():
        if key.startswith("_"):
            continue
        if key not in precisions:
            fail(source, f"{where}.floors.{key}", f"is a floor for {key!r}, which {where}.precisions does not list")
        floors[key] = _floor(floor, source, f"{where}.floors.{key}")
    missing = [name for name in precisions if name not in floors]
    if missing:
        fail(source, f"{where}.floors", f"has no floor for {', '.join(missing)}")
    rounds = value.get("rounds", DEFAULT_ROUNDS)
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds <= 0:
        fail(source, f"{where}.rounds", f"= {rounds!r}: must be a positive integer")
    fallback = value.get("fallback_size")
    if fallback is not None and fallback not in MODEL_SIZES:
        fail(source, f"{where}.fallback_size", f"= {fallback!r}: must be one of {', '.join(MODEL_SIZES)}")
    per_size = {name: _model_size_matrix(entry, source, f"{where}.sizes.{name}")
                for name, entry in mapping(value.get("sizes", {}), source, f"{where}.sizes").items()
                if not name.startswith("_")}
    for name in per_size:
        if name not in MODEL_SIZES:
            fail(source, f"{where}.sizes.{name}", f"is not a model size; sizes: {', '.join(MODEL_SIZES)}")
    return ModelMatrix(kind, sizes["size"], sizes["quick_size"], tuple(precisions), floors, rounds, fallback, per_size)


def _check_policies(precisions: list, source, where) -> None:
    """Every entry of a model section's ``precisions`` list is a precision policy a training step runs."""
    for position, name in enumerate(precisions):
        if name not in STEP_POLICIES:
            fail(source, f"{where}[{position}]", f"= {name!r}: a training step runs {', '.join(STEP_POLICIES)}")


def _model_size_matrix(value, source, where) -> ModelSizeMatrix:
    value = mapping(value, source, where)
    check_keys(value, _MODEL_SIZE_KEYS, source, where)
    precisions = value.get("precisions", [])
    if not isinstance(precisions, list):
        fail(source, f"{where}.precisions", f"must be a list of precision policies, got {precisions!r}")
    _check_policies(precisions, source, f"{where}.precisions")

    def floors_of(table, at):
        floors = {}
        for key, floor in mapping(table, source, at).items():
            if key.startswith("_"):
                continue
            if key not in STEP_POLICIES:
                fail(source, f"{at}.{key}", f"is not a precision policy; a training step runs {', '.join(STEP_POLICIES)}")
            floors[key] = _floor(floor, source, f"{at}.{key}")
        return floors

    chip_floors = {_chip(chip, source, f"{where}.chip_floors.{chip}"): floors_of(table, f"{where}.chip_floors.{chip}")
                   for chip, table in mapping(value.get("chip_floors", {}), source, f"{where}.chip_floors").items()
                   if not chip.startswith("_")}
    return ModelSizeMatrix(tuple(precisions), floors_of(value.get("floors", {}), f"{where}.floors"), chip_floors)


def _models(value, source: str) -> dict:
    if value is None:
        return {}
    value = mapping(value, source, "model")
    check_keys(value, set(KINDS), source, "model")
    return {kind: _model_kind(kind, value[kind], source) for kind in KINDS if kind in value}


def parse_benchmarks(data, source: str = BENCHMARKS_FILE) -> BenchConfig:
    """Validate a loaded ``benchmarks.json`` document; raise :class:`AccountingError` naming the bad entry.

    >>> parse_benchmarks({"regression": {"metric": "median", "threshold_percent": 10},
    ...                   "cpu": {"dtypes": ["float32"], "shapes": [[0, 8, 8]], "floors": {"float32": 0.5}}})
    Traceback (most recent call last):
    ...
    accounting.errors.AccountingError: benchmarks.json: cpu.shapes[0] = [0, 8, 8]: sizes must be positive integers, got 0
    """
    data = mapping(data, source, "the top level")
    check_keys(data, {"regression", "model", "fleet", *KINDS}, source, "the top level")
    regression = mapping(data.get("regression"), source, "regression")
    check_keys(regression, _REGRESSION_KEYS, source, "regression")
    metric = regression.get("metric")
    if metric not in METRICS:
        fail(source, "regression.metric", f"= {metric!r}: must be one of {', '.join(METRICS)}")
    threshold = _percent(regression.get("threshold_percent"), source, "regression.threshold_percent")
    if threshold != int(threshold):  # per_kind and per_benchmark, read by the gate alone, may be fractional
        fail(source, "regression.threshold_percent", f"= {regression['threshold_percent']!r}: must be a whole "
              "number of percent (pytest-benchmark's --benchmark-compare-fail takes no fractions)")
    per_kind = {}
    for kind, value in mapping(regression.get("per_kind", {}), source, "regression.per_kind").items():
        if not kind.startswith("_"):
            if kind not in KINDS:
                fail(source, f"regression.per_kind.{kind}", f"is not a device kind; kinds: {', '.join(KINDS)}")
            per_kind[kind] = _percent(value, source, f"regression.per_kind.{kind}")
    per_benchmark = {}
    for name, value in mapping(regression.get("per_benchmark", {}), source, "regression.per_benchmark").items():
        if not name.startswith("_"):
            per_benchmark[name] = _percent(value, source, f"regression.per_benchmark.{name}")
    devices = {kind: _kind(kind, data[kind], source) for kind in KINDS if kind in data}
    if not devices:
        fail(source, "the top level", f"needs at least one of {', '.join(KINDS)}")
    fleet = parse_fleet(data["fleet"], source) if "fleet" in data else FleetSettings()
    return BenchConfig(devices, metric, threshold, source, fleet, regression_per_kind=per_kind,
                       regression_per_benchmark=per_benchmark, models=_models(data.get("model"), source))


def _percent(value, source, where) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < value < 100:
        fail(source, where, f"= {value!r}: must be a percentage in (0, 100)")
    return float(value)


INSTALLED_BENCHMARKS = Path(sys.prefix) / "share" / "accounting" / BENCHMARKS_FILE
"""Where a (non-editable) install puts the project's ``benchmarks.json`` (pyproject ``data-files``)."""


def default_benchmarks_path() -> Path:
    """``$ACCOUNTING_BENCHMARKS``, else ``./benchmarks.json``, else the one beside this package's
    source tree (a checkout or an editable install), else the installed copy."""
    override = os.environ.get(BENCHMARKS_ENV)
    if override:
        return Path(override)
    for candidate in (Path.cwd() / BENCHMARKS_FILE, Path(__file__).resolve().parents[2] / BENCHMARKS_FILE):
        if candidate.is_file():
            return candidate
    return INSTALLED_BENCHMARKS


def load_benchmarks(path=None) -> BenchConfig:
    """Read and validate ``benchmarks.json`` (``path=None``: :func:`default_benchmarks_path`)."""
    path = Path(path) if path is not None else default_benchmarks_path()
    try:
        text = path.read_text()
    except OSError as error:
        raise AccountingError(f"cannot read benchmarks file {str(path)!r}: {error.strerror}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise AccountingError(f"{path}: not valid JSON: {error}") from None
    return parse_benchmarks(data, source=str(path))
