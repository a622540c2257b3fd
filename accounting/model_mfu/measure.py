"""The training-step benchmark: tokens/s, MFU, HFU and peak memory of one step, with what was predicted.

Definitions (Chowdhery et al. 2022, "PaLM", arXiv:2204.02311, section 4.1 and appendix B):

- **model FLOPs** of a step: :func:`accounting.transformer_flops` ``.training``, the matmul
  FLOPs of forward and backward (6N + 12·L·H·Q·T per token), whatever the implementation;
- **hardware FLOPs**: what the hardware actually executed — model FLOPs plus the forward
  passes recomputed by activation checkpointing; here counted by ``FlopCounterMode`` on
  the step itself (the first warm-up step, never a timed one; see
  :func:`accounting.timing.time_fn`), and in closed form by :func:`hardware_flops`;
- **MFU** = model FLOPs / step time / peak; **HFU** = hardware FLOPs / step time / peak.
  Without recomputation the two are equal.

Memory: the step's measured peak (weights, master weights and optimizer state, plus the
high-water mark of what one step allocates: CPU through the live-tensor tracker, CUDA
through ``max_memory_allocated``) against ``transformer_training_memory(...).peak``. The
prediction is a lower bound on GPT-shaped configs; :data:`PEAK_MEMORY_BAND` is what a
benchmark accepts (:func:`check_peak_memory`).
"""

from dataclasses import dataclass

from accounting._checks import check_non_negative, check_positive_size
from accounting._units import readable_bytes
from accounting.errors import AccountingError
from accounting.flops import MFU_CEILING, achieved_mfu
from accounting.hardware.devices import detect_device
from accounting.hardware.peaks import device_peak_flops
from accounting.memory import storage_bytes
from accounting.model_mfu._peak_memory import PeakMemory
from accounting.model_mfu.sizes import ModelSize
from accounting.model_mfu.step import TrainingStep, check_step_device, predicted_peak_bytes
from accounting.timing import time_fn
from accounting.training_memory import precision_policy
from accounting.transformer_flops import transformer_flops

PEAK_MEMORY_BAND = (0.95, 1.3)
"""Accepted measured/predicted peak-memory ratio. Below: the prediction's lower bound allows 5 %
(CPU LayerNorm keeps bf16 statistics where the formula assumes fp32). Above: 30 % for what the
prediction leaves out — attention-score and optimizer temporaries, the fp32 copy of the gradients a
bf16-mixed step makes for its master weights, allocator rounding on CUDA. With recomputation the prediction is
``recompute="full"``'s, fitted to Hugging Face's models: on this model at the "small" size on the CPU,
measured/predicted read 0.945 (fp32) and 0.994 (bf16-mixed); only the upper limit applies."""
PEAK_DTYPES = {"fp32": "float32", "bf16-mixed": "bfloat16", "bf16": "bfloat16"}
"""The dtype whose dense peak a policy's MFU divides by: the one its matmuls run in."""


def hardware_flops(config, batch_size: int, recompute: bool) -> int:
    """Matmul FLOPs a step executes: model FLOPs, plus the recomputed forward of every block.

    torch's non-reentrant checkpoint stops recomputing once the tensors backward needs are
    back (``torch.utils.checkpoint``'s early stop, the default), so each block's last matmul
    (the MLP's down projection, whose output backward does not need) is not run again.

    >>> from accounting import TransformerConfig
    >>> config = TransformerConfig(layers=2, width=64, heads=4, sequence_length=32, vocabulary=100)
    >>> hardware_flops(config, 4, recompute=False) == transformer_flops(config, 4).training
    True
    """
    flops = transformer_flops(config, batch_size)
    if not recompute:
        return flops.training
    blocks = transformer_flops(config, batch_size, embeddings=False).forward
    down_projection = 2 * flops.tokens * config.ffn_width * config.width
    return flops.training + blocks - config.layers * down_projection


@dataclass(frozen=True)
class ModelMeasurement:
    """One timed training step: FLOPs, time, peak, memory, and the figures derived from them."""

    size: ModelSize
    precision: str
    recompute: bool
    device: str
    device_kind: str
    dtype: str
    median_s: float
    iqr_s: float
    repeats: int
    model_flops: int
    hardware_flops: int
    peak_flops: float | None
    measured_peak_bytes: int
    predicted_peak_bytes: int
    flop_count_seconds: float

    @property
    def tokens(self) -> int:
        return self.size.tokens

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.median_s

    @property
    def achieved_tflops(self) -> float:
        """Model FLOPs per second, in TFLOP/s."""
        return self.model_flops / self.median_s / 1e12

    @property
    def mfu(self) -> float | None:
        return achieved_mfu(self.model_flops, self.median_s, self.peak_flops)

    @property
    def hfu(self) -> float | None:
        return achieved_mfu(self.hardware_flops, self.median_s, self.peak_flops)

    @property
    def memory_ratio(self) -> float:
        """Measured / predicted peak memory."""
        return self.measured_peak_bytes / self.predicted_peak_bytes

    def as_dict(self) -> dict:
        """Every field and derived figure, JSON-ready (for ``extra_info`` and the report)."""
        c = self.size.config
        return {
            "size": self.size.name, "layers": c.layers, "width": c.width, "heads": c.heads,
            "sequence_length": c.sequence_length, "vocabulary": c.vocabulary, "batch_size": self.size.batch_size,
            "precision": self.precision, "recompute": self.recompute, "device": self.device,
            "device_kind": self.device_kind, "dtype": self.dtype, "tokens": self.tokens,
            "median_s": self.median_s, "iqr_s": self.iqr_s, "repeats": self.repeats,
            "tokens_per_s": self.tokens_per_s, "model_flops": self.model_flops,
            "hardware_flops": self.hardware_flops, "achieved_tflops": self.achieved_tflops,
            "peak_tflops": None if self.peak_flops is None else self.peak_flops / 1e12,
            "mfu": self.mfu, "hfu": self.hfu, "measured_peak_bytes": self.measured_peak_bytes,
            "predicted_peak_bytes": self.predicted_peak_bytes, "memory_ratio": self.memory_ratio,
            "flop_count_seconds": self.flop_count_seconds,
        }


def measure_training_step(step: TrainingStep, *, device="cpu", peak_flops: float | None = None,
                          warmup: int = 2, repeats: int = 5, min_time_s: float = 0.0,
                          info=None) -> ModelMeasurement:
    """Time ``step`` with :func:`accounting.timing.time_fn`, then measure one more step's peak memory.

    The FLOPs are counted during the first warm-up step (so ``warmup`` is at least 1);
    ``peak_flops`` defaults to the device's dense peak for the policy's dtype
    (:data:`PEAK_DTYPES`; ``None`` where unknown, and then MFU and HFU are ``None``).
    """
    if not isinstance(step, TrainingStep):
        raise AccountingError(f"step must be a TrainingStep (see build_training_step), got {step!r}")
    device = check_step_device(step, device)
    warmup = check_positive_size(warmup, "warmup")
    info = detect_device(device) if info is None else info
    if peak_flops is None:
        peak_flops = device_peak_flops(info, PEAK_DTYPES[step.precision])
    else:
        peak_flops = check_non_negative(peak_flops, "peak_flops") or None
    timing = time_fn(step, device=device, warmup=warmup, repeats=repeats, min_time_s=min_time_s)
    return step_measurement(step, median_s=timing.median, iqr_s=timing.iqr, repeats=len(timing.samples),
                            count=timing.flop_count, peak_flops=peak_flops, info=info)


def step_measurement(step: TrainingStep, *, median_s: float, iqr_s: float, repeats: int, count,
                     peak_flops: float | None, info) -> ModelMeasurement:
    """Join a timing of ``step`` (from any timer) and its FLOP count with one more step's peak memory.

    ``count`` is the :class:`~accounting.flop_count.FlopCount` of one step (its hardware
    FLOPs); the memory step runs here, after the timing, so the tracker never slows a timed step.
    """
    with PeakMemory(step.device) as memory:
        step()
    measured_peak = storage_bytes(*step.persistent_tensors()) + memory.peak
    size = step.size
    return ModelMeasurement(
        size=size, precision=precision_policy(step.precision).name, recompute=step.recompute,
        device=info.name, device_kind=info.kind, dtype=PEAK_DTYPES[step.precision], median_s=median_s,
        iqr_s=iqr_s, repeats=repeats, model_flops=transformer_flops(size.config, size.batch_size).training,
        hardware_flops=count.total, peak_flops=peak_flops, measured_peak_bytes=measured_peak,
        predicted_peak_bytes=predicted_peak_bytes(size, step.precision, step.recompute),
        flop_count_seconds=count.seconds,
    )


def check_peak_memory(measurement: ModelMeasurement, band=PEAK_MEMORY_BAND) -> None:
    """Raise when measured/predicted peak memory leaves ``band`` (only its upper end with recomputation)."""
    low, high = band
    ratio = measurement.memory_ratio
    if ratio > high or (not measurement.recompute and ratio < low):
        allowed = f"[{low}, {high}]" if not measurement.recompute else f"at most {high} (recomputation)"
        raise AccountingError(
            f"{measurement.size.describe()} {measurement.precision}: measured peak "
            f"{readable_bytes(measurement.measured_peak_bytes)} is {ratio:.3f} x the predicted "
            f"{readable_bytes(measurement.predicted_peak_bytes)}; allowed {allowed}"
        )


def check_ceiling(measurement: ModelMeasurement, ceiling: float = MFU_CEILING) -> None:
    """Raise when MFU or HFU exceeds the ceiling: the peak is wrong or the timer misses work."""
    for name, value in (("MFU", measurement.mfu), ("HFU", measurement.hfu)):
        if value is not None and value > ceiling:
            raise AccountingError(
                f"{measurement.size.describe()} {measurement.precision}: {name} {value:.3f} exceeds {ceiling}: "
                "the peak is wrong for this device or the timer misses work"
            )
