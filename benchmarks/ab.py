"""Checkouts of rlx_gpu timed side by side: ``rlx-gpu bench`` run from each in turn (A, B, A, B, ...) in one
session on one adapter, and every row's time per step compared (the median over the rounds of each checkout).

    python benchmarks/ab.py OLD_DIR NEW_DIR [MORE_DIRS] --rounds 2 --json out.json -- --sets gpt2-124m --repeats 5

Everything after ``--`` goes to every bench (use options all checkouts know). A row is keyed by optimizer, param
set and dtype (fp32 for a checkout whose rows have none); a checkout's ``speed`` is the first checkout's ms over its
own (above 1: faster than the first). What the redesign of issue 10 was measured with (BENCHMARKS.md, "Before and
after the engine redesign").
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def bench_once(tree: str, bench_args: list, timeout: float) -> dict:
    """One ``python -m rlx_gpu bench`` with ``tree`` first on the import path; its JSON report."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.abspath(tree)] + [p for p in env.get("PYTHONPATH", "").split(
        os.pathsep) if p])
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "bench.json")
        r = subprocess.run([sys.executable, "-m", "rlx_gpu", "bench", *bench_args, "--json", out, "--quiet"],
                           cwd=os.path.abspath(tree), env=env, capture_output=True, text=True, timeout=timeout)
        if r.returncode:
            raise SystemExit(f"ab: bench in {tree} failed ({r.returncode}):\n{r.stderr[-3000:]}")
        with open(out) as f:
            return json.load(f)


def combine(trees: list, runs: dict) -> list:
    """Rows keyed (optimizer, param set, dtype) with each checkout's ms per round, their medians, and the speed of
    each checkout relative to the first."""
    rows = {}
    for tree in trees:
        for rep in runs[tree]:
            for r in rep["rows"]:
                key = (r["optimizer"], r["param_set"], r.get("dtype", "fp32"))
                rows.setdefault(key, {t: [] for t in trees})[tree].append(r["ms_per_step"])
    out = []
    for (opt, pset, dt), v in rows.items():
        if not all(v.values()):
            continue
        ms = {t: statistics.median(v[t]) for t in trees}
        out.append({"optimizer": opt, "param_set": pset, "dtype": dt, "ms": ms, "runs": v,
                    "speed": {t: ms[trees[0]] / ms[t] for t in trees[1:]}})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("trees", nargs="+", help="checkouts (each one's rlx_gpu package first on the path in turn); the "
                                             "first is the baseline")
    ap.add_argument("--rounds", type=int, default=2, help="turns of every checkout")
    ap.add_argument("--json", help="write the reports and the comparison here (after every bench, so a run cut short "
                                   "keeps what it measured)")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds one bench may take")
    args, rest = ap.parse_known_args(argv)
    bench_args = rest[1:] if rest[:1] == ["--"] else rest
    if args.rounds < 1:
        ap.error("--rounds must be >= 1")
    if len(args.trees) < 2 or len(set(args.trees)) < len(args.trees):
        ap.error("give at least two different checkouts")
    for tree in args.trees:
        if not os.path.isdir(os.path.join(tree, "rlx_gpu")):
            ap.error(f"{tree!r} holds no rlx_gpu package")
    trees, runs = args.trees, {t: [] for t in args.trees}
    for i in range(args.rounds):
        for tree in trees:
            runs[tree].append(bench_once(tree, bench_args, args.timeout))
            print(f"round {i + 1} {tree}: {len(runs[tree][-1]['rows'])} rows", flush=True)
            if args.json:
                with open(args.json, "w") as f:
                    json.dump({"trees": trees, "bench_args": bench_args, "runs": runs,
                               "rows": combine(trees, runs)}, f, indent=1)
    rows = combine(trees, runs)
    print("| optimizer | param set | dtype | " + " | ".join(f"{t} ms" for t in trees) + " | "
          + " | ".join(f"{trees[0]}/{t}" for t in trees[1:]) + " |")
    print("|---" * (3 + 2 * len(trees) - 1) + "|")
    for r in rows:
        print(f"| {r['optimizer']} | {r['param_set']} | {r['dtype']} | "
              + " | ".join(f"{r['ms'][t]:.3f}" for t in trees) + " | "
              + " | ".join(f"{r['speed'][t]:.3f}" for t in trees[1:]) + " |")
    for t in trees[1:]:
        if rows:
            worst = min(rows, key=lambda r: r["speed"][t])
            print(f"{t}: slowest relative to {trees[0]}: {worst['optimizer']} {worst['param_set']} "
                  f"{worst['dtype']} {worst['speed'][t]:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
