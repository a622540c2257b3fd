"""Model MFU: a training step of a GPT-2 or Llama-family transformer, timed, with MFU, HFU and peak memory.

>>> from accounting.model_mfu import build_training_step, hardware_flops, measure_training_step, model_size
>>> step = build_training_step(model_size("tiny", layers=1, seq=16), precision="fp32", attention="eager")
>>> result = measure_training_step(step, device="cpu", peak_flops=1e12, warmup=1, repeats=2)
>>> result.hardware_flops == result.model_flops, result.tokens, result.attention_kernel
(True, 64, 'eager')
>>> fused_step = build_training_step(step.size, precision="fp32")
>>> fused = measure_training_step(fused_step, peak_flops=1e12, warmup=1, repeats=1)
>>> fused.hardware_flops == hardware_flops(step.size.config, 4, False, fused.attention_kernel) >= fused.model_flops
True
"""

from accounting.model_mfu.gpt import GPT, language_model_loss
from accounting.model_mfu.kernels import attention_kernel
from accounting.model_mfu.layers import ATTENTIONS
from accounting.model_mfu.measure import (
    PEAK_DTYPES,
    PEAK_MEMORY_BAND,
    ModelMeasurement,
    check_ceiling,
    check_peak_memory,
    hardware_flops,
    measure_compiled_step,
    measure_training_step,
    step_measurement,
)
from accounting.model_mfu.sizes import MODEL_SIZES, ModelSize, model_size
from accounting.model_mfu.step import (
    STEP_POLICIES,
    TrainingStep,
    build_training_step,
    check_fits,
    compile_step,
    size_that_fits,
)

__all__ = [
    "ATTENTIONS",
    "GPT",
    "MODEL_SIZES",
    "PEAK_MEMORY_BAND",
    "STEP_POLICIES",
    "ModelMeasurement",
    "ModelSize",
    "TrainingStep",
    "attention_kernel",
    "build_training_step",
    "check_ceiling",
    "check_fits",
    "check_peak_memory",
    "compile_step",
    "hardware_flops",
    "language_model_loss",
    "measure_compiled_step",
    "measure_training_step",
    "size_that_fits",
    "step_measurement",
    "PEAK_DTYPES",
    "model_size",
]
