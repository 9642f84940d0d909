"""One rank of tests/test_distributed.py (run by torch.distributed.run): ZeRO-1 over gloo with rank-dependent
grads; every rank writes its params after every step (and whether the step was skipped) to <out>.rank<r>.npz.
Arguments: out, optimizer class, steps, options (a dict literal; "topk": (ratio, error feedback) compresses;
"scaler": a GradScaler's initial scale, growth every 2 steps),
first step's number (grads' seeds),
a checkpoint to restore first ('-': none), a checkpoint to save at the end ('-': none)."""
import ast
import datetime
import os
import sys

import torch  # noqa: F401  (before any wgpu device: docs/guides/pytorch.md)
import torch.distributed as dist
import numpy as np

import rlx_gpu
import rlx_gpu.compression
from rlx_gpu.distributed import ZeroRedundancyOptimizer

out, cls_name, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
opts = ast.literal_eval(sys.argv[4]) if len(sys.argv) > 4 else {}
first = int(sys.argv[5]) if len(sys.argv) > 5 else 0
restore, save = (sys.argv[6], sys.argv[7]) if len(sys.argv) > 7 else ("-", "-")
die_at = int(sys.argv[8]) if len(sys.argv) > 8 else -1  # (the last rank exits before this step)
mode = sys.argv[9] if len(sys.argv) > 9 else ""
checks = mode == "checks"  # (bad input, after the run and its save)
if os.environ.get("ZERO_BACKEND") == "mpi":  # (launched by mpirun: mpi4py's communicator)
    from mpi4py import MPI
    group = MPI.COMM_WORLD
    rank, world = group.Get_rank(), group.Get_size()
else:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    group, rank, world = None, dist.get_rank(), dist.get_world_size()
rng = np.random.default_rng(0)
shapes = {"a": (37, 5), "b": (11,), "c": (4, 4, 3), "d": (1,)}
params = {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}
topk = opts.pop("topk", None)  # (ratio, error feedback): top-k compression
scaler = rlx_gpu.GradScaler(init_scale=opts.pop("scaler"), growth_interval=2) if "scaler" in opts else None
if topk is not None:
    opts["grad_compression"] = rlx_gpu.compression.TopK(*topk)
zero = ZeroRedundancyOptimizer(params, optimizer_class=getattr(rlx_gpu, cls_name), process_group=group,
                               **opts)
if restore != "-" and mode == "refused":  # (tampered checkpoints, comma-separated: each refused, nothing changed)
    zero.step({n: np.ones(v, np.float32) for n, v in shapes.items()})
    if os.environ.get("ZERO_REFUSE_RANK") == str(rank):  # (this rank's optimizer refuses its part, once)
        real = zero.inner.load_state_dict

        def refuse(*a, **k):
            zero.inner.load_state_dict = real
            raise ValueError("refused for the test")
        zero.inner.load_state_dict = refuse
    for path in restore.split(","):
        before = ({n: v.copy() for n, v in zero.params.items()}, zero.inner.state_dict()["state"])
        try:
            zero.restore(path)
            print(f"rank {rank}: RESTORED {path}", flush=True)
        except ValueError as e:
            after = zero.inner.state_dict()["state"]
            same = all(np.array_equal(before[0][n], zero.params[n]) for n in before[0]) and all(
                np.array_equal(np.asarray(before[1][k][x]), np.asarray(after[k][x])) for k in after for x in after[k])
            print(f"rank {rank}: REFUSED {'unchanged' if same else 'CHANGED'}: {e}", flush=True)
    zero.step({n: np.ones(v, np.float32) for n, v in shapes.items()})  # (the ranks still step together)
    print(f"rank {rank}: STEPPED", flush=True)
    dist.destroy_process_group() if group is None else None
    sys.exit(0)
if restore != "-":
    zero.restore(restore)
got = {}
for s in range(first, first + steps):
    if s == die_at and rank == world - 1:
        os._exit(0)  # (abruptly, sockets and all; status 0 so that torchrun does not kill the survivor first)
    if s == die_at:
        before = {n: v.copy() for n, v in zero.params.items()}
        state = zero.inner.state_dict()["state"]
        try:
            zero.step({n: np.ones(v, np.float32) for n, v in shapes.items()})
        except RuntimeError as e:
            print("CAUGHT:", e, flush=True)
            after = zero.inner.state_dict()["state"]
            same = all(np.array_equal(before[n], zero.params[n]) for n in before) and all(
                np.array_equal(np.asarray(state[k][x]), np.asarray(after[k][x])) for k in state for x in state[k])
            print("UNCHANGED" if same else "CHANGED", flush=True)
            sys.exit(0)
        sys.exit(5)
    g = {n: np.random.default_rng(100 * s + rank).standard_normal(v).astype(np.float32)
         for n, v in shapes.items()}
    if s == 3 and rank == world - 1:
        g["a"][0, 0] = np.inf
    if scaler is not None:  # (grads carrying the scale, as a scaled loss's backward gives them)
        sc = np.float32(scaler.get_scale())
        scaler.step(zero, {n: v * sc for n, v in g.items()})
        scaler.update()
        got[f"scale@{s}"] = np.array(sc)
    else:
        zero.step(g)
    got.update({f"{n}@{s}": v.copy() for n, v in zero.params.items()})
    got[f"skipped@{s}"] = np.array(zero.last_step_skipped)
got["state_bytes"] = np.array(zero.memory()["state"])
if save != "-":
    zero.save(save)
np.savez(out.replace(".npz", f".rank{rank}.npz"), **got)
if checks:
    before = {n: v.copy() for n, v in zero.params.items()}
    try:
        zero.step({"a": np.zeros(shapes["a"], np.float32)})
    except KeyError:
        same = all(np.array_equal(before[n], zero.params[n]) for n in before)
        print("missing grad: KeyError," + (" unchanged" if same else " CHANGED"), flush=True)
    other = ZeroRedundancyOptimizer(params, optimizer_class=rlx_gpu.SGD, process_group=group)
    keep = {n: v.copy() for n, v in other.params.items()}
    try:
        other.restore(save)
    except ValueError:
        same = all(np.array_equal(keep[n], other.params[n]) for n in keep)
        print("other class: ValueError," + (" unchanged" if same else " CHANGED"), flush=True)
    mine = dict(params) if rank == 0 else {**params, "e": np.zeros(2, np.float32)}
    try:
        ZeroRedundancyOptimizer(mine, process_group=group)
    except ValueError:
        print("different tensors: ValueError", flush=True)
if group is None:
    dist.destroy_process_group()
