"""``accounting plan``: size a training run before renting anything.

From a Hugging Face ``config.json`` or a named size, a sequence length, a batch, a device
and how many of them, a precision, an optimizer and a sharding, it says how much memory each
device needs by part and whether that fits, the largest micro-batch that fits, the FLOPs of a
step and of a token, and how long a step, a second's tokens and a token budget take at a
stated MFU (see :mod:`accounting.plan.compute`). Over a parallel layout (tensor, pipeline, context and
expert parallelism beside the data-parallel copies) it sizes each pipeline stage's rank by part, the
communication of each axis and the pipeline bubble (:mod:`accounting.plan.layout_plan`), and
:mod:`accounting.plan.search` ranks the layouts that fit.

>>> from accounting import TransformerConfig
>>> from accounting.plan import PlanSettings, make_plan, plan_device
>>> gpt2 = TransformerConfig(layers=12, width=768, heads=12, sequence_length=1024, vocabulary=50257)
>>> plan = make_plan(gpt2, plan_device("A10", "bfloat16"), PlanSettings(), global_batch=64)
>>> plan.fits, plan.global_batch == plan.micro_batch * plan.accumulation_steps, round(plan.seconds_per_step, 2)
(True, True, 1.12)
"""

from accounting.plan.compute import DeviceMemory, Plan, PlanSettings, device_memory, make_plan
from accounting.plan.devices import PlanDevice, plan_device
from accounting.plan.layout_plan import LayoutPlan, LayoutSettings, layout_plan
from accounting.plan.render import layout_plan_document, plan_document, render_layout_plan, render_plan
from accounting.plan.search import search_layouts

__all__ = ["DeviceMemory", "LayoutPlan", "LayoutSettings", "Plan", "PlanDevice", "PlanSettings", "device_memory",
           "layout_plan", "layout_plan_document", "make_plan", "plan_device", "plan_document", "render_layout_plan",
           "render_plan", "search_layouts"]
