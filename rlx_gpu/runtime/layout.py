"""Placement of tensors in chunked arenas, in elements, for arenas of several element sizes at once.

A :class:`Layout` places tensors in *chunks* (one GPU buffer per chunk and arena). The arenas that share a layout
(a bucket's params, grads, master copies and states) may store 4- or 2-byte elements: a chunk holds at most
``max_binding / largest itemsize`` elements, and each tensor starts at an element offset whose byte offset is
aligned to the storage-offset alignment in every one of them (so each can be bound on its own). A tensor larger
than a chunk is split into pieces over consecutive chunks.

Kernels walk *blocks*: runs of ``block`` elements that never cross a tensor. The block table of a chunk holds one
:data:`BLOCK_ROW` per block, the WGSL ``struct Block`` the kernels read by name: ``tensor`` (the global tensor
index), ``first`` (the block's first vec4 index in the chunk), ``end`` (the end element of the tensor's piece in
the chunk, exclusive), ``block`` (the global block index). A vec4 index addresses four elements whatever their size
(a ``vec4<f32>`` or a packed ``vec2<u32>`` of four 16-bit values). Blocks of one tensor are numbered consecutively,
from ``block_base`` on, so several layouts can share one numbering (per-block scratch, per-tensor first block and
block count).
"""
from __future__ import annotations

import numpy as np

from .params import Params

__all__ = ["BLOCK_ROW", "Layout"]

#: One row of a block table: four u32 words, 16 bytes. Bound as ``array<Block>`` its stride is 16 bytes and every
#: binding starts on a 256-byte offset, so each entry is one 16-byte-aligned element a kernel loads whole
#: (``let b = blocks[i];``, as the ``vec4<u32>`` it was before: the same bytes).
BLOCK_ROW = Params("Block", "tensor", "first", "end", "block")


def _align(n: int, a: int) -> int:
    return -(-n // a) * a


class Layout:
    """Placement of tensors ``ids`` (global tensor indices) with element counts ``sizes``."""

    def __init__(self, sizes, *, ids=None, alignment: int, max_binding: int, itemsizes=(4,), block: int,
                 block_base: int = 0, elem_align: int = 4):
        self.sizes = [int(n) for n in sizes]
        self.ids = list(range(len(self.sizes))) if ids is None else [int(i) for i in ids]
        self.block = block
        # elements; a vec4 group at least, and ``elem_align`` (quantization blocks start at multiples of it)
        align = int(np.lcm(max(4, alignment // min(itemsizes)), elem_align))
        unit = int(np.lcm(align, block))  # chunks hold whole blocks: block j of any tensor starts at element j*block
        chunk_elems = (max_binding // max(itemsizes)) // unit * unit
        if chunk_elems < block or block % 4:
            raise ValueError(f"bad layout parameters: max binding {max_binding} B, alignment {alignment} B, "
                             f"block {block}, itemsizes {itemsizes}")
        self.pieces: list[list[tuple[int, int, int, int]]] = []  # (chunk, offset, length, offset in tensor)
        used, c = [0], 0
        for n in self.sizes:
            off = used[c]
            if n <= chunk_elems:
                if off + n > chunk_elems:
                    c += 1
                    used.append(0)
                    off = 0
                self.pieces.append([(c, off, n, 0)])
                used[c] = _align(off + n, align)
            else:
                if off:
                    c += 1
                    used.append(0)
                ps, done = [], 0
                while done < n:
                    ln = min(chunk_elems, n - done)
                    ps.append((c, 0, ln, done))
                    done += ln
                    used[c] = _align(ln, align)
                    if done < n:
                        c += 1
                        used.append(0)
                self.pieces.append(ps)
        # every chunk a whole number of 8-element groups: 16 bytes of 16-bit elements, as buffers need
        self.chunk_elems = [max(8, _align(u, 8)) for u in used]
        self._tables(block_base)

    def _tables(self, base: int) -> None:
        """Block tables, one per chunk, and each tensor's (first global block, block count)."""
        tables = [[] for _ in self.chunk_elems]
        n = len(self.sizes)
        self.first_block = np.zeros(n, np.int64)
        self.num_blocks = np.zeros(n, np.int64)
        g = base
        for chunk in range(len(self.chunk_elems)):
            for t, ps in enumerate(self.pieces):
                for (pc, off, ln, _) in ps:
                    if pc != chunk or ln == 0:
                        continue
                    nb = -(-ln // self.block)
                    if self.num_blocks[t] == 0:
                        self.first_block[t] = g
                    starts = off + self.block * np.arange(nb, dtype=np.int64)
                    tables[chunk].append(BLOCK_ROW.pack_rows(tensor=self.ids[t], first=starts // 4, end=off + ln,
                                                             block=g + np.arange(nb)))
                    self.num_blocks[t] += nb
                    g += nb
        self.block_base, self.block_end = base, g
        self.blocks = [np.concatenate(t) if t else np.zeros((0, BLOCK_ROW.words), np.uint32) for t in tables]

    @property
    def num_chunks(self) -> int:
        return len(self.chunk_elems)

    def gather(self, chunks: list, t: int, shape, dtype=np.float32) -> np.ndarray:
        """Tensor ``t`` (local index) assembled from host copies of the chunks."""
        out = np.empty(self.sizes[t], dtype)
        for (c, off, ln, toff) in self.pieces[t]:
            out[toff:toff + ln] = chunks[c][off:off + ln]
        return out.reshape(shape)

    def scatter(self, chunks: list, t: int, value: np.ndarray) -> None:
        """Write tensor ``t`` (local index) into host copies of the chunks (the inverse of :meth:`gather`)."""
        flat = np.asarray(value).reshape(-1)
        for (c, off, ln, toff) in self.pieces[t]:
            chunks[c][off:off + ln] = flat[toff:toff + ln]
