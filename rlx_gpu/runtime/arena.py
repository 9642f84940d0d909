"""Typed device arenas: many tensors of one dtype in a few large buffers, placed by a :class:`Layout`.

An :class:`Arena` holds one GPU buffer per chunk of its layout, of ``float32``, ``float16`` or ``bfloat16``
elements (16-bit elements packed two to a u32 word, as the kernels read them), zero-filled at creation. Host
transfers pad a tensor of 16-bit elements to whole 4-byte words (the padding after a tensor belongs to it).
:class:`DeviceTensor` is one tensor in an arena: its real dtype, ``numpy()``, ``write()`` and the byte range a
user's own bind group needs (``binding()``).
"""
from __future__ import annotations

import numpy as np

from ..core.lowp import DType, dtype_of
from .layout import Layout

__all__ = ["Arena", "DeviceTensor"]


class Arena:
    """One buffer per chunk of ``layout``, holding ``dtype`` elements."""

    def __init__(self, device, layout: Layout, label: str, dtype: DType):
        self.device, self.layout, self.label, self.dtype = device, layout, label, dtype
        self.buffers = [device.buffer(dtype.itemsize * n, f"{label}[{i}]", mappable=True)
                        for i, n in enumerate(layout.chunk_elems)]

    @property
    def nbytes(self) -> int:
        return sum(b.size for b in self.buffers)

    def _items(self, t: int, host: np.ndarray, padded: dict):
        """(buffer, byte offset, uint8 view) for each piece of local tensor ``t`` in ``host`` (its flat
        elements); 16-bit pieces of an odd length go through a padded copy (``padded`` keeps it for read-back)."""
        size = self.dtype.itemsize
        flat = host.reshape(-1)
        out = []
        for (c, off, ln, toff) in self.layout.pieces[t]:
            if not ln:
                continue
            part = flat[toff:toff + ln].view(np.uint8)
            if (ln * size) % 4:
                pad = np.zeros(-(-ln * size // 4) * 4, np.uint8)
                pad[:part.nbytes] = part
                padded[id(pad)] = (pad, part)
                part = pad
            out.append((self.buffers[c], size * off, part))
        return out

    def read_all(self) -> list[np.ndarray]:
        """Every chunk read back to the host (as the arena's dtype), in one batched transfer."""
        out = [np.empty(n, self.dtype.np) for n in self.layout.chunk_elems]
        self.device.transfer.download([(b, 0, o.view(np.uint8)) for b, o in zip(self.buffers, out)])
        return out

    def read_many(self, tensors, outs=None) -> list[np.ndarray]:
        """Flat copies of several local tensors, in one batched transfer (into ``outs`` when given)."""
        if outs is None:
            outs = [np.empty(self.layout.sizes[t], self.dtype.np) for t in tensors]
        padded: dict = {}
        self.device.transfer.download([it for t, o in zip(tensors, outs) for it in self._items(t, o, padded)])
        for pad, part in padded.values():
            part[...] = pad[:part.nbytes]
        return outs

    def write_many(self, pairs) -> None:
        """Upload several ``(local tensor index, array of this dtype)`` pairs in one batched transfer."""
        items, padded = [], {}
        for t, data in pairs:
            items += self._items(t, np.ascontiguousarray(data, self.dtype.np), padded)
        self.device.transfer.upload(items)

    def write_all(self, chunks: list) -> None:
        """Upload whole chunks (host arrays of this dtype, as :meth:`read_all` gives)."""
        self.device.transfer.upload([(b, 0, np.ascontiguousarray(h, self.dtype.np).view(np.uint8))
                                     for b, h in zip(self.buffers, chunks)])

    def fill(self, t: int, value: float):
        self.write_many([(t, np.full(self.layout.sizes[t], value, self.dtype.np))])

    def clear(self, encoder):
        for b in self.buffers:
            encoder.clear_buffer(b, 0, b.size)


def check_out(name, out, shape, dtype):
    if not isinstance(out, np.ndarray) or out.dtype != dtype.np or not out.flags.c_contiguous:
        raise TypeError(f"{name!r}: out must be a C-contiguous {dtype} numpy array")
    if out.shape != tuple(shape):
        raise ValueError(f"{name!r}: out has shape {out.shape}, expected {tuple(shape)}")


class DeviceTensor:
    """A tensor living in an arena on the GPU.

    ``shape``, ``dtype`` (float32, float16 or ml_dtypes.bfloat16), ``size``, ``numpy()`` reads it back,
    ``write(array)`` uploads it, and ``binding()`` returns the ``{"buffer", "offset", "size"}`` resource a user's
    own wgpu bind group needs (16-bit tensors: two elements per u32, the size rounded up to whole words).
    """

    def __init__(self, arena: Arena, index: int, name: str, shape: tuple):
        self._arena, self._index = arena, index  # index: the tensor's position in the arena's layout
        self.name, self.shape = name, tuple(shape)

    @property
    def dtype(self) -> np.dtype:
        return self._arena.dtype.np

    @property
    def size(self) -> int:
        return self._arena.layout.sizes[self._index]

    @property
    def device(self):
        return self._arena.device

    def __repr__(self):
        return f"DeviceTensor({self.name!r}, shape={self.shape}, {self._arena.dtype}, {self._arena.label})"

    def numpy(self, out: np.ndarray | None = None) -> np.ndarray:
        """A host copy of the tensor (waits for queued GPU work). ``out``: a C-contiguous array of this shape and
        dtype to fill instead of a new one (reusing it saves the page faults of fresh memory)."""
        if out is not None:
            check_out(self.name, out, self.shape, self._arena.dtype)
            self._arena.read_many([self._index], [out.reshape(-1)])
            return out
        return self._arena.read_many([self._index])[0].reshape(self.shape)

    def write(self, array) -> None:
        """Upload ``array`` (this tensor's dtype and shape) into the tensor."""
        a = np.asarray(array)
        if dtype_of(a.dtype) != self._arena.dtype:
            raise TypeError(f"{self.name!r}: expected a {self._arena.dtype} array, got {a.dtype}")
        if a.shape != self.shape:
            raise ValueError(f"{self.name!r}: expected shape {self.shape}, got {a.shape}")
        self._arena.write_many([(self._index, a)])

    def reshape(self, shape) -> "DeviceTensor":
        """The same device storage seen with another shape of the same number of elements (no copy)."""
        dims = shape if isinstance(shape, (tuple, list)) else (shape,)
        if not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0 for d in dims):
            raise ValueError(f"{self.name!r}: cannot view {self.shape} as {tuple(dims)}: dimensions must be ints >= 0")
        shape = tuple(int(d) for d in dims)
        if int(np.prod(shape, dtype=np.int64)) != int(np.prod(self.shape, dtype=np.int64)):
            raise ValueError(f"{self.name!r}: cannot view {self.shape} as {shape}")
        return DeviceTensor(self._arena, self._index, self.name, shape)

    def bindings(self) -> list[dict]:
        """One ``{"buffer", "offset", "size"}`` per piece (more than one only past the max storage binding)."""
        size = self._arena.dtype.itemsize
        return [{"buffer": self._arena.buffers[c], "offset": size * off, "size": -(-size * ln // 4) * 4}
                for (c, off, ln, _) in self._arena.layout.pieces[self._index]]

    def binding(self) -> dict:
        """The ``{"buffer", "offset", "size"}`` resource for a wgpu bind group entry."""
        b = self.bindings()
        if len(b) != 1:
            raise ValueError(f"{self.name!r} is larger than the adapter's max storage binding and is split "
                             f"into {len(b)} pieces; use .bindings()")
        return b[0]
