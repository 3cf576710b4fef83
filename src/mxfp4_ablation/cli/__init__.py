"""The ``mxfp4-ablation`` command line.

Every subcommand takes ``--json``. Errors the user can fix (unknown variant, bad shape, no linker,
wrong device, a bad option value: :class:`~mxfp4_ablation.errors.UsageError`, ``ToolchainError``,
argparse's own errors) print one line to stderr and exit 2; a failed correctness check exits 1;
anything else is a bug and shows its traceback with exit status 3 (:data:`errors.EXIT_INTERNAL`).
A negative number after an option (``--shape -256,256,256``) is that option's value, not an option.
Subcommands from other modules register themselves through ``register(subparsers)``
(see :data:`EXTENSIONS`).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import sys
import traceback
from pathlib import Path
from typing import Any

from ..errors import EXIT_INTERNAL, EXIT_USAGE, UsageError

#: Modules that add subcommands (each has ``register(subparsers)``).
EXTENSIONS = ("mxfp4_ablation.cli.bench", "mxfp4_ablation.cli.verify", "mxfp4_ablation.cli.model",
              "mxfp4_ablation.cli.attribution")


def emit(args: argparse.Namespace, data: Any, text: str | None = None) -> None:
    if getattr(args, "json", False):
        print(json.dumps(data, indent=2, sort_keys=True, default=str))
    else:
        print(text if text is not None else _plain(data))


def _plain(data: Any, indent: str = "") -> str:
    if isinstance(data, dict):
        lines = []
        for key, value in data.items():
            if isinstance(value, dict) and value:
                lines.append(f"{indent}{key}:")
                lines.append(_plain(value, indent + "  "))
            else:
                lines.append(f"{indent}{key}: {value}")
        return "\n".join(lines)
    return f"{indent}{data}"


# -- doctor ------------------------------------------------------------------------------------


def cmd_doctor(args: argparse.Namespace) -> int:
    from .. import modes, provenance, toolchain

    mode, reason = modes.detect()
    gpu = modes.visible_gpu()
    versions = provenance.package_versions()
    data = {
        "flydsl": versions.get("flydsl"),
        "torch": versions.get("torch"),
        "torch_build": "rocm " + versions["torch_hip"] if versions.get("torch_hip")
        else "cuda " + versions["torch_cuda"] if versions.get("torch_cuda") else "cpu",
        "ld_lld": toolchain.describe(),
        "gpu": {"name": gpu.name, "arch": gpu.arch, "backend": gpu.backend} if gpu else None,
        "mode": mode,
        "mode_reason": reason,
    }
    from .. import emulated_device  # --backend emulated-device: FlyDSL's launcher on the gfx950emu HIP shim
    data["emulated_device"] = emulated_device.describe()
    emit(args, data)
    return 0 if data["ld_lld"]["ok"] else 2


# -- variants / compile / isa -----------------------------------------------------------------


def cmd_variants(args: argparse.Namespace) -> int:
    from .. import variants

    if getattr(args, "subsets", None):  # every valid switch subset of one family, by canonical name
        fam = variants.family.get(args.subsets)
        rows = [{"name": v.name, "family": v.family, "kind": v.kind, "mask": f"{fam.mask(v.switches):x}",
                 "switches": [s for s in fam.switches if s in v.switches]} for v in variants.subset_variants(args.subsets)]
        emit(args, rows, "\n".join(f"{r['name']:<72} @{r['mask']:<4} {r['kind']}" for r in rows)
             + f"\n{len(rows)} valid subsets of {args.subsets}")
        return 0
    rows = []
    for v in variants.all_variants().values():
        step = v.spec.switches[v.switch] if v.switch else None
        rows.append({"name": v.name, "family": v.family, "kind": v.kind, "predecessor": v.predecessor,
                     "switches": sorted(v.switches), "switch": v.switch,
                     "summary": step.summary if step else "baseline: every switch off",
                     "seed": step.seed.url if step else None})
    verb = {"ladder": "+", "leave-one-out": "-"}
    text = "\n".join(f"{r['name']:<36} vs {r['predecessor'] or '-':<10} "
                     f"{verb[r['kind']] + r['switch'] if r['switch'] else '(baseline)':<30} {r['summary']}"
                     for r in rows)
    emit(args, rows, text)
    return 0


def _artifact(name: str, shape_text: str):
    from .. import shapes, toolchain, variants

    variant = variants.get(name)
    shape = shapes.resolve(shape_text)
    variant.module.check_shape(**variant.shape(shape))  # a bad shape is one line, before any compile
    return variant, toolchain.compile(variant.target, variant.params(shape))


def _metrics(artifact) -> dict:
    from .. import metrics

    return metrics.kernel_metrics(artifact.isa)


def cmd_compile(args: argparse.Namespace) -> int:
    variant, art = _artifact(args.variant, args.shape)
    data = {"variant": variant.name, "shape": args.shape, "kernel": art.kernel_name, "key": art.key,
            "compile_seconds": art.compile_seconds, "cached": art.cached, "metrics": _metrics(art)}
    if not args.json:
        data["metrics"] = {k: v for k, v in data["metrics"].items() if not isinstance(v, dict)}
    emit(args, data)
    return 0


def cmd_isa(args: argparse.Namespace) -> int:
    variant, art = _artifact(args.variant, args.shape)
    if args.vs is None:
        if args.json:
            emit(args, {"variant": variant.name, "metrics": _metrics(art), "isa": art.isa})
        else:
            print(art.isa)
        return 0
    from .. import metrics

    _, other = _artifact(args.vs, args.shape)
    a, b = metrics.kernel_metrics(other.isa), metrics.kernel_metrics(art.isa)
    emit(args, metrics.diff(a, b), None if args.json else metrics.diff_table(a, b).to_string())
    return 0


# -- entry point ------------------------------------------------------------------------------

SHAPE_HELP = ("the family's shape numbers (M,N,K or tokens,experts,hidden,inter,topk[,block_m]) or a name from "
              "experiments/shapes.toml")


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (``prog: message``, exit 2) instead of usage + error; subcommand
    parsers (``sub.add_parser``) are of this class too."""

    def error(self, message: str):  # noqa: D401 - argparse's hook
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")


def positive_int(text: str) -> int:
    """An argparse ``type``: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def writable_file(text: str) -> str:
    """An argparse ``type``: a file path whose folder exists (checked before any work is done)."""
    folder = Path(text).expanduser().parent
    if not folder.is_dir():
        raise argparse.ArgumentTypeError(f"folder {str(folder)!r} does not exist")
    return text


#: Input + reference bytes per element, by what the element is (a deliberately generous estimate).
_GIB = 1 << 30


def max_input_bytes() -> int:
    """The most host memory the inputs + reference of one verify / model run may take: half of this
    machine's memory (``MXFP4_MAX_INPUT_GIB`` overrides)."""
    forced = os.environ.get("MXFP4_MAX_INPUT_GIB")
    if forced:
        return int(float(forced) * _GIB)
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not Linux
        return 16 * _GIB


def input_bytes(family: str, shape_kw: dict, lazy: bool = False) -> int:
    """About how many host bytes ``make_inputs`` + the reference take at ``shape_kw``: fp4 operands
    (half a byte) dequantised to fp32 for the reference (4 bytes) plus e8m0 scales, bf16/fp32 outputs.
    ``lazy``: the launch's heap for lazily mapped inputs (a timing run): the packed operands and scales
    (0.53 bytes per element) and the bf16 outputs, no reference."""
    per = 0.53 if lazy else 4.6
    if family == "gemm":
        M, N, K = shape_kw["M"], shape_kw["N"], shape_kw["K"]
        return int((M * K + N * K) * per + M * N * (2 if lazy else 10))
    tokens, experts, hidden, inter, topk = (shape_kw[k] for k in ("tokens", "experts", "hidden", "inter", "topk"))
    weights = experts * 3 * inter * hidden          # w1 (gate + up) and w2
    acts = tokens * topk * (hidden + 2 * inter) + tokens * hidden
    return int((weights + acts) * per + (tokens * topk * hidden * 2 if lazy else 0))


def check_size(variant, shape: tuple[int, ...], lazy: bool = False) -> None:
    """Refuse a shape whose inputs would not fit (one line, with the limit) before allocating any
    (``lazy``: a timing run's lazily mapped inputs, see :func:`input_bytes`)."""
    need = input_bytes(variant.family if variant.family == "gemm" else "moe", variant.shape(shape), lazy=lazy)
    limit = max_input_bytes()
    if need > limit:
        what = "its lazily mapped inputs" if lazy else "its inputs and reference"
        raise UsageError(f"shape {','.join(map(str, shape))} needs about {need / _GIB:,.1f} GiB of host memory for "
                         f"{what}; the limit is {limit / _GIB:,.1f} GiB (half this machine's "
                         "memory; MXFP4_MAX_INPUT_GIB overrides)")


_NEGATIVE = re.compile(r"^-\d[\d,.]*$")


def _glue_negative_values(argv: list[str]) -> list[str]:
    """``--opt -256,256,256`` -> ``--opt=-256,256,256`` (argparse would take the value for an option)."""
    out: list[str] = []
    for token in argv:
        if out and out[-1].startswith("--") and "=" not in out[-1] and _NEGATIVE.match(token):
            out[-1] = f"{out[-1]}={token}"
        else:
            out.append(token)
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="mxfp4-ablation", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="on an error, print all of it (compiler log)")
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, func, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("--json", action="store_true", help="machine-readable output")
        p.set_defaults(func=func)
        return p

    add("doctor", cmd_doctor, "toolchain, torch build, GPU, and which mode `make reproduce` will use")
    p = add("variants", cmd_variants, "list kernel variants (ladders and leave-one-out sets)")
    p.add_argument("--subsets", metavar="FAMILY", help="list every valid switch subset of FAMILY instead")
    p = add("compile", cmd_compile, "compile a variant offline for gfx950 and print its ISA metrics")
    p.add_argument("variant")
    p.add_argument("--shape", required=True, help=SHAPE_HELP)
    p = add("isa", cmd_isa, "print a variant's ISA, or its metric diff against another variant")
    p.add_argument("variant")
    p.add_argument("--shape", required=True, help=SHAPE_HELP)
    p.add_argument("--vs", help="the variant to diff against")
    for module_name in EXTENSIONS:
        importlib.import_module(module_name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    from ..toolchain import ToolchainError

    parser = build_parser()
    args = parser.parse_args(_glue_negative_values(list(sys.argv[1:] if argv is None else argv)))
    try:
        return args.func(args)
    except BrokenPipeError:  # the reader went away (`... | head`): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print(f"mxfp4-ablation {args.command}: interrupted (no partial results were kept)", file=sys.stderr)
        return 130
    except (UsageError, ToolchainError) as err:
        lines = str(err).strip().splitlines() or [type(err).__name__]
        print(f"mxfp4-ablation {args.command}: {lines[0]}", file=sys.stderr)
        if args.verbose and len(lines) > 1:
            print("\n".join(lines[1:]), file=sys.stderr)
        elif len(lines) > 1:
            print("(mxfp4-ablation -v ... prints the rest, e.g. the compiler log)", file=sys.stderr)
        return EXIT_USAGE
    except Exception:  # a bug: its traceback, and an exit status that is not "verification failed"
        traceback.print_exc()
        print(f"mxfp4-ablation {args.command}: internal error (a bug; exit {EXIT_INTERNAL})", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    raise SystemExit(main())
