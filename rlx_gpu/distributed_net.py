"""The collectives :mod:`rlx_gpu.distributed` uses, over ``torch.distributed`` (gloo) or an mpi4py communicator:
in-place sum all-reduce, all-gather (a list of every rank's array) and barrier, on NumPy arrays in host memory."""
from __future__ import annotations

import numpy as np

__all__ = ["TorchTransport", "MPITransport", "transport"]


class TorchTransport:
    """Sum-all-reduce, all-gather and barrier over ``torch.distributed`` (gloo), on NumPy arrays (float32, float64;
    all-gather also uint32)."""

    def __init__(self, group):
        import torch.distributed as dist
        if not dist.is_initialized():
            raise RuntimeError("ZeroRedundancyOptimizer: call torch.distributed.init_process_group first (or pass an "
                               "mpi4py communicator as process_group)")
        self.dist, self.group = dist, group
        self.rank, self.world_size = dist.get_rank(group), dist.get_world_size(group)

    def all_reduce(self, a: np.ndarray) -> None:
        import torch
        self.dist.all_reduce(torch.from_numpy(a), group=self.group)  # (in place: the tensor shares a's memory)

    def all_gather(self, a: np.ndarray) -> list:
        import torch
        src = a.view(np.int32) if a.dtype == np.uint32 else a  # (torch's gloo has no uint32)
        t = torch.from_numpy(np.ascontiguousarray(src))
        outs = [torch.empty_like(t) for _ in range(self.world_size)]
        self.dist.all_gather(outs, t, group=self.group)
        return [o.numpy().view(a.dtype) for o in outs]

    def barrier(self) -> None:
        self.dist.barrier(group=self.group)


class MPITransport:
    """The same over an mpi4py communicator (``mpirun -n N python train.py``)."""

    def __init__(self, comm):
        from mpi4py import MPI
        self.MPI, self.comm = MPI, comm
        self.rank, self.world_size = comm.Get_rank(), comm.Get_size()

    def all_reduce(self, a: np.ndarray) -> None:
        self.comm.Allreduce(self.MPI.IN_PLACE, a, op=self.MPI.SUM)

    def all_gather(self, a: np.ndarray) -> list:
        out = np.empty((self.world_size, a.size), a.dtype)
        self.comm.Allgather(a, out)
        return list(out)

    def barrier(self) -> None:
        self.comm.Barrier()


def transport(process_group):
    """``process_group``: None (torch.distributed's default group), a torch ProcessGroup, or an mpi4py
    communicator (``MPI.COMM_WORLD``)."""
    if process_group is not None and hasattr(process_group, "Allreduce"):
        return MPITransport(process_group)
    return TorchTransport(process_group)
