"""How :mod:`rlx_gpu.distributed` cuts the params into one range per rank, and the small host arithmetic around
the exchange."""
from __future__ import annotations

import numpy as np

__all__ = ["shard_ranges", "tensor_ranges", "segments", "sumsq"]


def sumsq(g: np.ndarray) -> float:
    """The sum of squares of float32 ``g`` in float64 (in slices: no float64 copy of the whole)."""
    return sum(float(np.dot(c, c)) for c in (x.astype(np.float64) for x in np.array_split(g, 1 + (g.size >> 24))))


def shard_ranges(total: int, world: int) -> list[tuple[int, int]]:
    """``world`` contiguous ranges covering ``[0, total)``, sizes differing by at most one element."""
    cuts = [total * r // world for r in range(world + 1)]
    return list(zip(cuts[:-1], cuts[1:]))


def tensor_ranges(sizes, world: int) -> list[tuple[int, int]]:
    """``world`` contiguous ranges covering the tensors of ``sizes`` one after another, each ending at a tensor
    boundary: cut r at the boundary nearest ``total * r / world`` (a rank may own nothing)."""
    bounds = np.concatenate([[0], np.cumsum(np.asarray(sizes, np.int64))])
    total = int(bounds[-1])
    cuts = [0]
    for r in range(1, world):
        b = int(bounds[np.argmin(np.abs(bounds * world - total * r))])
        cuts.append(max(b, cuts[-1]))
    cuts.append(total)
    return list(zip(cuts[:-1], cuts[1:]))


def segments(sizes: dict, ranges) -> list:
    """Where each tensor (``sizes``: name -> elements, in the flat order) meets each rank's range: (tensor, first,
    end element in the tensor, rank, offset in that rank's range)."""
    out, off = [], 0
    for n, size in sizes.items():
        for r, (rs, re) in enumerate(ranges):
            s, e = max(rs, off), min(re, off + size)
            if s < e:
                out.append((n, s - off, e - off, r, s - rs))
        off += size
    return out
