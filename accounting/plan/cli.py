"""``accounting plan``: the arguments, their one-line errors, and the plan printed as text or JSON.

Every bad input — a config file that cannot be read or holds a key it does not know, an
unknown device, a global batch the devices do not divide, an MFU above 1, a layout the devices
or the model cannot be divided by — ends with one line on stderr and exit status 2. Exit status 1
says the run does not fit (the text says why); 0 says it fits.
"""

import argparse
import json
import sys

from accounting._checks import positive_number_from_text
from accounting.model.activations import ATTENTIONS
from accounting.console import EXIT_BAD_INPUT, EXIT_OK, check_writable
from accounting.errors import AccountingError
from accounting.model_mfu.sizes import MODEL_SIZES, model_size
from accounting.plan.compute import PlanSettings, make_plan
from accounting.plan.devices import known_devices, plan_device
from accounting.plan.layout_plan import LayoutSettings, layout_plan
from accounting.plan.links import known_links, read_links
from accounting.plan.render import (layout_plan_document, plan_document, render_layout_plan, render_plan,
                                    render_search, render_traced, search_document)
from accounting.plan.search import search_layouts
from accounting.plan.traced import trace_step
from accounting.model.hf_config import MODEL_TYPES, not_counted, read_config_json
from accounting.model.parallel.activations import RECOMPUTE_POLICIES, SELECTIVE_POLICIES
from accounting.model.parallel.layout import DEFAULT_NODE_SIZE, HSDP, LAYOUT_SHARDINGS, SCHEDULES, ParallelLayout
from accounting.model.training_memory import OPTIMIZERS, PRECISION_POLICIES, precision_policy
from accounting.model.config import TransformerConfig

EXIT_DOES_NOT_FIT = 1

DEFAULT_DEVICE = "H100 SXM"
DEFAULT_MFU = 0.4
DEFAULT_HEADROOM = 0.1

DESCRIPTION = (
    "Size a training run before renting it: memory per device by part and whether it fits, the largest "
    "micro-batch that fits, FLOPs per step and per token, time per step, tokens/s and days for a token budget "
    "at a stated MFU. Over a parallel layout (--tensor-parallel, --pipeline-parallel, --context-parallel, "
    "--expert-parallel; data parallelism on the devices left): memory per rank of each pipeline stage, the most "
    "loaded named, communication by axis and the pipeline bubble; --search ranks the layouts that fit. The model "
    "is a Hugging Face config.json (gpt2, llama, mistral, qwen2, mixtral, qwen3, qwen3_moe, "
    "gemma2, gemma3_text, deepseek_v2, deepseek_v3, gpt_oss, phi3, olmo2; nothing is downloaded) or one of the "
    "package's named sizes."
)
EPILOG = (
    f"exit status: 0 it fits; {EXIT_DOES_NOT_FIT} it does not fit (the output says why, and what would); "
    f"{EXIT_BAD_INPUT} bad input. Memory: the package's formulas (accounting.transformer_training_memory) with "
    "model states divided by the sharding; device memory is what torch reports the card holds where known (else "
    "the datasheet's GB of 10^9 bytes) less --headroom. "
    "Time: model FLOPs / (devices x dense peak x MFU); over a layout, plus the communication not hidden behind "
    "compute (link bandwidths: the device's datasheet, or --links) and the pipeline bubble."
)


def _number(what: str, unit: str | None = None):
    def parse(text: str) -> float:
        try:
            return positive_number_from_text(text, what, unit)
        except AccountingError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
    return parse


def _count(what: str):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value < 1:
            raise argparse.ArgumentTypeError(f"{what} must be a positive whole number, got {text!r}")
        return value
    return parse


def _fraction(what: str, *, zero: bool):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not ((0 <= value < 1) if zero else (0 < value <= 1)):
            bounds = "in [0, 1)" if zero else "in (0, 1]"
            raise argparse.ArgumentTypeError(f"{what} must be a fraction {bounds}, got {text!r}")
        return value
    return parse


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The ``plan`` options, on ``parser`` (the ``plan`` sub-command of ``python -m accounting``)."""
    model = parser.add_argument_group("model (one of)").add_mutually_exclusive_group(required=True)
    model.add_argument("--config", metavar="PATH", help="a Hugging Face config.json")
    model.add_argument("--model", metavar="SIZE", choices=tuple(MODEL_SIZES),
                       help=f"a named size: {', '.join(MODEL_SIZES)}")
    parser.add_argument("--sequence-length", metavar="N", type=_count("--sequence-length"), default=None,
                        help="tokens per sequence. Default: the config's max_position_embeddings, or the named size's")
    parser.add_argument("--global-batch", metavar="N", type=_count("--global-batch"), default=None,
                        help="sequences per optimizer step, a multiple of --devices. Default: every device at the "
                             "largest micro-batch that fits, no accumulation")
    parser.add_argument("--micro-batch", metavar="N", type=_count("--micro-batch"), default=None,
                        help="sequences per device per forward/backward. Default: the largest that fits and "
                             "divides the per-device batch")
    parser.add_argument("--device", metavar="NAME", default=DEFAULT_DEVICE,
                        help=f"the accelerator: {', '.join(known_devices())}, or a name as "
                             "torch.cuda.get_device_name() prints it. Default: %(default)s")
    parser.add_argument("--devices", metavar="N", type=_count("--devices"), default=1,
                        help="devices in all: the data-parallel degree is what the parallel layout leaves of them. "
                             "Default: %(default)s")
    parser.add_argument("--precision", choices=tuple(PRECISION_POLICIES), default="bf16-mixed",
                        help="precision policy. Default: %(default)s")
    parser.add_argument("--optimizer", choices=OPTIMIZERS, default="adamw", help="Default: %(default)s")
    parser.add_argument("--sharding", choices=LAYOUT_SHARDINGS, default="ddp", type=str.lower,
                        help="how model states are divided among the data-parallel devices (zero1: optimizer "
                             "state, zero2: and gradients, zero3: and parameters; FSDP's names too; hsdp: zero3 "
                             "within a node, replicated across nodes). Default: %(default)s")
    parser.add_argument("--attention", choices=ATTENTIONS, default="sdpa",
                        help="eager (the s x s scores are saved); sdpa: the kernel scaled_dot_product_attention runs "
                             "on the device for this dtype and shape (fused kernels save no s x s scores, the math "
                             "kernel does: fp32 with grouped-query heads on an H100/H200, say); or sdpa-flash, "
                             "sdpa-math... by name. Default: %(default)s")
    parser.add_argument("--recompute", choices=RECOMPUTE_POLICIES, default="none",
                        help="full: every block keeps only its input and recomputes the rest in backward; "
                             "selective: part of each block is recomputed (--selective-policy). Default: %(default)s")
    parser.add_argument("--selective-policy", choices=SELECTIVE_POLICIES, default="attention-core",
                        help="with --recompute selective: attention-core (Megatron's: the attention's softmax and "
                             "dropout recomputed) or matmul-outputs (torchtitan's op-level policy: matmul outputs "
                             "saved, everything else recomputed). Default: %(default)s")
    layout = parser.add_argument_group(
        "parallel layout", "the model divided among the devices; the data-parallel degree is what --devices leaves "
        "(devices / (tensor x pipeline x context))")
    layout.add_argument("--tensor-parallel", metavar="T", type=_count("--tensor-parallel"), default=1,
                        help="tensor parallelism within a node: heads, MLP width and vocabulary divided T ways, "
                             "with sequence parallelism. Default: %(default)s")
    layout.add_argument("--no-sequence-parallel", dest="sequence_parallel", action="store_false",
                        help="with --tensor-parallel: keep the norms and the residual stream whole on every rank")
    layout.add_argument("--pipeline-parallel", metavar="P", type=_count("--pipeline-parallel"), default=1,
                        help="pipeline stages the blocks are divided into. Default: %(default)s")
    layout.add_argument("--schedule", choices=SCHEDULES, default="1f1b",
                        help="the pipeline's schedule. Default: %(default)s")
    layout.add_argument("--virtual-stages", metavar="V", type=_count("--virtual-stages"), default=1,
                        help="model chunks per pipeline rank, with --schedule interleaved-1f1b. Default: %(default)s")
    layout.add_argument("--context-parallel", metavar="C", type=_count("--context-parallel"), default=1,
                        help="ring attention: each sequence divided C ways. Default: %(default)s")
    layout.add_argument("--expert-parallel", metavar="E", type=_count("--expert-parallel"), default=1,
                        help="a mixture of experts' routed experts divided E ways (ranks borrowed from a stage's "
                             "tensor x context x data ranks). Default: %(default)s")
    layout.add_argument("--node-size", metavar="N", type=_count("--node-size"), default=DEFAULT_NODE_SIZE,
                        help="devices per node (NVLink within, the network across). Default: %(default)s")
    layout.add_argument("--micro-batches", metavar="M", type=_count("--micro-batches"), default=None,
                        help="micro-batches per optimizer step (gradient accumulation; a pipeline's m). Default: "
                             "--global-batch / (data-parallel degree x micro-batch), else 1, or P with a pipeline")
    layout.add_argument("--links", metavar="JSON", default=None,
                        help="link bandwidths: a fleet result JSON (accounting fleet --json) whose measured bus "
                             "bandwidths replace the device's datasheet figures, or {\"intra_node_gbps\": 360, "
                             "\"inter_node_gbps\": 45}")
    layout.add_argument("--search", action="store_true",
                        help="rank the layouts of --devices that fit, fastest first (a short table)")
    parser.add_argument("--mtp", action="store_true",
                        help="with --config of DeepSeek-V3: count the multi-token-prediction modules "
                             "(num_nextn_predict_layers) a run trains beside the model; transformers does not "
                             "build them")
    parser.add_argument("--mfu", metavar="FRACTION", type=_fraction("--mfu", zero=False), default=DEFAULT_MFU,
                        help="model FLOPs utilisation the run is assumed to reach. Default: %(default)s")
    parser.add_argument("--headroom", metavar="FRACTION", type=_fraction("--headroom", zero=True),
                        default=DEFAULT_HEADROOM,
                        help="fraction of device memory kept free for what is not counted (CUDA context, "
                             "communication buffers, fragmentation). Default: %(default)s")
    parser.add_argument("--tokens", metavar="N", type=_number("--tokens", "tokens"), default=None,
                        help="a token budget (15e12) for the days it takes")
    parser.add_argument("--memory-gb", metavar="GB", type=_number("--memory-gb", "GB"), default=None,
                        help="the device's memory instead of the datasheet's")
    parser.add_argument("--peak-tflops", metavar="TFLOPS", type=_number("--peak-tflops", "TFLOP/s"), default=None,
                        help="the device's dense peak for the precision's dtype instead of the datasheet's")
    parser.add_argument("--json", metavar="PATH", dest="json_path", nargs="?", const="-", default=None,
                        help="print the plan as JSON instead of text (to PATH if given)")
    return parser


def _model(args) -> tuple[TransformerConfig, str]:
    if args.config is not None:
        try:
            config = TransformerConfig.from_hf(args.config, sequence_length=args.sequence_length, mtp=args.mtp)
            left_out = not_counted(args.config)
        except OSError as error:
            raise AccountingError(f"--config {args.config!r} cannot be read: {error.strerror or error}") from None
        except AccountingError as error:
            raise AccountingError(f"--config {args.config!r}: {error}") from None
        return config, args.config if left_out is None else f"{args.config}: {left_out}"
    if args.mtp:
        raise AccountingError("--mtp counts the multi-token-prediction modules a --config names; --model names none")
    return model_size(args.model, seq=args.sequence_length).config, f"--model {args.model}"


def _traced(args) -> bool:
    """Whether ``--config`` names a model type the formulas do not read (it is then traced)."""
    if args.config is None:
        return False
    try:
        model_type = read_config_json(args.config).get("model_type")
    except AccountingError:
        return False  # _model reports it
    return isinstance(model_type, str) and model_type not in MODEL_TYPES


def _run_traced(args, parser, stdout) -> int:
    """Trace one device's step of a model the formulas do not describe (:mod:`accounting.plan.traced`)."""
    try:
        if args.mtp:
            raise AccountingError("--mtp counts DeepSeek's multi-token-prediction modules, which a traced model"
                                  " does not have")
        if args.devices != 1 or args.sharding != "ddp" or args.recompute != "none":
            raise AccountingError(
                f"--config {args.config!r} is traced (its model_type is not one the formulas read): a trace measures "
                "one device's step without recomputation; --devices, --sharding and --recompute are not traced")
        settings = PlanSettings(precision=args.precision, optimizer=args.optimizer, headroom=args.headroom,
                                mfu=args.mfu)
        device = plan_device(args.device, precision_policy(args.precision).activations, memory_gb=args.memory_gb,
                             peak_tflops=args.peak_tflops)
        traced = trace_step(args.config, batch_size=args.micro_batch or 1, sequence_length=args.sequence_length,
                            precision=args.precision, optimizer=args.optimizer)
    except AccountingError as error:
        parser.error(f"--config {args.config!r}: {error}")
    print(render_traced(traced, device, settings, args.config), file=stdout)
    usable = int(device.memory_bytes * (1 - settings.headroom))
    return EXIT_OK if traced.peak <= usable else EXIT_DOES_NOT_FIT


def _parallel_layout(args) -> ParallelLayout:
    """The layout the options ask for (its own checks name a bad combination)."""
    return ParallelLayout(devices=args.devices, tensor=args.tensor_parallel, pipeline=args.pipeline_parallel,
                          context=args.context_parallel, expert=args.expert_parallel,
                          sequence_parallel=args.sequence_parallel, schedule=args.schedule,
                          virtual_stages=args.virtual_stages, sharding=args.sharding, node_size=args.node_size)


def _asks_for_layout(args, layout: ParallelLayout) -> bool:
    """Whether the plan is a layout plan: an axis beyond data parallelism, or an option only a layout reads.

    Without one, the plan is one data-parallel copy per device, printed as it always was."""
    return (layout.model_parallel > 1 or layout.expert > 1 or layout.sharding == HSDP
            or args.recompute == "selective" or args.micro_batches is not None or args.links is not None
            or args.search)


def _check_search(args, layout: ParallelLayout) -> None:
    """``--search`` chooses the axes, the schedule, the sharding and the micro-batch itself, for a given global
    batch (with the recomputation and its selective policy asked for)."""
    if args.global_batch is None:
        raise AccountingError("--search ranks layouts for one global batch: give --global-batch")
    chosen = [f"{option} {value}" for option, value in (
        ("--tensor-parallel", layout.tensor), ("--pipeline-parallel", layout.pipeline),
        ("--context-parallel", layout.context), ("--expert-parallel", layout.expert),
        ("--virtual-stages", layout.virtual_stages), ("--micro-batch", args.micro_batch or 1),
        ("--micro-batches", args.micro_batches or 1)) if value != 1]
    chosen += [f"{option} {value}" for option, value, default in (
        ("--sharding", args.sharding, "ddp"), ("--schedule", args.schedule, "1f1b")) if value != default]
    if chosen:
        raise AccountingError(f"--search chooses the layout and the micro-batch itself: drop {', '.join(chosen)}")


def _run_layout(args, parser, stdout, config, source, layout) -> int:
    """Plan ``layout`` (or with ``--search`` rank the layouts of the devices) and print it."""
    try:
        device = plan_device(args.device, precision_policy(args.precision).activations, memory_gb=args.memory_gb,
                             peak_tflops=args.peak_tflops)
        links = None if args.links is None else read_links(args.links, known_links(device.name))
        settings = LayoutSettings(layout, precision=args.precision, optimizer=args.optimizer,
                                  attention=args.attention, recompute=args.recompute,
                                  selective=args.selective_policy, headroom=args.headroom, mfu=args.mfu, links=links)
        if args.search:
            _check_search(args, layout)
            rows = search_layouts(config, device, layout.devices, global_batch=args.global_batch,
                                  precision=args.precision, optimizer=args.optimizer, attention=args.attention,
                                  recompute=args.recompute, selective=args.selective_policy, mfu=args.mfu,
                                  headroom=args.headroom, links=links, node_size=layout.node_size)
            plan = None
        else:
            plan = layout_plan(config, device, settings, global_batch=args.global_batch,
                               micro_batch=args.micro_batch, micro_batches=args.micro_batches, tokens=args.tokens)
    except AccountingError as error:
        parser.error(str(error))
    if plan is None:
        shown = dict(global_batch=args.global_batch, devices=layout.devices)
        document = search_document(rows, config, device, settings, source, **shown)
        text = render_search(rows, config, device, settings, source, **shown)
        status = EXIT_OK if rows else EXIT_DOES_NOT_FIT
    else:
        document = layout_plan_document(plan, source)
        text = render_layout_plan(plan, source)
        status = EXIT_OK if plan.fits else EXIT_DOES_NOT_FIT
    _print(args, stdout, text, document)
    return status


def _print(args, stdout, text: str, document: dict) -> None:
    if args.json_path is None:
        print(text, file=stdout)
        return
    dumped = json.dumps(document, indent=2)
    if args.json_path == "-":
        print(dumped, file=stdout)
    else:
        with open(args.json_path, "w") as file:
            file.write(dumped + "\n")
        print(f"JSON written to {args.json_path}", file=stdout)


def run(args: argparse.Namespace, *, parser: argparse.ArgumentParser, stdout=None, stderr=None, started=None) -> int:
    """Run a parsed ``plan`` command; bad input ends it with ``parser``'s one-line error. A ``--config`` whose
    model type the formulas do not read is traced instead (:mod:`accounting.plan.traced`), text only."""
    stdout = stdout or sys.stdout
    try:
        layout = _parallel_layout(args)
    except AccountingError as error:
        parser.error(str(error))
    if _traced(args):
        if _asks_for_layout(args, layout):
            parser.error(f"--config {args.config!r} is traced (its model_type is not one the formulas read): a trace "
                         f"measures one device's step, not a parallel layout ({layout.describe()})")
        if args.json_path is not None:
            parser.error(f"--config {args.config!r} is traced (its model_type is not one the formulas read): "
                         "a traced plan prints text only, without --json")
        return _run_traced(args, parser, stdout)
    try:
        if args.json_path not in (None, "-"):
            check_writable(args.json_path, "--json")
        config, source = _model(args)
        if _asks_for_layout(args, layout):
            return _run_layout(args, parser, stdout, config, source, layout)
        settings = PlanSettings(devices=args.devices, sharding=args.sharding, precision=args.precision,
                                optimizer=args.optimizer, attention=args.attention, recompute=args.recompute,
                                headroom=args.headroom, mfu=args.mfu)
        # The matmuls run in the activations' dtype (bf16 under autocast, whose weights are fp32).
        device = plan_device(args.device, precision_policy(args.precision).activations, memory_gb=args.memory_gb,
                             peak_tflops=args.peak_tflops)
        plan = make_plan(config, device, settings, global_batch=args.global_batch, micro_batch=args.micro_batch,
                         tokens=args.tokens)
    except AccountingError as error:
        parser.error(str(error))
    _print(args, stdout, render_plan(plan, source) if args.json_path is None else "",
           plan_document(plan, source) if args.json_path is not None else {})
    return EXIT_OK if plan.fits else EXIT_DOES_NOT_FIT
