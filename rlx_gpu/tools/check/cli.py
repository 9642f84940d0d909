"""``rlx-gpu check-shaders``: the command line and its report. The validators are the package's (``__init__``), which
passes them in: this module imports nothing of it."""
from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict
from pathlib import Path

DESCRIPTION = ("Validate WGSL files (every shader the package ships, or yours) with naga's CLI, naga inside wgpu "
               "and Tint, each file as the runtime compiles it: includes resolved, override constants set.")
EPILOG = ("validators: naga-cli (the naga executable on PATH or named by RLX_GPU_NAGA; also translates to SPIR-V, "
          "MSL, HLSL and GLSL), wgpu (a module and a compute pipeline per entry point on the selected adapter), tint "
          "(Dawn's compiler, no GPU needed: pip install rlx_gpu[check]). Exit status: 0 nothing failed, 1 something "
          "failed, 2 bad usage or a file no requested validator could check.")


def unchecked(results: list) -> list:
    """Files that no requested validator could check (every result for them is "unavailable")."""
    by_file: dict = {}
    for r in results:
        by_file.setdefault(r.file, []).append(r.status)
    return [f for f, st in by_file.items() if all(s == "unavailable" for s in st)]


def _seconds(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not (math.isfinite(v) and v > 0):
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds > 0, got {text!r}")
    return v


def report(results: list, quiet: bool = False) -> str:
    """The text report: a line per result (``quiet``: only failures and unavailable validators), then the counts."""
    lines, said = [], set()
    for r in results:
        if r.status == "pass":
            if not quiet:
                lines.append(f"pass           [{r.validator}] {r.file}")
        elif r.status == "unavailable":
            same = [x.file for x in results if x.validator == r.validator and x.reason == r.reason]
            if len(same) > 1:  # one line for a validator that is missing for every file
                if (r.validator, r.reason) not in said:
                    said.add((r.validator, r.reason))
                    lines.append(f"not available  [{r.validator}] ({len(same)} files): {r.reason}")
            else:
                lines.append(f"not available  [{r.validator}] {r.file}: {r.reason}")
        else:
            for d in r.diagnostics:
                tgt = f" ({d.target})" if d.target else ""
                via = f" (included by {r.file})" if d.file != r.file else ""
                lines.append(f"FAIL           [{r.validator}{tgt}] {d.where()}{via}: {d.message}")
    n = {k: sum(r.status == k for r in results) for k in ("pass", "fail", "unavailable")}
    lines.append(f"check-shaders: {n['pass']} pass, {n['fail']} fail, {n['unavailable']} not available")
    return "\n".join(lines)


def parser(validators: tuple) -> argparse.ArgumentParser:
    """The command's arguments."""
    ap = argparse.ArgumentParser(prog="rlx-gpu check-shaders", description=DESCRIPTION, epilog=EPILOG)
    ap.add_argument("paths", nargs="*", help=".wgsl files or folders (default: every shader the package ships)")
    ap.add_argument("--validator", default="all", choices=(*validators, "all"),
                    help="which validator to run (default: all, each that is available)")
    ap.add_argument("--json", action="store_true", help="print one JSON report instead of text")
    ap.add_argument("--quiet", "-q", action="store_true",
                    help="print only failures, validators that are not available and the counts")
    ap.add_argument("--device", default=None,
                    help="adapter for the wgpu validator (default: RLX_GPU_ADAPTER, else the best)")
    ap.add_argument("--timeout", type=_seconds, default=60.0,
                    help="seconds per file and validator before it counts as hung (default: 60)")
    return ap


def command(argv, validators: tuple, run) -> int:
    """``rlx-gpu check-shaders [paths] [--validator V] [--json] [--quiet] [--device SEL] [--timeout S]`` with
    ``run(paths, validators, device, timeout)`` doing the checks: the exit status (0 nothing failed, 1 something
    failed, 2 bad usage or nothing checked)."""
    try:
        args = parser(validators).parse_args(argv)
    except SystemExit as e:
        return 2 if e.code else 0
    chosen = validators if args.validator == "all" else (args.validator,)
    try:
        results = run(args.paths, chosen, args.device, args.timeout)
    except FileNotFoundError as e:
        print(f"rlx-gpu check-shaders: no such file or folder: {e}", file=sys.stderr)
        return 2
    failed = any(r.status == "fail" for r in results)
    missed = unchecked(results)
    if args.json:
        print(json.dumps({"ok": not failed and not missed and bool(results), "unchecked": missed,
                          "results": [asdict(r) for r in results]}, indent=1))
    else:
        print(report(results, args.quiet))
    if failed:
        return 1
    if not results:
        print("rlx-gpu check-shaders: no .wgsl files to check", file=sys.stderr)
        return 2
    if missed:
        print(f"rlx-gpu check-shaders: {len(missed)} file(s) could not be checked by any requested validator "
              f"({', '.join(Path(f).name for f in missed[:5])}{', ...' if len(missed) > 5 else ''}); nothing was "
              "validated for them", file=sys.stderr)
        return 2
    return 0
