"""The matrix optimizers' one H200 run (issue 24): benchmarks/precond_bench.py (SOAP, Kron) and stiefel_bench.py at
full size (GPT-2 124M's 48 hidden matrices), float32 and float16 paths, against pytorch_optimizer and geoopt's math
in torch on the same card, in child processes with their own time limits (a crash, a hang or a shader that does not
compile loses that job's remaining figures, not the run), all within ``--total`` seconds (default 345):

    soap       wgpu-native  SOAP f32, f32 without refresh, f16 (gemm16: wgpu-native has no subgroup matrices);
                            pytorch_optimizer.SOAP
    kron       wgpu-native  Kron f32, f32 without factor updates, f16 (gemm16); pytorch_optimizer.Kron
    stiefel    wgpu-native  StiefelSGD QR (euclidean) and Cayley (canonical) retractions, f32 and f16; torch
    dawn_f16   dawn         SOAP and Kron f16 (the tensor-core GEMM where Dawn offers subgroup matrices), and
                            without refresh / updates
    dawn_stf   dawn         StiefelSGD f16, both retractions

Each job's stdout, stderr and JSON go to $OUT (or ``--out``); a compact table (milliseconds a step, the ratio to the
job's baseline where it has one, the GEMM path, errors) is printed last, from the JSON or, for a job cut short, from
the figures it printed. ``--div`` shrinks the matrices (a smoke run, e.g. on llvmpipe).

    python benchmarks/matrix_h200.py [--total 345] [--div 1] [--out DIR] [--only soap,kron,...]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# name: (implementation, script and arguments, time limit s, rounds' budget s)
JOBS = {"soap": ("wgpu-native", ["precond_bench.py", "--only", "soap"], 100, 45),
        "kron": ("wgpu-native", ["precond_bench.py", "--only", "kron"], 75, 35),
        "stiefel": ("wgpu-native", ["stiefel_bench.py"], 80, 35),
        "dawn_f16": ("dawn", ["precond_bench.py", "--matmul-dtypes", "float16", "--no-baseline"], 50, 20),
        "dawn_stf": ("dawn", ["stiefel_bench.py", "--matmul-dtypes", "float16", "--no-baseline"], 40, 15)}
FIGURE = re.compile(r"^(\S+) (-?[0-9.]+(?:e-?\d+)?) ms$")
ERROR = re.compile(r"^(\S+) error: (.*)$")


def run_job(name, impl, argv, limit, budget, args, out):
    """One job in a child process: its report (the JSON, else what its printed lines give) and how it ended."""
    js = out / f"{name}.json"
    cmd = [sys.executable, str(HERE / argv[0]), *argv[1:], "--div", str(args.div), "--budget", str(budget),
           "--json", str(js)]
    env = {**os.environ, "RLX_GPU_IMPLEMENTATION": impl}
    t0 = time.monotonic()
    with open(out / f"{name}.txt", "w") as so, open(out / f"{name}.log", "w") as se:
        try:
            rc = subprocess.run(cmd, stdout=so, stderr=se, env=env, timeout=limit).returncode
            ended = "ok" if rc == 0 else f"exit status {rc}"
        except subprocess.TimeoutExpired:
            ended = f"cut at {limit:.0f} s"
    seconds = time.monotonic() - t0
    if ended == "ok" and js.exists():
        rep = json.loads(js.read_text())
    else:
        rep = from_lines((out / f"{name}.txt").read_text())
        tail = (out / f"{name}.log").read_text().strip().splitlines()[-1:]
        rep["errors"]["(job)"] = ended + (f": {tail[0][:200]}" if tail else "")
    return rep, ended, seconds


def from_lines(text):
    """A cut-short job's figures from its printed ``key <ms> ms`` lines (medians) and ``key error:`` lines."""
    seen, errors = {}, {}
    for line in text.splitlines():
        if m := FIGURE.match(line.strip()):
            seen.setdefault(m[1], []).append(float(m[2]))
        elif m := ERROR.match(line.strip()):
            errors[m[1]] = m[2]
    figures = {k: statistics.median(v) for k, v in seen.items() if not k.endswith("first_step_ms")}
    first = {k: v[0] for k, v in seen.items() if k.endswith("first_step_ms")}
    return {"figures": figures, "first_step": first, "errors": errors, "paths": {}}


def baseline_of(key, figures):
    """The figure ``key`` is compared with: pytorch_optimizer's (po_soap, po_kron) or torch's (torch_euclidean...)."""
    name = key.split("_")[0]
    for b in (f"po_{name}_ms", f"torch_{name}_ms"):
        if b in figures and b != key:
            return figures[b]
    return None


def table(results):
    """The compact table: one line a figure (ms, x baseline, first step, path), then errors."""
    lines = [f"{'job':9} {'figure':34} {'ms/step':>10} {'x base':>7} {'1st step ms':>12}  path"]
    for name, (rep, ended, seconds) in results.items():
        figs, first = rep.get("figures", {}), rep.get("first_step", {})
        for k, v in figs.items():
            b = baseline_of(k, figs)
            ratio = f"{b / v:7.2f}" if b and not k.startswith(("po_", "torch_")) else " " * 7
            f1 = first.get(k.replace("_ms", "_first_step_ms"))
            path = rep.get("paths", {}).get(k[:-3], "")
            lines.append(f"{name:9} {k:34} {v:10.2f} {ratio} {f1 if f1 is None else round(f1, 1)!s:>12}  {path}")
        lines.append(f"{name:9} ({ended}, {seconds:.0f} s, {rep.get('implementation', '?')}, "
                     f"{rep.get('adapter', '?')})")
        lines += [f"{name:9}   error {k}: {e}" for k, e in rep.get("errors", {}).items()]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--total", type=float, default=345.0, help="seconds for all jobs together")
    ap.add_argument("--div", type=int, default=1)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--only", default=",".join(JOBS))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    end, results = time.monotonic() + args.total, {}
    for name in args.only.split(","):
        impl, argv, limit, budget = JOBS[name]
        left = end - time.monotonic()
        if left < 20:
            results[name] = ({"errors": {"(job)": f"not run: {left:.0f} s left of --total"}}, "skipped", 0.0)
            continue
        limit = min(limit, left)
        print(f"{name}: {impl} {' '.join(argv)} (limit {limit:.0f} s)", flush=True)
        results[name] = run_job(name, impl, argv, limit, min(budget, limit / 2), args, out)
    (out / "matrix_h200.json").write_text(json.dumps({k: v[0] | {"ended": v[1], "seconds": v[2]}
                                                      for k, v in results.items()}, indent=1))
    print(table(results))


if __name__ == "__main__":
    main()
