"""``rlx-gpu bench``: the command line. Every argument is checked before any work (argparse errors exit with 2)."""
from __future__ import annotations

import argparse
import json
import math
import os
import sys

from ...runtime.device import NoAdapterError, get_device
from .implementations import CHOICES, choose, run_each
from .report import svg_plot, table
from .shapes import DEFAULT_SETS, OPTIMIZERS, PRECISIONS, param_set


def _positive(kind, minimum):
    def parse(text):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {'a whole number' if kind is int else 'a number'}, "
                                             f"got {text!r}") from None
        if not (v >= minimum) or (kind is float and not math.isfinite(v)):
            raise argparse.ArgumentTypeError(f"expected a value >= {minimum}, got {text!r}")
        return v
    return parse


def _writable(path: str) -> str:
    """An output path that can be written (checked before any measurement, so a run never loses its results)."""
    folder = os.path.dirname(os.path.abspath(path)) or "."
    if os.path.isdir(path):
        raise argparse.ArgumentTypeError(f"{path!r} is a folder, expected a file name")
    if not os.path.isdir(folder):
        raise argparse.ArgumentTypeError(f"cannot write {path!r}: no folder {folder!r}")
    if not os.access(folder, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise argparse.ArgumentTypeError(f"cannot write {path!r}: permission denied")
    return path


# Defaults that depend on the adapter: a plain `rlx-gpu bench` on a CPU adapter finishes in about a minute (small
# sets and budgets), on a GPU it measures the full sets. option: (on GPUs, on CPU adapters)
ADAPTER_DEFAULTS = {"sets": (DEFAULT_SETS, "single:262144,gpt2-124m"), "repeats": (5, 3), "copy_mb": (512, 16),
                    "memory_gb": (64.0, 0.05), "matrix_div": (1, 16), "matrix_layers": (0, 1)}


def _default(opt: str, unit: str = "") -> str:
    gpu, cpu = ADAPTER_DEFAULTS[opt]
    return f"(default: {gpu}{unit} on GPUs, {cpu}{unit} on CPU adapters)"


def adapter_defaults(args, dev):
    """``args`` with every option left unset given its default for ``dev``'s adapter type (CPU or not)."""
    which = 1 if dev.info["type"] == "CPU" else 0
    for opt, pair in ADAPTER_DEFAULTS.items():
        if getattr(args, opt) is None:
            setattr(args, opt, pair[which])
    return args


def parse_args(argv=None):
    """The command line, every argument checked before any work (argparse errors exit with status 2). Options whose
    default depends on the adapter stay None until :func:`adapter_defaults`."""
    ap = argparse.ArgumentParser(prog="rlx-gpu bench", description="Time every optimizer against the "
                                 "memory-bandwidth floor, torch and its NumPy twin, in one run.")
    ap.add_argument("--optimizers", default=",".join(OPTIMIZERS),
                    help=f"comma list of {', '.join(OPTIMIZERS)} (default: all)")
    ap.add_argument("--sets", default=None,
                    help="comma list of param sets: single:N (one tensor of N elements), gpt2-124m (148 tensors), "
                         f"gpt2-1.5b (580 tensors) {_default('sets')}")
    ap.add_argument("--precisions", default="fp32",
                    help=f"comma list of {', '.join(PRECISIONS)} (param, grad and state dtypes; -master: float32 "
                         "master weights and states) (default: fp32)")
    ap.add_argument("--list", action="store_true", help="print the rows these options give (tensors, params, "
                    "scaling, skips) and exit without timing anything")
    ap.add_argument("--host-rows", action="store_true",
                    help="also time opt.step() on 20 tensors, 1M parameters in all (wall clock, plain and checked)")
    ap.add_argument("--json", metavar="FILE", type=_writable, help="write every figure to FILE")
    ap.add_argument("--plot", metavar="FILE.svg", type=_writable,
                    help="write a bar chart of GB/s against the copy line")
    ap.add_argument("--device", default=None, help="adapter selector (default: RLX_GPU_ADAPTER, else the best)")
    ap.add_argument("--implementation", choices=CHOICES, default=None,
                    help="WebGPU implementation (default: RLX_GPU_IMPLEMENTATION or wgpu-native); both: each in a "
                         "child process, rows merged")
    ap.add_argument("--repeats", type=_positive(int, 1), default=None,
                    help=f"timed repeats per figure, the median is reported {_default('repeats')}")
    ap.add_argument("--copy-mb", type=_positive(int, 1), default=None,
                    help=f"size of the copy-bandwidth buffers, MiB {_default('copy_mb')}")
    ap.add_argument("--memory-gb", type=_positive(float, 1e-3), default=None,
                    help=f"device memory budget; sets above it are scaled down {_default('memory_gb', ' GB')}")
    ap.add_argument("--matrix-div", type=_positive(int, 1), default=None,
                    help=f"divide the sides of the matrix optimizers' matrices by this {_default('matrix_div')}")
    ap.add_argument("--matrix-layers", type=_positive(int, 0), default=None,
                    help="the matrix optimizers take the matrices of a gpt2 set's first N layers, 0: all "
                         f"{_default('matrix_layers')}")
    ap.add_argument("--numpy-max", type=_positive(int, 0), default=150_000_000,
                    help="largest set (elements) the NumPy twin is timed on (default: 150000000)")
    ap.add_argument("--no-torch", action="store_true", help="skip torch's figures even where torch with CUDA is here")
    ap.add_argument("--no-numpy", action="store_true", help="skip the NumPy twin's figures")
    ap.add_argument("--no-host", action="store_true", help="skip the host-path figures")
    ap.add_argument("--no-latency", action="store_true", help="skip the first-step latency probe")
    ap.add_argument("--tune", type=_positive(int, 0), default=0, metavar="N",
                    help="also time AdamW on N elements for several workgroup shapes (default: 0, off)")
    ap.add_argument("--quiet", action="store_true", help="print only the final table")
    args = ap.parse_args(argv)
    for o in (x.strip().lower() for x in args.optimizers.split(",")):
        if o and o not in OPTIMIZERS:
            ap.error(f"unknown optimizer {o!r}; choose from {', '.join(OPTIMIZERS)}")
    for p in (x.strip() for x in args.precisions.split(",")):
        if p and p not in PRECISIONS:
            ap.error(f"unknown precision {p!r}; choose from {', '.join(PRECISIONS)}")
    sets = [x.strip() for x in (DEFAULT_SETS if args.sets is None else args.sets).split(",") if x.strip()]
    if not sets:
        ap.error("--sets names no param set")
    for spec in sets:
        try:
            param_set(spec)
        except ValueError as e:
            ap.error(str(e).removeprefix("bench: "))
    return args


def list_rows(args, dev) -> str:
    """What ``--list`` prints: every row these options give on ``dev``, skipped ones with the reason."""
    from .rows import plan
    from .run import lists
    plans = plan(*lists(args), args.memory_gb * 1e9, args.matrix_div, args.matrix_layers)
    skipped = sum(bool(p.skip) for p in plans)
    lines = [f"rlx-gpu bench on {dev.name} ({dev.info['type']}): {len(plans) - skipped} rows"
             + (f", {skipped} skipped" if skipped else "")]
    return "\n".join(lines + [f"  {k:3d}. {p.describe()}" for k, p in enumerate(plans, 1)])


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    failed = {}
    if args.implementation == "both":
        report, failed = run_each(argv)
        for why in failed.values():
            print(f"rlx-gpu bench: {why}", file=sys.stderr)
        if not report:
            return 2
    else:
        choose(args.implementation)
        try:
            dev = get_device(args.device)
        except NoAdapterError as e:
            print(f"rlx-gpu bench: {e}", file=sys.stderr)
            return 2
        adapter_defaults(args, dev)
        if args.list:
            print(list_rows(args, dev))
            return 0
        from .run import run
        report = run(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    if args.plot:
        with open(args.plot, "w") as f:
            f.write(svg_plot(report))
    print(table(report))
    for name, meta in report.get("implementations", {report.get("implementation"): report}).items():
        print(f"copy bandwidth {meta['copy_gbps']:.1f} GB/s ({meta['adapter']} on {name}, timing: {meta['timing']})")
        lat = meta.get("first_step_latency")
        if lat and "total_s" in lat:
            print("first-step latency: " + ", ".join(f"{k[:-2]} {v:.2f} s" for k, v in lat.items()))
    return 2 if failed else 0
