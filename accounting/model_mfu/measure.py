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

import dataclasses
from dataclasses import dataclass

from accounting._checks import check_non_negative, check_positive_size
from accounting._units import readable_bytes
from accounting.errors import AccountingError
from accounting.flops import MFU_CEILING, achieved_mfu
from accounting.hardware.devices import detect_device
from accounting.hardware.peaks import device_peak_flops
from accounting.model_mfu._peak_memory import step_peak_bytes
from accounting.model_mfu.kernels import attention_kernel, formula_attention, is_fused, recomputed_scores_flops
from accounting.model_mfu.sizes import ModelSize
from accounting.model_mfu.step import TrainingStep, check_step_device, compile_step, predicted_peak_bytes
from accounting.timing import time_fn
from accounting.model.training_memory import precision_policy
from accounting.model.flops import transformer_flops

PEAK_MEMORY_BAND = (0.93, 1.3)
"""Accepted measured/predicted peak-memory ratio. Below: 7 %: CPU LayerNorm keeps bf16 statistics where the formula
assumes fp32, and for the GPT-2 family with SDPA the formula counts Hugging Face's default step, whose key-value cache
(on in training too) keeps copies of K and V beside the fused projection Q is a view of: two (tokens × width) tensors
a layer that this model, which has no cache, does not keep (tests/test_model_mfu.py and
tests/test_training_memory_gpt2_sdpa.py measure both; measured/predicted 0.943-0.964 at the "tiny" and "small" sizes
on the CPU, the Llama family, whose cache copies replace what they copy, 1.000). Above: 30 % for what the
prediction leaves out — attention-score and optimizer temporaries, the fp32 copy of the gradients a
bf16-mixed step makes for its master weights, allocator rounding on CUDA. With recomputation the prediction is
``recompute="full"``'s, fitted to Hugging Face's models: on this model at the "small" size on the CPU,
measured/predicted read 0.945 (fp32) and 0.994 (bf16-mixed); only the upper limit applies."""
PEAK_DTYPES = {"fp32": "float32", "bf16-mixed": "bfloat16", "bf16": "bfloat16"}
"""The dtype whose dense peak a policy's MFU divides by: the one its matmuls run in."""


def hardware_flops(config, batch_size: int, recompute: bool, kernel: str = "math") -> int:
    """Matmul FLOPs a step executes: model FLOPs, plus the recomputed forward of every block, plus the QKᵀ a
    fused attention kernel's backward computes again (``kernel``: see :mod:`accounting.model_mfu.kernels`).

    torch's non-reentrant checkpoint stops recomputing once the tensors backward needs are
    back (``torch.utils.checkpoint``'s early stop, the default), so each block's last matmul
    (the MLP's down projection, whose output backward does not need) is not run again.

    >>> from accounting import TransformerConfig
    >>> config = TransformerConfig(layers=2, width=64, heads=4, sequence_length=32, vocabulary=100)
    >>> hardware_flops(config, 4, recompute=False) == transformer_flops(config, 4).training
    True
    >>> hardware_flops(config, 4, False, "flash") - hardware_flops(config, 4, False)  # 2 layers · 2·4·4·32·32·16
    1048576
    """
    flops = transformer_flops(config, batch_size)
    fused = recomputed_scores_flops(config, batch_size) if is_fused(kernel) else 0
    if not recompute:
        return flops.training + fused
    blocks = transformer_flops(config, batch_size, embeddings=False).forward
    down_projection = 2 * flops.tokens * config.ffn_width * config.width
    return flops.training + blocks - config.layers * down_projection + fused


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
    attention: str = "sdpa"
    """The model's attention (``"sdpa"`` or ``"eager"``)."""
    attention_kernel: str = ""
    """The kernel that ran it, read off the FLOP count (:func:`~accounting.model_mfu.kernels.attention_kernel`);
    the prediction is the memory formula's for that kernel."""
    compiled: bool = False
    """The timed step ran ``torch.compile``'s model (FLOPs and peak memory: counted on the eager model)."""

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
            "flop_count_seconds": self.flop_count_seconds, "attention": self.attention,
            "attention_kernel": self.attention_kernel, "compiled": self.compiled,
            "family": "llama" if c.norm == "rmsnorm" else "gpt2", "kv_heads": c.kv_heads, "ffn_width": c.ffn_width,
            "mlp": c.mlp,
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
    FLOPs, and the attention kernel that ran); the memory step runs here, after the timing, so the tracker never
    slows a timed step. It runs the eager model (a compiled step's memory is not the formula's to predict).
    """
    measured_peak = step_peak_bytes(step, step.eager_step, step.device)
    size = step.size
    kernel = attention_kernel(count, step.attention)
    return ModelMeasurement(
        size=size, precision=precision_policy(step.precision).name, recompute=step.recompute,
        device=info.name, device_kind=info.kind, dtype=PEAK_DTYPES[step.precision], median_s=median_s,
        iqr_s=iqr_s, repeats=repeats, model_flops=transformer_flops(size.config, size.batch_size).training,
        hardware_flops=count.total, peak_flops=peak_flops, measured_peak_bytes=measured_peak,
        predicted_peak_bytes=predicted_peak_bytes(size, step.precision, step.recompute, formula_attention(kernel),
                                                  step.device),
        flop_count_seconds=count.seconds, attention=step.attention, attention_kernel=kernel, compiled=step.compiled,
    )


COMPILE_WARMUP = 2
"""Untimed calls of a compiled step: the first compiles forward and backward, the second runs what it compiled."""


def measure_compiled_step(step: TrainingStep, eager: ModelMeasurement, *, device="cpu", repeats: int = 5,
                          min_time_s: float = 0.0, compiler=None) -> tuple[ModelMeasurement | None, str | None]:
    """Time ``torch.compile``'s version of ``step`` beside its eager measurement ``eager``.

    Returns ``(measurement, None)``: ``eager`` with the compiled step's time (the same model FLOPs; its hardware
    FLOPs and peak memory are the eager step's, since the compiled kernels are opaque to ``FlopCounterMode``); or
    ``(None, why)`` where compiling or running the compiled step failed — reported beside the eager figure,
    never raised, since an eager figure without a compiled one is still a result.
    """
    try:
        compiled = compile_step(step, compiler)
        timing = time_fn(compiled, device=device, warmup=COMPILE_WARMUP, repeats=repeats, min_time_s=min_time_s,
                         count_flops=False)
    except Exception as error:  # noqa: BLE001 - whatever the compiler raises is the result to report
        message = str(error).strip().splitlines()[0] if str(error).strip() else ""
        return None, f"torch.compile failed: {type(error).__name__}" + (f": {message[:200]}" if message else "")
    return dataclasses.replace(eager, median_s=timing.median, iqr_s=timing.iqr, repeats=len(timing.samples),
                               compiled=True), None


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
