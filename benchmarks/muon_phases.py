"""Where a Muon step's time goes (issue 24, PERF_NOTES.md 53's unexplained ~2.9 ms outside Newton-Schulz): GPT-2
124M's 48 hidden matrices, ``ns_dtype="float16"`` (the tensor cores on Dawn), default robustness, beside
torch.optim.Muon in the same process, the variants and torch alternating round by round. Per variant:

- ``step_ms``: the steady state, GPU timestamps around ``--steps`` steps in a row (host and GPU overlap);
  ``wall_ms`` the same steps by the host clock; ``one_ms``: one step alone (queue drained before and after: the host's
  encoding is not overlapped, as a timing of one step between two marks gets it).
- ``host_ms``: the host's time inside ``step()`` per step, split (``begin``: the checks; ``records``: the tables and
  the hyper write; ``encode``: Muon's records and dispatches, of which ``ns`` is Newton-Schulz's; ``submit``).
- ``phases``: one step with every phase in a compute pass of its own, timestamps at each pass's start and end:
  momentum, ns_norm (the partial and whole norms), ns_in (f32 -> f16), ns<i>.A / .B / .X (each GEMM), ns_out
  (f16 -> f32), update; ``gaps_ms`` the time between the passes, ``total_ms`` first start to last end.

Variants: "old" (as main before this change: the piece records rebuilt and written every step, the momentum and
the update one element a thread, every f16 conversion through 32 x 32 tiles, the update reading ns_out's float32
copy), "new" (the defaults: the records kept while nothing they depend on changes, ``Muon.reuse_records``; the
momentum, the update and the conversions of the matrices Newton-Schulz does not transpose by vec4s, ``Muon.vec4``;
their update read straight from Newton-Schulz's float16 result, ``Muon.fuse_out``; in both: the GEMMs' problem
tables and the conversions' parameters packed once), "new bk32" (also Newton-Schulz's B on K steps of 32:
``Muon.ns_bases``).

    source .gl/gpu_env.sh && python3 benchmarks/muon_phases.py      # the H200: <= 150 s, JSON lines in $OUT
    python benchmarks/muon_phases.py --dry                          # here: shapes / 16, the emulated kernels
"""
import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

HIDDEN = [(768, 2304), (768, 768), (768, 3072), (3072, 768)] * 12  # GPT-2 124M's attention and MLP matrices
HOST = {"begin": "_begin_checks", "records": "_step_begin", "encode": "_encode", "ns": "_newton_schulz",
        "submit": "_submit"}


def variants():
    """name -> (Muon attributes set on the instance)."""
    from rlx_gpu.linalg import tc
    return {"old": {"reuse_records": False, "vec4": False, "fuse_out": False}, "new": {},
            "new bk32": {"ns_bases": {"B": tc.DEFAULT_SM.with_(bk=32)}}}


def device():
    """Dawn with the package's toggles, default robustness, timestamps unquantised (tc_gemm_bench's devices)."""
    import tc_gemm_bench as tcb
    tcb.DEVICES = {"default": []}
    return tcb.make_devices()["default"]


class Phases:
    """A profiler hook for ``Muon.phase_mark``: each phase in a pass of its own with timestamps at both ends."""

    def __init__(self, dev, slots: int = 128):
        u = dev.wgpu.BufferUsage
        self.dev, self.slots, self.names = dev, slots, []
        self.qs = dev.device.create_query_set(type="timestamp", count=slots)
        self.res = dev.device.create_buffer(size=8 * slots, usage=u.QUERY_RESOLVE | u.COPY_SRC)

    def __call__(self, cp, name) -> None:
        i = len(self.names)
        if 2 * i + 2 > self.slots:
            raise RuntimeError(f"muon_phases: more than {self.slots // 2} phases")
        self.names.append(name)
        cp.split(timestamp_writes={"query_set": self.qs, "beginning_of_pass_write_index": 2 * i,
                                   "end_of_pass_write_index": 2 * i + 1})

    def read(self) -> dict:
        """The last step's phases (ms each; a name seen twice: summed), gaps and total."""
        n = len(self.names)
        enc = self.dev.device.create_command_encoder()
        enc.resolve_query_set(self.qs, 0, 2 * n, self.res, 0)
        self.dev.submit(enc)
        t = self.dev.read(self.res, 0, 16 * n).view(np.uint64).astype(np.float64) * 1e-6
        out: dict = {}
        for k, name in enumerate(self.names):
            out[name] = out.get(name, 0.0) + t[2 * k + 1] - t[2 * k]
        self.names = []
        return {"phases": out, "gaps_ms": float(t[2:][::2].sum() - t[1:-1][::2].sum()), "total_ms": t[-1] - t[0]}


def host_split(opt, n: int) -> dict:
    """Wall ms per step in each of :data:`HOST`'s methods over ``n`` steps (the instance's methods wrapped)."""
    spent = dict.fromkeys(HOST, 0.0)
    for key, meth in HOST.items():
        f = getattr(opt, meth)

        def timed(*a, _f=f, _k=key, **kw):
            t0 = time.perf_counter()
            try:
                return _f(*a, **kw)
            finally:
                spent[_k] += time.perf_counter() - t0
        setattr(opt, meth, timed)
    try:
        opt.device.sync()
        t0 = time.perf_counter()
        for _ in range(n):
            opt.step()
        whole = time.perf_counter() - t0
        opt.device.sync()
    finally:
        for meth in HOST.values():
            delattr(opt, meth)
    return {"step": whole / n * 1e3, **{k: v / n * 1e3 for k, v in spent.items()}}


def measure(opt, timer, steps: int) -> dict:
    """One round of a variant: steady state, one step alone, the host split, a profiled step."""
    from rlx_gpu.tools.bench.timing import median
    gpu, wall = timer.measure(opt.step, steps, 1)
    ones = []
    for _ in range(3):
        opt.device.sync()
        t0 = time.perf_counter()
        opt.step()
        opt.device.sync()
        ones.append((time.perf_counter() - t0) * 1e3)
    row = {"step_ms": gpu * 1e3, "wall_ms": wall * 1e3, "one_ms": median(ones), "host_ms": host_split(opt, steps)}
    if timer.gpu:
        prof = opt.phase_mark = Phases(opt.device)
        try:
            opt.step()
            row.update(prof.read())
        finally:
            opt.phase_mark = None
    return row


def torch_muon(params, grads):
    """torch.optim.Muon on CUDA over the same matrices and grads, as a figure (None without CUDA)."""
    import torch
    if not torch.cuda.is_available():
        return None
    from rlx_gpu.tools.bench.baselines import cuda_ms
    tps = [torch.nn.Parameter(torch.tensor(v, device="cuda")) for v in params.values()]
    for t, g in zip(tps, grads.values()):
        t.grad = torch.tensor(g, device="cuda")
    to = torch.optim.Muon(tps, lr=0.02)
    return lambda: {"step_ms": cuda_ms(torch, to.step, 1, steps=10, warmup=2)}


def run(args, log, rows) -> None:
    import torch  # noqa: F401  (before any wgpu device: docs/guides/pytorch.md, "Import order")

    import rlx_gpu
    from rlx_gpu.tools.bench.timing import Timer
    dev = device()
    rng = np.random.default_rng(2)
    params = {f"w{i}": (rng.standard_normal((r // args.div, c // args.div)) * 0.02).astype(np.float32)
              for i, (r, c) in enumerate(HIDDEN)}
    grads = {k: (rng.standard_normal(v.shape) * 1e-3).astype(np.float32) for k, v in params.items()}
    timer, figures = Timer(dev), {}
    log({"case": "device", "adapter": dev.name, "robustness": dev.robustness, "timestamps": timer.gpu})
    for name, attrs in variants().items():
        try:
            opt = rlx_gpu.Muon(params, lr=0.02, ns_dtype="float16", device=dev)
            for k, v in attrs.items():
                setattr(opt, k, v)
            opt.write_grads(grads)
            opt.step()  # (compiles, makes the work buffers)
            dev.sync()
            figures[name] = lambda opt=opt: measure(opt, timer, args.steps)
            log({"case": "variant", "variant": name, "ns_path": opt.ns_path})
        except Exception as e:  # (a kernel that does not compile: the others go on)
            log({"case": "variant", "variant": name, "error": f"{type(e).__name__}: {e}"})
    t = torch_muon(params, grads)
    if t is not None:
        figures["torch.optim.Muon"] = t
    for r in range(args.rounds):
        for name, f in figures.items():
            try:
                row = {"case": "round", "round": r, "variant": name, **f()}
            except Exception as e:
                row = {"case": "round", "round": r, "variant": name, "error": f"{type(e).__name__}: {e}"}
            log(row)
            rows.append(row)


def table(rows) -> None:
    """Medians over the rounds: a line per variant, then the phases of each."""
    from rlx_gpu.tools.bench.timing import median
    by: dict = {}
    for r in rows:
        if "error" not in r:
            by.setdefault(r["variant"], []).append(r)
    torch_ms = median([r["step_ms"] for r in by.get("torch.optim.Muon", [])]) if "torch.optim.Muon" in by else None
    print(f"{'variant':18} {'step_ms':>8} {'vs torch':>8} {'wall_ms':>8} {'one_ms':>8} {'host':>6} {'encode':>6} "
          f"{'ns':>6} {'submit':>6} {'gpu':>7} {'gaps':>6}")
    for name, rs in by.items():
        m = {k: median([r[k] for r in rs]) for k in ("step_ms", "wall_ms", "one_ms", "total_ms", "gaps_ms")
             if all(k in r for r in rs)}
        h = {k: median([r["host_ms"][k] for r in rs]) for k in ("step", "encode", "ns", "submit")} if "host_ms" in rs[0] else {}
        ratio = f"{torch_ms / m['step_ms']:8.2f}" if torch_ms else f"{'-':>8}"
        print(f"{name:18} {m['step_ms']:8.2f} {ratio} " + " ".join(
            f"{v:{w}.2f}" if v is not None else f"{'-':>{w}}" for v, w in (
                (m.get("wall_ms"), 8), (m.get("one_ms"), 8), (h.get("step"), 6), (h.get("encode"), 6),
                (h.get("ns"), 6), (h.get("submit"), 6), (m.get("total_ms"), 7), (m.get("gaps_ms"), 6))))
    for name, rs in by.items():
        if "phases" in rs[0]:
            ph = {k: median([r["phases"][k] for r in rs]) for k in rs[0]["phases"]}
            ns = sum(v for k, v in ph.items() if k.startswith("ns") and "." in k)
            rest = {k: round(v, 3) for k, v in ph.items() if not (k.startswith("ns") and "." in k)}
            print(f"phases {name}: NS GEMMs {ns:.3f} ms; {rest}")
    decide({k: median([r["step_ms"] for r in rs]) for k, rs in by.items()}, torch_ms)


def decide(step: dict, torch_ms) -> None:
    """The defaults the figures decide."""
    if "old" in step and "new" in step:
        print(f"decide: new / old step {step['new'] / step['old']:.3f} (below 1: keep Muon.reuse_records, "
              "Muon.vec4 and Muon.fuse_out on, the defaults)")
    if "new" in step and "new bk32" in step:
        print(f"decide: bk32 / bk16 step {step['new bk32'] / step['new']:.3f} (below 0.98: tcns.SM_BASES['B'] "
              "to K steps of 32)")
    if torch_ms and step:
        best = min((v, k) for k, v in step.items() if k != "torch.optim.Muon")
        print(f"decide: best {best[1]!r} {best[0]:.2f} ms = {torch_ms / best[0]:.2f}x torch.optim.Muon "
              f"({torch_ms:.2f} ms; issue 24 asks 1.5x)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20, help="steps in a row for the steady state")
    ap.add_argument("--div", type=int, default=1, help="shrink the matrices by this factor")
    ap.add_argument("--limit", type=float, default=140.0, help="seconds before the run stops itself")
    ap.add_argument("--dry", action="store_true", help="here: shapes / 16, the emulated kernels, 1 round")
    args = ap.parse_args()
    if args.dry:
        args.div, args.rounds, args.steps = 16, 1, 3
        os.environ["RLX_GPU_GEMM_PATH"] = "emulated"
    rows: list = []

    def stop():  # (a thread: it also ends a run stuck in native code)
        print(f"muon_phases: stopped at the {args.limit:.0f} s limit; the rounds so far:", flush=True)
        table(rows)
        sys.stdout.flush()
        os._exit(124)
    watchdog = threading.Timer(args.limit, stop)
    watchdog.daemon = True
    watchdog.start()
    out = Path(os.environ.get("OUT", "/tmp"))
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "muon_phases.jsonl", "w") as f:
        def log(row):  # (whole in the file; a round's step figure only on stdout)
            line = json.dumps(row, default=float)
            short = {k: row[k] for k in ("case", "round", "variant", "step_ms", "error") if k in row}
            print(line if row["case"] != "round" else json.dumps(short, default=float), flush=True)
            f.write(line + "\n")
            f.flush()
        run(args, log, rows)
    watchdog.cancel()
    table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
