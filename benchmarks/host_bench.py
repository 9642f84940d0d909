"""The host path of small steps against bare wgpu-py floors (issue 25), and with torch on CUDA against its fused AdamW.

Every figure below is measured once per round, in turn, over ``--rounds`` rounds in one process (so drift and
other load hit them alike), and reported as the median over rounds:

- ``rows``: AdamW from the device grad slots (``opt.step()``), plain, checked (``clip_grad_norm=1.0,
  skip_nonfinite=True``), scheduled (plain, with ``set_lr`` before every step; against the plain step's floor)
  and scheduler (plain, with ``rlx_gpu.schedules``' cosine schedule stepped after every step: it writes each
  group's lr, as torch's schedulers do, and the step checks the changed value; the plain step's floor), at 1, 20
  and 148 tensors of ``--numel`` elements, each against its floor: the same step's native calls recorded once and replayed with bare wgpu-py (:class:`Floor`: the same pipelines, bind groups, grids
  and writes, so the same GPU work, and none of our Python; the outcome copies of checked steps left out). Per
  step: ``call_us``, the wall time of a call with the device idle (synchronised before it: the host's share),
  ``wall_us`` and ``cpu_us`` (the main thread's CPU time) over back-to-back steps; ``ratio_*`` = ours / floor
  (issue 25's target: <= 1.5 plain and checked).
- ``vs_torch`` (CUDA only): the plain and the checked step on 20 x 50,000 params against
  ``torch.optim.AdamW(fused=True)`` on CUDA, wall clock per step over ``--steps`` steps (targets: torch / plain
  >= 1.0, checked / plain <= 2).
- ``dropin``: ``rlx_gpu.AdamW(model.parameters())`` on a 26k-parameter CPU MLP: ``opt.step()`` (which writes the
  new values back into the tensors) against the NumPy API's ``opt.step(grads)`` with the same NumPy grads, alone
  and followed by ``read_params(out=...)`` (``ratio_*``, ``ratio_*_vs_read``; target: drop-in / NumPy <= 2).
- ``--gpt2``: the drop-in on CPU tensors of GPT-2 small's shapes (124M params) against torch's CPU fused AdamW.

    python benchmarks/host_bench.py --json benchmarks/logs/host_bench.json       # the H200: add --gpt2
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import torch  # (before any wgpu device)

import rlx_gpu
from rlx_gpu.tools.bench.shapes import param_set
from rlx_gpu.tools.bench.timing import alternating, report

class _Proxy:
    """A wgpu encoder or compute pass that logs every call into ``log`` (and makes it)."""

    def __init__(self, real, kind: str, log: list):
        self._real, self._kind, self._log = real, kind, log

    def __getattr__(self, name):
        fn = getattr(self._real, name)

        def call(*a, **k):
            self._log.append((self._kind, name, a, k))
            out = fn(*a, **k)
            return _Proxy(out, "pass", self._log) if name == "begin_compute_pass" else out
        return call


class Floor:
    """The bare wgpu-py calls one step of ``opt`` makes, recorded once and replayed: the same pipelines, bind groups,
    grids and writes (so the same GPU work), without any of our Python. Copies into mappable buffers (the outcome
    read-backs) are left out. ``opt`` is used for nothing else afterwards (replaying moves its device counters)."""

    def __init__(self, opt):
        dev, log = opt.device, []
        d, q = dev.device, dev.queue
        real = d.create_command_encoder, q.write_buffer, q.submit
        d.create_command_encoder = lambda *a, **k: (log.append(("new", "", a, k)),
                                                    _Proxy(real[0](*a, **k), "enc", log))[1]
        q.write_buffer = lambda *a, **k: (log.append(("queue", "write_buffer", tuple(
            np.array(x, copy=True) if isinstance(x, np.ndarray) else x for x in a), k)), real[1](*a, **k))[1]
        q.submit = lambda cbs: (log.append(("queue", "submit", (), {})), real[2](cbs))[1]
        try:
            opt.step()
        finally:
            del d.create_command_encoder, q.write_buffer, q.submit
        mapped = opt.device.wgpu.BufferUsage.MAP_READ
        self.ops = [op for op in log if not (op[1] == "copy_buffer_to_buffer" and op[2][2].usage & mapped)]
        self.d, self.q = d, q
        self.calls = len(self.ops)

    def step(self) -> None:
        enc = p = cb = None
        for kind, name, a, k in self.ops:
            if kind == "new":
                enc = self.d.create_command_encoder(*a, **k)
            elif kind == "queue":
                if name == "submit":
                    self.q.submit([cb])
                else:
                    self.q.write_buffer(*a, **k)
            elif kind == "enc":
                r = getattr(enc, name)(*a, **k)
                if name == "begin_compute_pass":
                    p = r
                elif name == "finish":
                    cb = r
            else:
                getattr(p, name)(*a, **k)


def per_step(fn, sync, steps: int, idle=None) -> dict:
    """Microseconds per call of ``fn``: ``wall_us`` and ``cpu_us`` (the main thread's CPU time) over ``steps``
    back-to-back calls (``sync`` at both ends), and ``call_us``, the median wall time of a call made with the device
    idle (``idle``, default ``sync``, before each of ``steps`` more calls): the host's share alone."""
    sync()
    t0, c0 = time.perf_counter(), time.thread_time()
    for _ in range(steps):
        fn()
    c1 = time.thread_time()
    sync()
    t1 = time.perf_counter()
    calls = []
    for _ in range(steps):
        (idle or sync)()
        t = time.perf_counter()
        fn()
        calls.append(time.perf_counter() - t)
    sync()
    return {"wall_us": 1e6 * (t1 - t0) / steps, "cpu_us": 1e6 * (c1 - c0) / steps,
            "call_us": 1e6 * float(np.median(calls))}


KINDS = (("plain", {}), ("checked", {"clip_grad_norm": 1.0, "skip_nonfinite": True}), ("scheduled", {}),
         ("scheduler", {}))


def scheduled(opt):
    """The plain step with a new lr before each (a scheduler's: its floor is the plain step's, whose calls are the
    same with other record words)."""
    n = [0]

    def step():
        n[0] += 1
        opt.set_lr(1e-3 / (1 + 1e-6 * n[0]))
        opt.step()
    return step


def scheduler(opt):
    """The plain step, then a cosine schedule's step (it writes every group's lr, as torch's schedulers do)."""
    sched = rlx_gpu.schedules.CosineAnnealingLR(opt, T_max=10 ** 9)

    def step():
        opt.step()
        sched.step()
    return step


def host_steps(dev, tensors, numel: int, steps: int, rounds: int) -> list:
    """Ours and the floors, plain, checked, scheduled and scheduler, at each tensor count."""
    rows = []
    for n in tensors:
        params = {f"t{i}": np.full(numel, 0.01, np.float32) for i in range(n)}
        figs = {}
        for kind, kw in KINDS:
            opt, twin = (rlx_gpu.AdamW(params, lr=1e-3, device=dev, **kw) for _ in range(2))
            for o in (opt, twin):
                for k in params:
                    o.grads[k].write(np.full(numel, 1e-3, np.float32))
                for _ in range(3):  # (past the first steps: their record tables are made)
                    o.step()
            floor = Floor(twin)
            step = {"scheduled": scheduled, "scheduler": scheduler}.get(kind, lambda o: o.step)(opt)
            figs[f"{kind} ours"] = lambda o=opt, f=step: per_step(f, lambda: (o.last_step_skipped, dev.sync()),
                                                                  steps, dev.sync)
            figs[f"{kind} floor"] = lambda f=floor: per_step(f.step, dev.sync, steps)
        every = in_turn(figs, rounds)
        for kind, _ in KINDS:
            ours, floor = med_of(every[f"{kind} ours"]), med_of(every[f"{kind} floor"])
            rows.append({"tensors": n, "numel_each": numel, "step": kind, "ours": ours, "floor": floor,
                         **{f"ratio_{k[:-3]}": ours[k] / floor[k] for k in ours}})
            print(f"{n:4d} tensors {kind:8s} ours/floor: call {ours['call_us']:6.1f} / {floor['call_us']:6.1f} us "
                  f"({rows[-1]['ratio_call']:.2f}), back-to-back wall {ours['wall_us']:7.1f} / {floor['wall_us']:7.1f}"
                  f" ({rows[-1]['ratio_wall']:.2f}), cpu {ours['cpu_us']:6.1f} / {floor['cpu_us']:6.1f} "
                  f"({rows[-1]['ratio_cpu']:.2f})", flush=True)
    return rows


def in_turn(figures: dict, rounds: int) -> dict:
    """Each figure (name -> a function returning a dict of measurements) once per round, in turn: every result."""
    got = {k: [] for k in figures}
    for _ in range(rounds):
        for k, f in figures.items():
            got[k].append(f())
    return got


def med_of(runs: list) -> dict:
    return {k: float(np.median([r[k] for r in runs])) for k in runs[0]}


def vs_torch(dev, steps: int, rounds: int) -> dict:
    """The 20 x 50,000 AdamW step, plain and checked, against torch's fused AdamW on CUDA (wall clock)."""
    shapes = [(50_000,)] * 20
    params = {f"t{i}": np.full(s, 0.01, np.float32) for i, s in enumerate(shapes)}
    figs = {}
    for kind, kw in (("plain", {}), ("checked", {"clip_grad_norm": 1.0, "skip_nonfinite": True})):
        opt = rlx_gpu.AdamW(params, lr=1e-3, device=dev, **kw)
        for k, a in params.items():
            opt.grads[k].write(np.full(a.shape, 1e-3, np.float32))
        opt.step()
        figs[kind] = lambda o=opt: per_step(o.step, lambda: (o.last_step_skipped, dev.sync()), steps)["wall_us"]
    ps = [torch.full(s, 0.01, device="cuda") for s in shapes]
    for p in ps:
        p.grad = torch.full_like(p, 1e-3)
    tor = torch.optim.AdamW(ps, lr=1e-3, fused=True)
    tor.step()
    figs["torch fused"] = lambda: per_step(tor.step, torch.cuda.synchronize, steps)["wall_us"]
    med, every = alternating(figs, rounds)
    return {"us_per_step": med, "all": every, "torch_over_plain": med["torch fused"] / med["plain"],
            "checked_over_plain": med["checked"] / med["plain"]}


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.Tanh(), torch.nn.Linear(128, 128), torch.nn.Tanh(),
                               torch.nn.Linear(128, 10))


def dropin(dev, steps: int, rounds: int) -> dict:
    """The drop-in's opt.step() on a 26k-param CPU MLP against the NumPy API's step on the same grads (main thread
    CPU time per step; wall time beside it)."""
    model = mlp()
    for p in model.parameters():
        p.grad = torch.randn_like(p) * 1e-3
    ours = rlx_gpu.AdamW(model.parameters(), lr=1e-3, device=dev)
    arrays = {str(i): p.detach().numpy().copy() for i, p in enumerate(model.parameters())}
    grads = {str(i): p.grad.numpy().copy() for i, p in enumerate(model.parameters())}
    api = rlx_gpu.AdamW(arrays, lr=1e-3, device=dev)
    out = api.read_params()
    figs = {"dropin": lambda: per_step(ours.step, dev.sync, steps),
            "numpy step": lambda: per_step(lambda: api.step(grads), dev.sync, steps),
            "numpy step + read": lambda: per_step(lambda: (api.step(grads), api.read_params(out=out)), dev.sync,
                                                  steps)}
    every = in_turn(figs, rounds)
    d, a, r = (med_of(every[k]) for k in figs)
    return {"params": sum(p.numel() for p in model.parameters()), "dropin": d, "numpy_step": a, "numpy_step_read": r,
            **{f"ratio_{k[:-3]}": d[k] / a[k] for k in d}, **{f"ratio_{k[:-3]}_vs_read": d[k] / r[k] for k in d}}


def gpt2_dropin(dev, steps: int, rounds: int) -> dict:
    """The drop-in on CPU tensors of GPT-2 small's shapes against torch's fused AdamW on the CPU (wall clock)."""
    shapes = [s for _, s in param_set("gpt2-124m")]
    ts = [torch.full(s, 0.01) for s in shapes]
    for t in ts:
        t.grad = torch.full_like(t, 1e-3)
    ours = rlx_gpu.AdamW(ts, lr=1e-3, device=dev)
    ref = [t.clone() for t in ts]
    for t in ref:
        t.grad = torch.full_like(t, 1e-3)
    tor = torch.optim.AdamW(ref, lr=1e-3, fused=True)
    ours.step()
    tor.step()
    figs = {"dropin": lambda: per_step(ours.step, dev.sync, steps)["wall_us"] / 1e3,
            "torch cpu fused": lambda: per_step(tor.step, lambda: None, steps)["wall_us"] / 1e3}
    med, every = alternating(figs, rounds)
    return {"ms_per_step": med, "all": every, "torch_over_dropin": med["torch cpu fused"] / med["dropin"]}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tensors", default="1,20,148", help="tensor counts of the floor comparison")
    ap.add_argument("--numel", type=int, default=4096, help="elements per tensor there")
    ap.add_argument("--steps", type=int, default=200, help="back-to-back steps per measurement")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--gpt2", action="store_true", help="also the drop-in on GPT-2 small's shapes (large)")
    ap.add_argument("--floors-only", action="store_true", help="only the floor comparison (rows)")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    dev = rlx_gpu.get_device()
    out = {"adapter": dev.name, "rounds": args.rounds, "steps": args.steps,
           "rows": host_steps(dev, [int(x) for x in args.tensors.split(",")], args.numel, args.steps, args.rounds)}
    if args.floors_only:
        report(out, args.json)
        return out
    if torch.cuda.is_available():
        out["vs_torch"] = vs_torch(dev, args.steps, args.rounds)
    out["dropin"] = dropin(dev, max(1, args.steps // 4), args.rounds)
    if args.gpt2:
        out["gpt2_dropin"] = gpt2_dropin(dev, max(1, args.steps // 40), max(5, args.rounds))
    report(out, args.json)
    return out


if __name__ == "__main__":
    main()
