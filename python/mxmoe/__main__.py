"""``python -m mxmoe``: the mxmoe command's explain, info and synth, through the package.

Same flags, outputs and exit codes as the C++ command (0 ok, 1 error, 2 bad usage, 3 no
backend fits), for a machine that has the package but not the command.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import List, Optional

from . import LoadError, Model, NoBackendError, _judge, _mxmoe, generate, presets

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_NO_BACKEND, EXIT_INTERRUPTED = 0, 1, 2, 3, 130

_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f]")


def _print(text: object = "", file=None, end: str = "\n") -> None:
    """The one way this command prints, as the C++ command's cli::print: a directory's name,
    a config's architecture or a hardware probe's model string cannot drive the terminal.
    Line breaks are kept; every other control byte is written \\xNN, a lone surrogate
    \\udcNN."""
    out = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", f"{text}{end}")
    (file or sys.stdout).write(out.encode("utf-8", "backslashreplace").decode("utf-8"))


def _explain(args: argparse.Namespace) -> int:
    report, table = _judge(args.preset, args.model, args.layer, args.activation,
                           args.batch_invariant, args.backend, args.exclude or (), args.tokens,
                           args.threads, args.hardware)
    if args.json:
        _print(json.dumps(report, indent=2))
    else:
        _print(table, end="")
        if report["selected"] is None:
            _print("\n" + report["error"], file=sys.stderr)
    return EXIT_OK if report["selected"] is not None else EXIT_NO_BACKEND


def _info(args: argparse.Namespace) -> int:
    if args.model is not None and not args.hardware:
        return _model_info(args.model, args.json)
    hardware = _mxmoe._hardware_json()
    if args.model is not None:
        if args.json:
            return _model_info(args.model, True, json.loads(hardware))
        rc = _model_info(args.model, False)
        _print(_mxmoe._hardware_report(hardware), end="")
        return rc
    if args.json:
        _print(hardware)
    else:
        _print(_mxmoe._hardware_report(hardware), end="")
    return EXIT_OK


def _model_info(path: str, as_json: bool, hardware: Optional[dict] = None) -> int:
    model = Model(path)
    layers = []
    for index in range(model.num_layers):
        reason = model.skip_reason(index)
        layers.append({"layer": index, "status": "skipped" if reason else "ok",
                       "found": reason or "MoE layer"})
    config = model.config
    text_config = config.get("text_config", config)
    out = {
        "directory": model.path,
        "architecture": (config.get("architectures") or [""])[0],
        "model_type": text_config.get("model_type", config.get("model_type", "")),
        "layers": model.num_layers,
        "moe_layers": model.moe_layers,
        "per_layer": layers,
    }
    if hardware is not None:
        out["hardware"] = hardware
    if as_json:
        _print(json.dumps(out, indent=2))
        return EXIT_OK
    _print(f"model        {out['directory']} ({out['model_type']}; architecture "
          f"{out['architecture'] or '-'})")
    _print(f"layers       {out['layers']}")
    for entry in layers:
        _print(f"  layer {entry['layer']:>3}  {entry['status']:<7} {entry['found']}")
    return EXIT_OK


def _generate(args: argparse.Namespace) -> int:
    generate(args.out, args.preset, layers=args.layers, experts=args.experts, top_k=args.top_k,
             hidden=args.hidden, intermediate=args.intermediate, seed=args.seed,
             force=args.force)
    _print(f"mxmoe synth: wrote {args.out}", file=sys.stderr)
    return EXIT_OK


def _decimal(text: str) -> int:
    """An integer as the command reads one: decimal digits, a '-' first at most (no 0x10, +1,
    1_000 or spaces, which int() would take)."""
    if not re.fullmatch(r"-?[0-9]+", text):
        raise argparse.ArgumentTypeError(f"expected a decimal integer, got '{text}'")
    return int(text)


def _comma_list(text: str) -> List[str]:
    return [item for item in text.split(",") if item]


class _Parser(argparse.ArgumentParser):
    """argparse's usage, help and errors (which echo a flag's value) through _print too."""

    def _print_message(self, message, file=None):
        if message:
            _print(message, file=file or sys.stderr, end="")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m mxmoe",
        description="mxmoe: Mixture-of-Experts layers with MXFP4 expert weights (the package's "
                    "explain, info and synth; the C++ command `mxmoe` has the rest).")
    parser.add_argument("--version", action="version", version=f"mxmoe {_mxmoe.__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    e = sub.add_parser("explain", help="Every backend's verdict for a deployment, with all "
                                       "reasons (exit 3 when none fits)")
    where = e.add_mutually_exclusive_group()
    where.add_argument("--preset", help="Layer shape preset: " + ", ".join(presets()) +
                       " (default gpt-oss-20b)")
    where.add_argument("--model",
                       help="Checkpoint directory (config.json + safetensors)")
    e.add_argument("--layer", type=_decimal, help="Layer index in the model (with --model)")
    e.add_argument("--backend", help="Force a backend by name")
    e.add_argument("--exclude", type=_comma_list, help="Exclude backends (comma list)")
    e.add_argument("--activation", help="Activation format: f32, bf16, int8, mxfp8 (default: "
                                        "the model family's preference)")
    e.add_argument("--batch-invariant", action="store_true",
                   help="Require bit-identical outputs per token whatever the batch")
    e.add_argument("--threads", type=_decimal, default=0, help="Threads (0 = all logical CPUs)")
    e.add_argument("--tokens", type=_decimal, default=1,
                   help="Tokens per call (a hint for ranking backends)")
    e.add_argument("--hardware", help="Replay a hardware description captured with "
                                      "`mxmoe info --hardware --json`")
    e.add_argument("--json", action="store_true",
                   help="Print {selected, deployment, candidates, error, suggestions} as JSON")
    e.set_defaults(run=_explain)

    i = sub.add_parser("info", help="The hardware probe (--hardware, default) or a checkpoint "
                                    "(--model DIR)")
    i.add_argument("--hardware", action="store_true", help="Print this machine's probe")
    i.add_argument("--json", action="store_true", help="Print JSON")
    i.add_argument("--model", help="Checkpoint directory to describe")
    i.set_defaults(run=_info)

    # `generate` is the old name (it means text in every other tool), kept as an alias.
    g = sub.add_parser("synth", aliases=["generate"],
                       help="Write a checkpoint of random MXFP4 MoE layers with a preset's shape")
    g.add_argument("--out", required=True, help="The checkpoint directory to write")
    g.add_argument("--preset", default="gpt-oss-20b", choices=presets(),
                   help="Shape and family of the layers")
    g.add_argument("--layers", type=_decimal, default=1, help="Number of MoE layers")
    g.add_argument("--experts", type=_decimal, help="Override the number of routed experts")
    g.add_argument("--top-k", type=_decimal, help="Override the experts per token")
    g.add_argument("--hidden", type=_decimal, help="Override H (a multiple of 32)")
    g.add_argument("--intermediate", type=_decimal, help="Override I (a multiple of 32)")
    g.add_argument("--seed", type=_decimal, default=1, help="Seed (layer N uses seed + N)")
    g.add_argument("--force", action="store_true", help="Replace OUT if it exists (as a whole)")
    g.set_defaults(run=_generate)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return args.run(args)
    except NoBackendError as e:
        _print(str(e), file=sys.stderr)
        return EXIT_NO_BACKEND
    except KeyboardInterrupt:
        _print("mxmoe: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (ValueError, TypeError) as e:
        _print(f"mxmoe: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except (LoadError, OSError, RuntimeError) as e:
        _print(f"mxmoe: error: {e}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
