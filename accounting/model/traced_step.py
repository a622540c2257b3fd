"""Peak memory of a training step of any ``nn.Module``, measured by tracing it, on the meta device if you like.

Where a formula cannot know an implementation, measure instead. A step of any model —
forward, backward and an optimizer step — is run under a live-tensor tracker
(:class:`accounting.live_memory.LiveTensorBytes`), which sees every storage each op creates and
when torch frees it. On the ``meta`` device tensors have shapes and dtypes but no data, so
nothing is allocated and an 8B-parameter model traces on a laptop in seconds; the bytes are
those the same step allocates on a real device (identical to a CPU run, checked in the tests).

What is measured is the **steady-state step**: one step is run first, untraced, so the optimizer
has its state; then ``zero_grad(set_to_none=True)`` and one traced step. The peak is broken down
into what was alive at that moment:

- ``parameters`` and ``buffers`` (the model's), ``optimizer_state`` (every tensor in the
  optimizer's state, step counters included), ``inputs`` (the batch);
- ``gradients``: the ``.grad`` of the parameters, created by the backward pass;
- ``activations``: tensors autograd saved for the backward pass (seen by a saved-tensors hook);
- ``temporaries``: everything else alive at the peak (an op's output on its way to the next,
  the gradient flowing back, the optimizer's intermediate results).

Every storage is counted once, whatever its device (torch's optimizers keep their step counters
on the CPU, 4 bytes per parameter tensor, unless ``capturable`` or ``fused``). Exact storage
sizes: no allocator rounding or caching, no library workspaces, no CUDA context.

What the meta device cannot know is which kernel a real device would choose.
``scaled_dot_product_attention`` on meta runs its math fallback, which keeps the (s × s)
attention weights; a CPU or CUDA fused kernel keeps far less. Ask
:func:`accounting.model.attention_kernels.choose_sdpa_kernel` which kernel the real device runs: where
it is math too (fp32 with grouped-query heads on an H100 or H200, for one), the trace is what that
device keeps; where it is fused, trace a model with eager attention, or read an SDPA model's
activations as the upper bound they are. Autocast applies
to CPU and CUDA tensors, not meta ones: build the model in the dtype it trains in instead.
A model that reads a tensor's values (``.item()``, data-dependent control flow) cannot run on
meta at all: that is an :class:`AccountingError` saying so. Activation checkpointing
(``torch.utils.checkpoint``) keeps what it saves through saved-tensor hooks of its own, so
those tensors count as temporaries here; the peak is exact either way.

>>> model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 256))
>>> memory = traced_training_step_memory(model, torch.ones(32, 256), loss_fn=lambda output, batch: output.sum(),
...                                      optimizer="adam")
>>> memory.parameters == 4 * sum(p.numel() for p in model.parameters())
True
>>> memory.optimizer_state == 2 * memory.parameters + 4 * 4  # two moments and four step counters
True
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields

import torch
from torch.utils._pytree import tree_flatten, tree_map

from accounting._units import readable_bytes
from accounting.errors import AccountingError, AccountingTypeError
from accounting.live_memory import LiveTensorBytes
from accounting.model.training_memory import OPTIMIZERS

_OPTIMIZER_CLASSES = {
    "sgd": torch.optim.SGD,
    "adagrad": torch.optim.Adagrad,
    "rmsprop": torch.optim.RMSprop,
    "adam": torch.optim.Adam,
    "adamw": torch.optim.AdamW,
}

FORWARD, BACKWARD, OPTIMIZER_STEP = "forward", "backward", "optimizer step"


@dataclass(frozen=True)
class TracedStepMemory:
    """Bytes alive at the peak of a traced training step, by part (see the module docstring).

    ``peak`` is their sum; ``phase`` is where the peak fell (``"forward"``, ``"backward"`` or
    ``"optimizer step"``); ``after_step``: bytes alive once the step is done and its gradients
    kept; ``device``: where the model's parameters live. ``saved``: what autograd had saved when
    backward began, the forward's activations (``activations`` is the part of them still alive at the
    peak, less when the peak falls inside backward).
    """

    device: str
    phase: str
    parameters: int
    buffers: int
    optimizer_state: int
    inputs: int
    gradients: int
    activations: int
    temporaries: int
    after_step: int
    saved: int = 0

    @property
    def peak(self) -> int:
        return (self.parameters + self.buffers + self.optimizer_state + self.inputs + self.gradients
                + self.activations + self.temporaries)

    def __str__(self) -> str:
        rows = [f"training step traced on {self.device}: peak {readable_bytes(self.peak)} in the {self.phase}"]
        for field in fields(self)[2:-2]:
            rows.append(f"  {field.name.replace('_', ' '):<18} {readable_bytes(getattr(self, field.name))}")
        return "\n".join(rows)


class _StepTracer(LiveTensorBytes):
    """:class:`LiveTensorBytes` that also logs each allocation and free, so the peak can be broken down.

    A storage's key (its address) may be reused once it is freed, so each allocation gets a
    serial number; the log holds ``(bytes, serial)``, negative bytes for a free.
    """

    def __init__(self):
        super().__init__()
        self.log: list[tuple[int, int]] = []
        self._serials: dict[int, int] = {}
        self.saved: set[int] = set()

    def _record(self, tensor: torch.Tensor) -> None:
        key = tensor.untyped_storage()._cdata
        if key in self._serials:
            return
        super()._record(tensor)
        serial = len(self.log)
        self._serials[key] = serial
        self.log.append((tensor.untyped_storage().nbytes(), serial))

    def _release(self, key: int) -> None:
        serial = self._serials.pop(key, None)
        if serial is not None:
            self.log.append((-self.log[serial][0], serial))
        super()._release(key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = super().__torch_dispatch__(func, types, args, kwargs)
        if func is torch.ops.aten.lift_fresh.default:
            # torch.tensor(data) fills a new storage outside the dispatcher and hands it to
            # lift_fresh, which returns it as it is: new all the same. (On meta the same call is a
            # CPU tensor and a copy, both seen; without this the CPU would count less.)
            self._record(out)
        return out

    def serial_of(self, tensor: torch.Tensor) -> int | None:
        """The serial of this tensor's storage, if it was recorded and is still alive."""
        return self._serials.get(tensor.untyped_storage()._cdata)

    def save_for_backward(self, tensor: torch.Tensor) -> torch.Tensor:
        """Saved-tensors pack hook: note the storage as an activation and keep a detached view of it.

        A view, not the tensor: a saved output holding its own ``grad_fn`` would be a reference
        cycle, and its memory would outlive the step until the garbage collector ran.
        """
        serial = self.serial_of(tensor)
        if serial is not None:
            self.saved.add(serial)
        return tensor.detach()


def _build(model_or_factory, device) -> torch.nn.Module:
    if isinstance(model_or_factory, torch.nn.Module):
        return model_or_factory
    if not callable(model_or_factory):
        raise AccountingTypeError(
            f"model must be an nn.Module or a function that builds one, got {type(model_or_factory).__name__}"
        )
    with torch.device(device):
        model = model_or_factory()
    if not isinstance(model, torch.nn.Module):
        raise AccountingTypeError(f"the model factory returned {type(model).__name__}, not an nn.Module")
    return model


def _optimizer(optimizer, parameters) -> torch.optim.Optimizer | None:
    if optimizer is None:
        return None
    if isinstance(optimizer, str):
        name = optimizer.strip().lower()
        if name not in _OPTIMIZER_CLASSES:
            listed = ", ".join(repr(known) for known in OPTIMIZERS)
            raise AccountingError(
                f"optimizer must be one of {listed} or a function of the parameters, got {optimizer!r}"
            )
        return _OPTIMIZER_CLASSES[name](parameters)
    if not callable(optimizer):
        raise AccountingTypeError(f"optimizer must be a name, a function of the parameters or None, got {optimizer!r}")
    built = optimizer(parameters)
    if not isinstance(built, torch.optim.Optimizer):
        raise AccountingTypeError(f"the optimizer factory returned {type(built).__name__}, not a torch.optim.Optimizer")
    return built


def _call(model: torch.nn.Module, batch):
    if isinstance(batch, torch.Tensor):
        return model(batch)
    if isinstance(batch, Mapping):
        return model(**batch)
    if isinstance(batch, (tuple, list)):
        return model(*batch)
    raise AccountingTypeError(f"batch must be a tensor, a tuple of arguments or a dict of keyword arguments, "
                              f"got {type(batch).__name__}")


def _moved(batch, device: torch.device):
    """``batch`` with its tensors on ``device``; a tensor passed twice (ids as labels) stays one tensor."""
    moved: dict[int, torch.Tensor] = {}

    def move(value):
        if not isinstance(value, torch.Tensor):
            return value
        if id(value) not in moved:
            moved[id(value)] = value.to(device)
        return moved[id(value)]

    return tree_map(move, batch)


def _default_loss(output, batch) -> torch.Tensor:
    loss = getattr(output, "loss", None)
    if isinstance(loss, torch.Tensor):
        return loss  # a Hugging Face model given labels
    if isinstance(output, torch.Tensor) and output.dim() == 0:
        return output
    raise AccountingError(
        f"the model returned {type(output).__name__}, not a loss: pass loss_fn=(output, batch) -> a scalar tensor"
    )


def _step(model, batch, loss_fn, optimizer, marks: list | None = None, log=None) -> None:
    loss = loss_fn(_call(model, batch), batch)
    if not isinstance(loss, torch.Tensor) or loss.dim() != 0:
        raise AccountingError(f"the loss must be a scalar tensor, got {type(loss).__name__} "
                              f"{tuple(loss.shape) if isinstance(loss, torch.Tensor) else ''}".rstrip())
    if marks is not None:
        marks.append((BACKWARD, len(log)))
    loss.backward()
    del loss
    if marks is not None:
        marks.append((OPTIMIZER_STEP, len(log)))
    if optimizer is not None:
        optimizer.step()


def _checked_step(model, batch, loss_fn, optimizer) -> None:
    """:func:`_step`, with the meta device's refusal to read values said plainly."""
    try:
        _step(model, batch, loss_fn, optimizer)
    except (RuntimeError, NotImplementedError) as error:
        if "meta" not in str(error):
            raise
        reason = str(error).strip().splitlines()[0]
        raise AccountingError(
            f"the step reads the values of a tensor, which the meta device does not have ({reason}); "
            "trace a smaller model on device='cpu', or pass inputs that spare the model that check "
            "(a Hugging Face model: an attention_mask)"
        ) from error


def traced_training_step_memory(
    model,
    batch,
    *,
    loss_fn: Callable | None = None,
    optimizer="adamw",
    device="meta",
) -> TracedStepMemory:
    """The peak bytes of one steady-state training step of ``model`` on ``batch``, by part.

    - ``model``: an ``nn.Module`` (traced where its parameters are), or a function of no
      arguments that builds one, called under ``torch.device(device)`` — on ``"meta"`` by
      default, so no memory is allocated however large the model.
    - ``batch``: a tensor (``model(batch)``), a tuple (``model(*batch)``) or a dict
      (``model(**batch)``); its tensors are moved to the model's device (meta tensors have no
      data, so token ids made on the CPU serve).
    - ``loss_fn(output, batch)``: the scalar to differentiate; by default the output's ``loss``
      (a Hugging Face model given ``labels``) or the output itself if it is a scalar.
    - ``optimizer``: a name (``"adamw"``, ``"adam"``, ``"sgd"``, ``"adagrad"``, ``"rmsprop"``, with
      torch's defaults), a function of the parameters that returns an optimizer, or ``None``
      (forward and backward only).

    The model is changed as a training step changes it (its weights take two steps).

    >>> factory = lambda: torch.nn.Linear(4096, 4096, bias=False)   # built on meta: 64 MiB never allocated
    >>> memory = traced_training_step_memory(factory, torch.ones(8, 4096), loss_fn=lambda out, _: out.sum())
    >>> memory.device, memory.parameters == memory.gradients == 4096 * 4096 * 4, memory.phase
    ('meta', True, 'optimizer step')
    """
    model = _build(model, device)
    parameters = list(model.parameters())
    if not parameters:
        raise AccountingError(f"the model ({type(model).__name__}) has no parameters: nothing to train")
    model_device = parameters[0].device
    batch = _moved(batch, model_device)
    loss_fn = _default_loss if loss_fn is None else loss_fn
    if not callable(loss_fn):
        raise AccountingTypeError(f"loss_fn must be a function (output, batch) -> loss, got {loss_fn!r}")
    trainable = [parameter for parameter in parameters if parameter.requires_grad]
    step_optimizer = _optimizer(optimizer, trainable)

    _checked_step(model, batch, loss_fn, step_optimizer)  # untraced: the optimizer creates its state
    model.zero_grad(set_to_none=True)
    if step_optimizer is not None:
        step_optimizer.zero_grad(set_to_none=True)

    tracer = _StepTracer()
    known = {
        "parameters": parameters,
        "buffers": list(model.buffers()),
        "optimizer_state": [value for state in (step_optimizer.state.values() if step_optimizer else ())
                            for value in state.values() if isinstance(value, torch.Tensor)],
        "inputs": [value for value in tree_flatten(batch)[0] if isinstance(value, torch.Tensor)],
    }
    marks = [(FORWARD, 0)]
    with tracer, torch.autograd.graph.saved_tensors_hooks(tracer.save_for_backward, lambda tensor: tensor):
        for tensors in known.values():
            tracer.track(*tensors)
        marks[0] = (FORWARD, len(tracer.log))
        _step(model, batch, loss_fn, step_optimizer, marks, tracer.log)
    parts = {}
    for part, tensors in known.items():
        for tensor in tensors:
            parts.setdefault(tracer.serial_of(tensor), part)
    for parameter in trainable:
        if parameter.grad is not None:
            parts.setdefault(tracer.serial_of(parameter.grad), "gradients")
    parts.pop(None, None)
    return _breakdown(tracer, parts, marks, str(model_device))


def _breakdown(tracer: _StepTracer, parts: dict, marks: list, device: str) -> TracedStepMemory:
    """Replay the tracer's log to the (first) moment of the peak and sum what was alive, by part."""
    start = marks[0][1]
    current = sum(size for size, _ in tracer.log[:start])
    peak, peak_at = current, start
    for position in range(start, len(tracer.log)):
        current += tracer.log[position][0]
        if current > peak:
            peak, peak_at = current, position + 1
    alive = _alive(tracer.log[:peak_at])
    backward_at = dict(marks).get(BACKWARD, len(tracer.log))
    saved = sum(size for serial, size in _alive(tracer.log[:backward_at]).items()
                if serial in tracer.saved and serial not in parts)
    totals = dict.fromkeys(("parameters", "buffers", "optimizer_state", "inputs", "gradients", "activations",
                            "temporaries"), 0)
    for serial, size in alive.items():
        part = parts.get(serial) or ("activations" if serial in tracer.saved else "temporaries")
        totals[part] += size
    phase = ([name for name, position in marks if position < peak_at] or [FORWARD])[-1]
    return TracedStepMemory(device=device, phase=phase, after_step=tracer.current, saved=saved, **totals)


def _alive(log) -> dict[int, int]:
    """Bytes of each storage (by serial) a prefix of the tracer's log leaves alive."""
    alive: dict[int, int] = {}
    for size, serial in log:
        if size > 0:
            alive[serial] = size
        else:
            alive.pop(serial, None)
    return alive
