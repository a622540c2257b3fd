"""``accounting plan``: the arguments, their one-line errors, and the plan printed as text or JSON.

Every bad input — a config file that cannot be read or holds a key it does not know, an
unknown device, a global batch the devices do not divide, an MFU above 1 — ends with one line
on stderr and exit status 2. Exit status 1 says the run does not fit (the text says why);
0 says it fits.
"""

import argparse
import json
import sys

from accounting._checks import positive_number_from_text
from accounting.model.activations import ATTENTIONS, RECOMPUTES
from accounting.console import EXIT_BAD_INPUT, EXIT_OK, check_writable
from accounting.errors import AccountingError
from accounting.model_mfu.sizes import MODEL_SIZES, model_size
from accounting.plan.compute import PlanSettings, make_plan
from accounting.plan.devices import known_devices, plan_device
from accounting.plan.render import plan_document, render_plan, render_traced
from accounting.plan.traced import trace_step
from accounting.model.hf_config import MODEL_TYPES, not_counted, read_config_json
from accounting.model.sharding import SHARDINGS
from accounting.model.training_memory import OPTIMIZERS, PRECISION_POLICIES, precision_policy
from accounting.model.config import TransformerConfig

EXIT_DOES_NOT_FIT = 1

DEFAULT_DEVICE = "H100 SXM"
DEFAULT_MFU = 0.4
DEFAULT_HEADROOM = 0.1

DESCRIPTION = (
    "Size a training run before renting it: memory per device by part and whether it fits, the largest "
    "micro-batch that fits, FLOPs per step and per token, time per step, tokens/s and days for a token budget "
    "at a stated MFU. The model is a Hugging Face config.json (gpt2, llama, mistral, qwen2, mixtral, qwen3, qwen3_moe, "
    "gemma2, gemma3_text, deepseek_v2, deepseek_v3, gpt_oss, phi3, olmo2; nothing is downloaded) or one of the "
    "package's named sizes."
)
EPILOG = (
    f"exit status: 0 it fits; {EXIT_DOES_NOT_FIT} it does not fit (the output says why, and what would); "
    f"{EXIT_BAD_INPUT} bad input. Memory: the package's formulas (accounting.transformer_training_memory) with "
    "model states divided by the sharding; device memory is what torch reports the card holds where known (else "
    "the datasheet's GB of 10^9 bytes) less --headroom. "
    "Time: model FLOPs / (devices x dense peak x MFU)."
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
                        help="data-parallel devices. Default: %(default)s")
    parser.add_argument("--precision", choices=tuple(PRECISION_POLICIES), default="bf16-mixed",
                        help="precision policy. Default: %(default)s")
    parser.add_argument("--optimizer", choices=OPTIMIZERS, default="adamw", help="Default: %(default)s")
    parser.add_argument("--sharding", choices=SHARDINGS, default="ddp", type=str.lower,
                        help="how model states are divided among the devices (zero1: optimizer state, zero2: and "
                             "gradients, zero3: and parameters; FSDP's names too). Default: %(default)s")
    parser.add_argument("--attention", choices=ATTENTIONS, default="sdpa",
                        help="eager (the s x s scores are saved); sdpa: the kernel scaled_dot_product_attention runs "
                             "on the device for this dtype and shape (fused kernels save no s x s scores, the math "
                             "kernel does: fp32 with grouped-query heads on an H100/H200, say); or sdpa-flash, "
                             "sdpa-math... by name. Default: %(default)s")
    parser.add_argument("--recompute", choices=RECOMPUTES, default="none",
                        help="full: every block keeps only its input and recomputes the rest in backward. "
                             "Default: %(default)s")
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


def run(args: argparse.Namespace, *, parser: argparse.ArgumentParser, stdout=None, stderr=None, started=None) -> int:
    """Run a parsed ``plan`` command; bad input ends it with ``parser``'s one-line error. A ``--config`` whose
    model type the formulas do not read is traced instead (:mod:`accounting.plan.traced`), text only."""
    stdout = stdout or sys.stdout
    if _traced(args):
        if args.json_path is not None:
            parser.error(f"--config {args.config!r} is traced (its model_type is not one the formulas read): "
                         "a traced plan prints text only, without --json")
        return _run_traced(args, parser, stdout)
    try:
        if args.json_path not in (None, "-"):
            check_writable(args.json_path, "--json")
        config, source = _model(args)
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
    if args.json_path is None:
        print(render_plan(plan, source), file=stdout)
    else:
        text = json.dumps(plan_document(plan, source), indent=2)
        if args.json_path == "-":
            print(text, file=stdout)
        else:
            with open(args.json_path, "w") as file:
                file.write(text + "\n")
            print(f"JSON written to {args.json_path}", file=stdout)
    return EXIT_OK if plan.fits else EXIT_DOES_NOT_FIT
