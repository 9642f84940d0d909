"""Where SOAP's and Kron's steps go (issue 24, PERF_NOTES.md 55's "Where SOAP's refresh goes" and its Next (3)):
GPT-2 124M's 48 hidden matrices, each phase's cost as the step's time less the time of the same step with that
phase knocked out (timing-only: a knocked-out phase records nothing, so those steps' results are wrong on purpose;
:data:`KNOCK` names them, ``tests/test_matrix_phases.py`` checks that each one really removes work). Steady steps
by GPU timestamps around ``--steps`` steps (wall clock where the adapter has none; the host's encoding overlaps),
first steps by the wall clock of one step (queue drained before and after). Rows:

    soap first_cold      a process's first SOAP first step (its shaders compiled there)
    soap first           the same for a second optimizer (compiled): the bases from the grads
    soap compile         first_cold - first
    soap first.grad_qr   the Householder QR of the grad and its Q (the two re-orthonormalising QRs kept)
    soap first.jacobi    the one-sided Jacobi rounds
    soap first.rest      first - grad_qr - jacobi (grams, ordering, re-orthonormalising, the step itself)
    soap plain           a step without refresh (precondition_frequency 10^9)
    soap refresh         a step with refresh (precondition_frequency 1) - plain
    soap refresh.order   the eigenvalue estimates, their order and the gather of M's columns
    soap refresh.panels  the QR's panels (hh_panel: one workgroup a matrix, 32 reflectors in sequence)
    soap refresh.trailing  the QR's updates by GEMM (and, with WIDE, the composition of the blocks' T)
    soap refresh.form_q  the forming of Q
    soap refresh.rest    refresh less those four (M = GG Q, the sign fix, exp_avg_sq's re-ordering)
    kron step            a step with factor updates (precond_update_prob 1)
    kron solves / bounds / gemms  the blocked triangular solves, the norm lower bounds' passes, every GEMM
    kron rest            step less those three

Each value of ``--wide`` runs in a child process of its own with a time limit: it sets householder.WIDE (SOAP's QR;
0 is today's, 128 the blocked one) and factor.WIDE (Kron's triangular solves; the same), which the other optimizer
does not use, so SOAP's rows measure the one and Kron's the other (a crash, hang or compile error loses that child's remaining rows, printed as an error);
the table has a column per value. A value may carry SOAP's first step's switches (PERF_NOTES 71): ``W:gG`` sets
eigen.GRAD_WIDE = G (the grad's QR's own width), ``W:sX`` eigen.STOP = X (the Jacobi's end), ``W:nN`` eigen.SWEEPS
= N (the Jacobi's sweeps at most), ``W:pP`` householder.PANEL = P (the panels' threads, PERF_NOTES 73), ``W:kK``
linalg.record.SPLIT_K = K (the GEMMs' split K, ``k0``: off, PERF_NOTES 74), e.g. ``128:g0:s1e-7``;
``--first-only`` keeps SOAP's first-step rows alone, ``--rounds`` runs the list that many times in turn (each row
the least of its rounds; the JSON has them all).

    source .gl/gpu_env.sh && python3 benchmarks/matrix_phases.py --wide 0,128 --total 170   # the H200
    python3 benchmarks/matrix_phases.py --only soap --first-only --wide 128,128:g0,128:g0:s1e-7 --rounds 2
    python benchmarks/matrix_phases.py --div 32 --matrices 4 --steps 1                       # a smoke run here
"""
import argparse
import contextlib
import functools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]
HIDDEN = [(768, 2304), (768, 768), (768, 3072), (3072, 768)] * 12  # GPT-2 124M's attention and MLP matrices


def _noop(*a, **k):
    return None


class _NoKernel:
    """A kernel that records nothing (a knocked-out pass)."""

    def dispatch(self, *a, **k):
        return None

    def cached_bind(self, *a, **k):
        return None


@contextlib.contextmanager
def patched(*swaps):
    """(object, attribute, replacement) swaps for the duration."""
    old = [(o, n, getattr(o, n)) for o, n, _ in swaps]
    try:
        for o, n, v in swaps:
            setattr(o, n, v)
        yield
    finally:
        for o, n, v in reversed(old):
            setattr(o, n, v)


def _grad_qr_off():
    """eigen's QR of the grad and its Q knocked out, its re-orthonormalising QRs (orthonormalize) kept."""
    from rlx_gpu.linalg import eigen, householder as hh

    def ortho(r, src, dst, s, vs, tbuf, work):
        hh.qr(r, src, s, s, vs, tbuf, work)
        hh.form_q(r, dst, s, s, s, vs, tbuf, work)
        hh.positive_r(r, dst, src, s, s)
    return patched((eigen, "qr", _noop), (eigen, "form_q", _noop), (eigen, "orthonormalize", ortho))


def _trailing_off():
    """The QR's updates (apply_block, compose_t) knocked out inside soap_basis's qr; form_q's kept."""
    from rlx_gpu.linalg import householder as hh
    from rlx_gpu.optim import soap_basis
    qr = hh.qr

    def qr_panels_only(*a, **k):
        with patched((hh, "apply_block", _noop), (hh, "compose_t", _noop)):
            qr(*a, **k)
    return patched((soap_basis, "qr", qr_panels_only))


def _kron_kernels_off(opt, entries):
    k = opt._k
    return patched((opt, "_k", lambda e: _NoKernel() if e in entries else k(e)))


def knock(kind: str, name: str, opt=None):
    """The context that knocks phase ``name`` of ``kind`` ("soap_first", "soap_refresh", "kron") out."""
    from rlx_gpu.linalg import eigen, half, householder as hh
    from rlx_gpu.optim import kron, soap_basis
    table = {("soap_first", "grad_qr"): _grad_qr_off, ("soap_first", "jacobi"): lambda: patched((eigen, "jacobi", _noop)),
             ("soap_refresh", "order"): lambda: patched((soap_basis, "order_by", _noop),
                                                        (soap_basis, "gather_cols", _noop)),
             ("soap_refresh", "panels"): lambda: patched((hh, "panel", _noop)),
             ("soap_refresh", "trailing"): _trailing_off,
             ("soap_refresh", "form_q"): lambda: patched((soap_basis, "form_q", _noop)),
             ("kron", "solves"): lambda: patched((kron, "trsm_right", _noop)),
             ("kron", "bounds"): lambda: _kron_kernels_off(opt, {"kron_nl_col", "kron_nl_vec"}),
             ("kron", "gemms"): lambda: patched((half.FloatProducts, "mm", _noop), (half.HalfProducts, "mm", _noop))}
    return table[kind, name]()


KNOCK = {"soap_first": ("grad_qr", "jacobi"), "soap_refresh": ("order", "panels", "trailing", "form_q"),
         "kron": ("solves", "bounds", "gemms")}


def problem(div: int, matrices: int, seed: int = 0):
    """The parameters and grads: GPT-2's hidden matrices (the first ``matrices``), sides divided by ``div``."""
    rng = np.random.default_rng(seed)
    shapes = [(r // div, c // div) for r, c in HIDDEN[:matrices]]
    params = {f"w{i}": (rng.standard_normal(s) * 0.02).astype(np.float32) for i, s in enumerate(shapes)}
    grads = {k: (rng.standard_normal(v.shape) * 1e-3).astype(np.float32) for k, v in params.items()}
    return params, grads


def first_step_ms(dev, make, ctx=None) -> float:
    """Wall ms of a new optimizer's first step (under ``ctx``), the queue drained before and after."""
    opt = make()
    dev.sync()
    with ctx or contextlib.nullcontext():
        t0 = time.perf_counter()
        opt.step()
        dev.sync()
    return (time.perf_counter() - t0) * 1e3


def soap_rows(dev, timer, make, steps: int, emit, first_only: bool = False) -> None:
    """SOAP's rows (the module's list), each emitted as it is measured (``first_only``: the first step's)."""
    cold = first_step_ms(dev, make)
    first = first_step_ms(dev, make)
    emit("soap", "first_cold", cold)
    emit("soap", "first", first)
    emit("soap", "compile", cold - first)
    parts = {n: first - first_step_ms(dev, make, knock("soap_first", n)) for n in KNOCK["soap_first"]}
    for n, v in parts.items():
        emit("soap", f"first.{n}", v)
    emit("soap", "first.rest", first - sum(parts.values()))
    if first_only:
        return
    opt = make()
    opt.step()

    def per_step(freq, ctx=None):
        opt.param_groups[0]["precondition_frequency"] = freq
        with ctx or contextlib.nullcontext():
            opt.step()  # (a step recorded under ctx, untimed)
            return timer.measure(opt.step, steps, 1)[0] * 1e3
    plain, full = per_step(10 ** 9), per_step(1)
    emit("soap", "plain", plain)
    emit("soap", "refresh", full - plain)
    parts = {n: full - per_step(1, knock("soap_refresh", n)) for n in KNOCK["soap_refresh"]}
    for n, v in parts.items():
        emit("soap", f"refresh.{n}", v)
    emit("soap", "refresh.rest", full - plain - sum(parts.values()))


def kron_rows(dev, timer, make, steps: int, emit) -> None:
    """Kron's rows."""
    opt = make()
    opt.step()

    def per_step(ctx=None):
        with ctx or contextlib.nullcontext():
            opt.step()
            return timer.measure(opt.step, steps, 1)[0] * 1e3
    full = per_step()
    emit("kron", "step", full)
    parts = {n: full - per_step(knock("kron", n, opt)) for n in KNOCK["kron"]}
    for n, v in parts.items():
        emit("kron", n, v)
    emit("kron", "rest", full - sum(parts.values()))


def parse_variant(text: str) -> dict:
    """A --wide value, ``W[:gG][:sX][:nN][:pP][:kK]``: {"wide": W, "grad_wide": G or None, "stop": X or 0.0,
    "sweeps": N or None (eigen's), "panel": P or None (householder's), "split": K or None (linalg.record.SPLIT_K;
    0: SPLIT off)}."""
    head, *rest = text.split(":")
    out = dict(wide=int(head), grad_wide=None, stop=0.0, sweeps=None, panel=None, split=None)
    for part in rest:
        key = {"g": "grad_wide", "s": "stop", "n": "sweeps", "p": "panel", "k": "split"}.get(part[:1])
        if key is None or not part[1:]:
            raise ValueError(f"matrix_phases: {text!r}: after the width, gG (eigen.GRAD_WIDE), sX (eigen.STOP), "
                             f"nN (eigen.SWEEPS), pP (householder.PANEL) or kK (linalg.record.SPLIT_K, 0: off)")
        out[key] = (float if key == "stop" else int)(part[1:])
    return out


def child(args) -> None:
    """One --wide value: the rows as JSON lines on stdout."""
    import torch  # noqa: F401  (before the device, as everywhere)
    import rlx_gpu
    from rlx_gpu.linalg import eigen, factor, householder, record
    from rlx_gpu.tools.bench.guarded import with_grads
    from rlx_gpu.tools.bench.timing import Timer
    v = parse_variant(args.child)
    householder.WIDE = factor.WIDE = v["wide"]
    eigen.GRAD_WIDE, eigen.STOP = v["grad_wide"], v["stop"]
    eigen.SWEEPS = v["sweeps"] or eigen.SWEEPS
    householder.PANEL = v["panel"] or householder.PANEL
    if v["split"] is not None:
        record.SPLIT, record.SPLIT_K = v["split"] > 0, v["split"] or record.SPLIT_K
    dev = rlx_gpu.get_device()
    timer = Timer(dev)
    params, grads = problem(args.div, args.matrices)

    def emit(kind, row, ms):
        print(json.dumps({"kind": kind, "row": row, "ms": ms, "dtype": dt}), flush=True)
    for dt in args.dtypes.split(","):
        for kind in args.only.split(","):
            cls, kw = (rlx_gpu.SOAP, dict(lr=3e-3)) if kind == "soap" else (
                rlx_gpu.Kron, dict(lr=1e-3, precond_update_prob=1.0))
            make = functools.partial(lambda c, k: with_grads(c(params, device=dev, **k), grads), cls,
                                     dict(kw, matmul_dtype=dt))
            try:
                if kind == "soap":
                    soap_rows(dev, timer, make, args.steps, emit, args.first_only)
                else:
                    kron_rows(dev, timer, make, args.steps, emit)
            except Exception as e:  # (a shader that does not compile: that kind's rows lost, the rest go on)
                print(json.dumps({"kind": kind, "row": "error", "error": f"{type(e).__name__}: {e}"[:300],
                                  "dtype": dt}), flush=True)


def run_children(args):
    """Each --wide value in a child with its share of --total, the list --rounds times; {(kind, dtype, row): {wide:
    [ms, ...]}} and errors."""
    rows, errors, end = {}, [], time.monotonic() + args.total
    values = args.wide.split(",")
    for v in values:
        parse_variant(v)  # (a bad value before any child runs)
    todo = values * args.rounds
    for i, wide in enumerate(todo):
        limit = (end - time.monotonic()) / (len(todo) - i)
        cmd = [sys.executable, __file__, "--child", wide, "--div", str(args.div), "--matrices",
               str(args.matrices), "--steps", str(args.steps), "--only", args.only, "--dtypes", args.dtypes] + (
                   ["--first-only"] if args.first_only else [])
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=max(limit, 1))
            out, why = p.stdout, None if p.returncode == 0 else f"exit status {p.returncode}: {p.stderr[-300:]}"
        except subprocess.TimeoutExpired as e:
            out, why = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), \
                f"cut at {limit:.0f} s"
        for line in out.splitlines():
            if line.startswith("{"):
                r = json.loads(line)
                if r["row"] == "error":
                    errors.append(f"wide {wide} {r['dtype']} {r['kind']}: {r['error']}")
                else:
                    rows.setdefault((r["kind"], r["dtype"], r["row"]), {}).setdefault(wide, []).append(r["ms"])
        if why:
            errors.append(f"wide {wide}: {why}")
    return values, rows, errors


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wide", default="0,128", help="householder.WIDE values (W[:gG][:sX]: eigen.GRAD_WIDE, "
                    "eigen.STOP too), a child process each")
    ap.add_argument("--first-only", action="store_true", help="SOAP's first-step rows only")
    ap.add_argument("--rounds", type=int, default=1, help="the --wide list this many times, in turn")
    ap.add_argument("--div", type=int, default=1, help="the matrices' sides divided by this")
    ap.add_argument("--matrices", type=int, default=48, help="the first this many of the 48")
    ap.add_argument("--steps", type=int, default=3, help="steady steps timed per figure")
    ap.add_argument("--only", default="soap,kron")
    ap.add_argument("--dtypes", default="float32", help="matmul_dtype values (float32, float16)")
    ap.add_argument("--total", type=float, default=170.0, help="seconds for all children together")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        return child(args)
    values, rows, errors = run_children(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "matrix_phases.json").write_text(json.dumps(
        {"wide": values, "rows": [dict(kind=k, dtype=d, row=r, ms={w: min(x) for w, x in v.items()}, rounds=v)
                                  for (k, d, r), v in rows.items()], "errors": errors, "args": vars(args)}, indent=1))
    width = max(11, *(len(w) + 5 for w in values))
    print(f"{'kind':5} {'dtype':8} {'row':18}" + "".join(f" {'wide ' + w:>{width}}" for w in values))
    for (k, d, r), v in rows.items():
        print(f"{k:5} {d:8} {r:18}" + "".join(f" {min(v[w]):{width}.2f}" if w in v else f" {'-':>{width}}"
                                              for w in values))
    for e in errors:
        print("error", e)


if __name__ == "__main__":
    main()
