"""Flat device arenas: every tensor of an optimizer in a few large buffers.

A :class:`Layout` places tensors in *chunks* (one GPU buffer each, at most the adapter's max storage
binding). Each tensor starts at an offset aligned to the storage-offset alignment, so it can be bound on
its own; a tensor larger than a chunk is split into pieces over consecutive chunks. Params, grads and
every state buffer share one layout, so one offset table serves them all.

Kernels walk *blocks*: runs of ``block`` elements that never cross a tensor. The block table of a chunk
holds one ``vec4<u32>`` per block: (tensor index, first vec4 index, end element in the chunk (exclusive),
global block index). Blocks of one tensor are numbered consecutively across chunks.
"""
from __future__ import annotations

import numpy as np

__all__ = ["Layout", "Arena", "DeviceTensor"]


def _align(n: int, a: int) -> int:
    return -(-n // a) * a


class Layout:
    """Placement of ``sizes`` (element counts) into chunks of at most ``chunk_elems`` elements."""

    def __init__(self, sizes, *, align_elems: int, chunk_elems: int, block: int):
        if chunk_elems < block or chunk_elems % align_elems or block % 4:
            raise ValueError(f"bad layout parameters: chunk {chunk_elems}, align {align_elems}, block {block}")
        self.sizes = [int(n) for n in sizes]
        self.block = block
        self.pieces: list[list[tuple[int, int, int, int]]] = []  # (chunk, offset, length, offset in tensor)
        chunk_used = [0]
        c = 0
        for n in self.sizes:
            off = chunk_used[c]
            if n <= chunk_elems:
                if off + n > chunk_elems:
                    c += 1
                    chunk_used.append(0)
                    off = 0
                self.pieces.append([(c, off, n, 0)])
                chunk_used[c] = _align(off + n, align_elems)
            else:
                if off:
                    c += 1
                    chunk_used.append(0)
                ps, done = [], 0
                while done < n:
                    ln = min(chunk_elems, n - done)
                    ps.append((c, 0, ln, done))
                    done += ln
                    chunk_used[c] = _align(ln, align_elems)
                    if done < n:
                        c += 1
                        chunk_used.append(0)
                self.pieces.append(ps)
        self.chunk_elems = [max(4, _align(u, 4)) for u in chunk_used]
        # Block tables, one per chunk, and each tensor's (first global block, block count).
        tables = [[] for _ in self.chunk_elems]
        self.first_block = np.zeros(len(self.sizes), np.int64)
        self.num_blocks = np.zeros(len(self.sizes), np.int64)
        g = 0
        for chunk in range(len(self.chunk_elems)):
            for t, ps in enumerate(self.pieces):
                for (pc, off, ln, _) in ps:
                    if pc != chunk or ln == 0:
                        continue
                    nb = -(-ln // block)
                    if self.num_blocks[t] == 0:
                        self.first_block[t] = g
                    starts = off + block * np.arange(nb, dtype=np.int64)
                    tab = np.empty((nb, 4), np.uint32)
                    tab[:, 0] = t
                    tab[:, 1] = starts // 4
                    tab[:, 2] = off + ln
                    tab[:, 3] = g + np.arange(nb)
                    tables[chunk].append(tab)
                    self.num_blocks[t] += nb
                    g += nb
        self.total_blocks = g
        self.blocks = [np.concatenate(t) if t else np.zeros((0, 4), np.uint32) for t in tables]

    @property
    def num_chunks(self) -> int:
        return len(self.chunk_elems)

    def gather(self, chunks: list[np.ndarray], t: int, shape) -> np.ndarray:
        """Tensor ``t`` assembled from host copies of the chunks (float32 arrays)."""
        out = np.empty(self.sizes[t], np.float32)
        for (c, off, ln, toff) in self.pieces[t]:
            out[toff:toff + ln] = chunks[c][off:off + ln]
        return out.reshape(shape)


    def scatter(self, chunks: list[np.ndarray], t: int, value: np.ndarray) -> None:
        """Write tensor ``t`` into host copies of the chunks (the inverse of :meth:`gather`)."""
        flat = np.asarray(value, np.float32).reshape(-1)
        for (c, off, ln, toff) in self.pieces[t]:
            chunks[c][off:off + ln] = flat[toff:toff + ln]


class Arena:
    """One float32 buffer per chunk of a :class:`Layout`, zero-filled at creation."""

    def __init__(self, device, layout: Layout, label: str):
        self.device, self.layout, self.label = device, layout, label
        self.buffers = [device.buffer(4 * n, f"{label}[{i}]", mappable=True) for i, n in enumerate(layout.chunk_elems)]

    def read_all(self) -> list[np.ndarray]:
        """Every chunk read back to the host, in one batched transfer."""
        out = [np.empty(n, np.float32) for n in self.layout.chunk_elems]
        self.device.transfer.download([(b, 0, o.view(np.uint8)) for b, o in zip(self.buffers, out)])
        return out

    def _items(self, t: int, host: np.ndarray):
        """(buffer, byte offset, uint8 view of ``host``) for each piece of tensor ``t``."""
        u8 = host.reshape(-1).view(np.uint8)
        return [(self.buffers[c], 4 * off, u8[4 * toff:4 * (toff + ln)])
                for (c, off, ln, toff) in self.layout.pieces[t] if ln]

    def read_many(self, tensors, outs=None) -> list[np.ndarray]:
        """Flat float32 copies of several tensors, in one batched transfer (into ``outs`` when given)."""
        if outs is None:
            outs = [np.empty(self.layout.sizes[t], np.float32) for t in tensors]
        self.device.transfer.download([it for t, o in zip(tensors, outs) for it in self._items(t, o)])
        return outs

    def read(self, t: int, shape, out=None) -> np.ndarray:
        return self.read_many([t], None if out is None else [out.reshape(-1)])[0].reshape(shape)

    def write_many(self, pairs) -> None:
        """Upload several ``(tensor index, float32 array)`` pairs in one batched transfer."""
        items = []
        for t, data in pairs:
            items += self._items(t, np.ascontiguousarray(data, np.float32))
        self.device.transfer.upload(items)

    def write(self, t: int, data: np.ndarray):
        self.write_many([(t, data)])

    def fill(self, t: int, value: float):
        self.write(t, np.full(self.layout.sizes[t], value, np.float32))

    def clear(self, encoder):
        for b in self.buffers:
            encoder.clear_buffer(b, 0, b.size)


def _check_out(name, out, shape):
    if not isinstance(out, np.ndarray) or out.dtype != np.float32 or not out.flags.c_contiguous:
        raise TypeError(f"{name!r}: out must be a C-contiguous float32 numpy array")
    if out.shape != tuple(shape):
        raise ValueError(f"{name!r}: out has shape {out.shape}, expected {tuple(shape)}")


class DeviceTensor:
    """A tensor living in an arena on the GPU.

    ``shape``, ``dtype`` (always float32), ``numpy()`` reads it back, ``write(array)`` uploads it, and
    ``binding()`` returns the ``{"buffer", "offset", "size"}`` resource a user's own wgpu bind group needs.
    """

    def __init__(self, arena: Arena, index: int, name: str, shape: tuple):
        self._arena, self._index = arena, index
        self.name, self.shape = name, tuple(shape)
        self.dtype = np.dtype(np.float32)

    @property
    def size(self) -> int:
        return self._arena.layout.sizes[self._index]

    @property
    def device(self):
        return self._arena.device

    def __repr__(self):
        return f"DeviceTensor({self.name!r}, shape={self.shape}, {self._arena.label})"

    def numpy(self, out: np.ndarray | None = None) -> np.ndarray:
        """A host copy of the tensor (waits for queued GPU work). ``out``: a C-contiguous float32 array of this
        shape to fill instead of a new one (reusing it saves the page faults of fresh memory)."""
        if out is not None:
            _check_out(self.name, out, self.shape)
            self._arena.read(self._index, self.shape, out)
            return out
        return self._arena.read(self._index, self.shape)

    def write(self, array) -> None:
        """Upload ``array`` (float32, this tensor's shape) into the tensor."""
        a = np.asarray(array)
        if a.dtype != np.float32:
            raise TypeError(f"{self.name!r}: expected a float32 array, got {a.dtype}")
        if a.shape != self.shape:
            raise ValueError(f"{self.name!r}: expected shape {self.shape}, got {a.shape}")
        self._arena.write(self._index, a)

    def bindings(self) -> list[dict]:
        """One ``{"buffer", "offset", "size"}`` per piece (more than one only past the max storage binding)."""
        return [{"buffer": self._arena.buffers[c], "offset": 4 * off, "size": 4 * ln}
                for (c, off, ln, _) in self._arena.layout.pieces[self._index]]

    def binding(self) -> dict:
        """The ``{"buffer", "offset", "size"}`` resource for a wgpu bind group entry."""
        b = self.bindings()
        if len(b) != 1:
            raise ValueError(f"{self.name!r} is larger than the adapter's max storage binding and is split "
                             f"into {len(b)} pieces; use .bindings()")
        return b[0]
