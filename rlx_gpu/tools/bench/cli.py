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


def parse_args(argv=None):
    """The command line, every argument checked before any work (argparse errors exit with status 2)."""
    ap = argparse.ArgumentParser(prog="rlx-gpu bench", description="Every optimizer against the memory-bandwidth "
                                 "floor, torch and its NumPy twin, in one run.",
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--optimizers", default=",".join(OPTIMIZERS), help=f"comma list of {', '.join(OPTIMIZERS)}")
    ap.add_argument("--sets", default=DEFAULT_SETS,
                    help="comma list of param sets: single:N (one tensor of N elements), gpt2-124m (148 tensors), "
                         "gpt2-1.5b (580 tensors)")
    ap.add_argument("--precisions", default="fp32",
                    help=f"comma list of {', '.join(PRECISIONS)} (param, grad and state dtypes; -master: float32 "
                         "master weights and states)")
    ap.add_argument("--host-rows", action="store_true",
                    help="also time opt.step() on 20 tensors, 1M parameters in all (wall clock, plain and checked)")
    ap.add_argument("--json", metavar="FILE", type=_writable, help="write every figure to FILE")
    ap.add_argument("--plot", metavar="FILE.svg", type=_writable,
                    help="write a bar chart of GB/s against the copy line")
    ap.add_argument("--device", default=None, help="adapter selector (default: RLX_GPU_ADAPTER or the best)")
    ap.add_argument("--implementation", choices=CHOICES, default=None,
                    help="WebGPU implementation (default: RLX_GPU_IMPLEMENTATION or wgpu-native); both: each in a "
                         "child process, rows merged")
    ap.add_argument("--repeats", type=_positive(int, 1), default=5, help="timed repeats per figure (the median)")
    ap.add_argument("--copy-mb", type=_positive(int, 1), default=512, help="size of the copy-bandwidth buffers, MiB")
    ap.add_argument("--memory-gb", type=_positive(float, 1e-3), default=None,
                    help="device memory budget; sets above it are scaled down (default: a quarter of RAM on CPU "
                         "adapters, 64 GB otherwise)")
    ap.add_argument("--numpy-max", type=_positive(int, 0), default=150_000_000,
                    help="largest set (elements) the NumPy twin is timed on")
    ap.add_argument("--no-torch", action="store_true", help="skip torch's figures even where torch with CUDA is here")
    ap.add_argument("--no-numpy", action="store_true", help="skip the NumPy twin's figures")
    ap.add_argument("--no-host", action="store_true", help="skip the host-path figures")
    ap.add_argument("--no-latency", action="store_true", help="skip the first-step latency probe")
    ap.add_argument("--tune", type=_positive(int, 0), default=0, metavar="N",
                    help="also time AdamW on N elements for several workgroup shapes (0: off)")
    ap.add_argument("--quiet", action="store_true", help="print only the final table")
    args = ap.parse_args(argv)
    for o in (x.strip().lower() for x in args.optimizers.split(",")):
        if o and o not in OPTIMIZERS:
            ap.error(f"unknown optimizer {o!r}; choose from {', '.join(OPTIMIZERS)}")
    for p in (x.strip() for x in args.precisions.split(",")):
        if p and p not in PRECISIONS:
            ap.error(f"unknown precision {p!r}; choose from {', '.join(PRECISIONS)}")
    sets = [x.strip() for x in args.sets.split(",") if x.strip()]
    if not sets:
        ap.error("--sets names no param set")
    for spec in sets:
        try:
            param_set(spec)
        except ValueError as e:
            ap.error(str(e).removeprefix("bench: "))
    return args


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
            get_device(args.device)
        except NoAdapterError as e:
            print(f"rlx-gpu bench: {e}", file=sys.stderr)
            return 2
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
