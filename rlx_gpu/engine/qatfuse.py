"""Which exported tensors the update pass quantizes itself, and the runs its workgroups walk (``qat_runs``).

A scale is the amax of a whole channel (per tensor: of the whole tensor) of the *updated* weights, and WebGPU has
no barrier across workgroups, so a workgroup can write codes in the update pass only for channels it updates
entirely. The variant of the update driver (``shaders/qat_export.wgsl``) therefore walks *runs*: for a fused
tensor, whole rows (``span`` elements: ``ceil(block / L)`` rows of length ``L``, or the whole tensor for a
per-tensor spec), otherwise the engine's own blocks. A tensor is fused when its runs fit one workgroup's slots and
its codes' words: one piece (a tensor split over chunks is not), per tensor at most ``MAX_SPAN`` elements, per
channel rows of at least ``block / SLOTS`` elements that start on a code word (``L`` a multiple of 4 for int8, of 8
for int4) and runs of at most ``MAX_SPAN`` elements. The others (a whole GPT-2 matrix per tensor, odd row
lengths, chunked tensors) keep the second pass. Either way the codes and scales are the same bits: quantizing the
updated weights separately (``reference/qat.py``'s ``export_copy``).

A run table has one :data:`QAT_RUN` per engine block (the WGSL ``struct QatRun`` the driver reads by name:
``tensor``, ``first`` vec4 in the chunk, ``end`` element in the chunk, exclusive, as a block's; ``elem``: the run's
first element in the tensor), so the update pass keeps its dispatch: a fused tensor's runs are at least a block
long and fill the first entries of its blocks, the rest are ``NONE``.
"""
from __future__ import annotations

import numpy as np

from ..runtime.layout import BLOCK_ROW
from ..runtime.params import Params, declare

__all__ = ["MAX_SPAN", "QAT_RUN", "SLOTS", "fused_span", "run_table"]

#: One run of the update pass (``qat_export.wgsl``'s ``qat_runs: array<QatRun>``): 16 bytes, one element loaded
#: whole, as a block table's :data:`~rlx_gpu.runtime.layout.BLOCK_ROW` (the first three words mean the same).
QAT_RUN = Params("QatRun", "tensor", "first", "end", "elem")
declare("qat_export.wgsl", QAT_RUN)

SLOTS = 64          # channels one workgroup keeps (qat_export.wgsl's QAT_SLOTS)
MAX_SPAN = 16384    # elements of one run (16 vec4s per thread at a workgroup of 256)
NONE = 0xFFFFFFFF


def fused_span(spec, shape, pieces: int, block: int) -> int:
    """Elements per run of a tensor the update pass exports itself (0: the second pass exports it)."""
    size = int(np.prod(shape, dtype=np.int64))
    if pieces != 1 or size == 0:
        return 0
    if not spec.per_channel:
        return size if size <= MAX_SPAN else 0
    row = size // shape[0]
    rows = -(-block // row)
    ok = row % (32 // spec.bits) == 0 and rows <= SLOTS and rows * row <= MAX_SPAN
    return rows * row if ok else 0


def run_table(buckets, total_blocks: int, spans: dict) -> np.ndarray:
    """The runs of every engine block (global block index -> a :data:`QAT_RUN` row); ``spans``: global tensor -> run
    length."""
    tab = np.zeros((max(1, total_blocks), QAT_RUN.words), np.uint32)
    QAT_RUN.column(tab, "tensor")[:] = NONE
    col = BLOCK_ROW.column
    for b in buckets:
        lay = b.layout
        for c, blk in enumerate(lay.blocks):
            if not len(blk):
                continue
            where = {}  # global tensor -> (offset in the chunk, length, offset in the tensor) of its piece here
            for i, t in enumerate(b.ids):
                for (pc, off, ln, toff) in lay.pieces[i]:
                    if pc == c:
                        where[t] = (off, ln, toff)
            info = np.zeros((max(where) + 1, 3), np.int64)
            info[list(where)] = list(where.values())
            t = col(blk, "tensor").astype(np.int64)
            off, end, toff = info[t, 0], info[t, 0] + info[t, 1], info[t, 2]
            start = 4 * col(blk, "first").astype(np.int64)
            runs = QAT_RUN.pack_rows(tensor=t, first=start // 4, end=np.minimum(start + lay.block, end),
                                     elem=toff + start - off)
            tab[col(blk, "block")] = runs
            for tt in set(spans) & set(where):
                off, ln, _ = where[tt]
                g = col(blk, "block")[t == tt]
                first = off + spans[tt] * np.arange(-(-ln // spans[tt]), dtype=np.int64)
                tab[g] = NONE  # (every word: the rows past the tensor's runs)
                tab[g[:len(first)]] = QAT_RUN.pack_rows(tensor=tt, first=first // 4,
                                                        end=np.minimum(first + spans[tt], off + ln), elem=first - off)
    return tab
