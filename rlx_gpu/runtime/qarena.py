"""Block-quantized state arenas: one u32 buffer per chunk of a :class:`~rlx_gpu.runtime.Layout` holding, in order,
the state's map and its midpoints (``2**bits`` float32 words each) and the search guide
(:func:`rlx_gpu.core.quant.guess_table`, four uint8 per word), which the kernels copy into workgroup memory; then
for each block of ``block`` elements its codes (8-bit: four per word; 4-bit: eight per word, low bits first)
followed by its absmax word (float32 bits, the sign bit a flag: :mod:`rlx_gpu.core.quant`). One binding per
state keeps every quantized module within WebGPU's default of 8 storage buffers per stage. The layout starts every tensor at a multiple of ``block``, so a quantization block
never spans two tensors. Zero codes with a zero absmax are a zero state (buffers are zero-filled after the map).
"""
from __future__ import annotations

import numpy as np

from ..core.quant import BLOCK, GUESS_KEYS, guess_table, midpoints, pack_codes, qmap, unpack_codes

__all__ = ["QArena", "header", "header_words", "block_words"]


def header_words(bits: int) -> int:
    return 2 * 2 ** bits + guide_words()


def guide_words() -> int:
    return 2 * GUESS_KEYS // 4


def header(bits: int, signed: bool) -> np.ndarray:
    """The words every buffer of a state starts with: its map, midpoints (and a zero word), then the guide."""
    return np.concatenate([qmap(bits, signed).view(np.uint32), midpoints(bits, signed).view(np.uint32),
                           np.zeros(1, np.uint32), guess_table(bits, signed).view(np.uint32)])


def block_words(bits: int) -> int:
    """u32 words per block: its codes and its absmax."""
    return BLOCK[bits] * bits // 32 + 1


class QArena:
    """The codes and absmax of one state (``signed`` map or not) for every chunk of ``layout``, ``bits`` per code."""

    def __init__(self, device, layout, label: str, bits: int, signed: bool):
        self.device, self.layout, self.label, self.bits = device, layout, label, bits
        self.block, self.H, self.S = BLOCK[bits], header_words(bits), block_words(bits)
        head = header(bits, signed)
        self.buffers = []
        for i, n in enumerate(layout.chunk_elems):
            b = device.buffer(4 * (self.H + -(-n // self.block) * self.S), f"{label}[{i}]", mappable=True)
            device.queue.write_buffer(b, 0, head)
            self.buffers.append(b)

    @property
    def nbytes(self) -> int:
        return sum(b.size for b in self.buffers)

    def read_all(self) -> list[np.ndarray]:
        """Every chunk's words (uint32), in one batched transfer."""
        out = [np.empty(b.size // 4, np.uint32) for b in self.buffers]
        self.device.transfer.download([(b, 0, o.view(np.uint8)) for b, o in zip(self.buffers, out)])
        return out

    def _blocks(self, off: int, ln: int) -> tuple[int, int]:
        q0 = off // self.block
        return self.H + q0 * self.S, -(-ln // self.block)

    def gather(self, chunks, t: int) -> tuple[np.ndarray, np.ndarray]:
        """(codes: uint8 per element, absmax per block) of local tensor ``t`` from :meth:`read_all`'s chunks."""
        codes, absmax = [], []
        for (c, off, ln, _) in self.layout.pieces[t]:
            w0, nq = self._blocks(off, ln)
            words = chunks[c][w0:w0 + nq * self.S].reshape(nq, self.S)
            codes.append(unpack_codes(np.ascontiguousarray(words[:, :-1]).view(np.uint8), ln, self.bits))
            absmax.append(np.ascontiguousarray(words[:, -1]).view(np.float32))
        return np.concatenate(codes), np.concatenate(absmax)

    def write_many(self, triples) -> None:
        """Upload ``(local tensor index, codes (one per element), absmax per block)`` triples in one transfer."""
        items = []
        for t, codes, absmax in triples:
            flat, am = np.asarray(codes, np.uint8).reshape(-1), np.asarray(absmax, np.float32).reshape(-1)
            for (c, off, ln, toff) in self.layout.pieces[t]:
                if not ln:
                    continue
                w0, nq = self._blocks(off, ln)
                packed = np.zeros(nq * self.block * self.bits // 8, np.uint8)
                p = pack_codes(flat[toff:toff + ln], self.bits)
                packed[:p.size] = p
                words = np.empty((nq, self.S), np.uint32)
                words[:, :-1] = packed.view(np.uint32).reshape(nq, self.S - 1)
                a0 = toff // self.block
                words[:, -1] = am[a0:a0 + nq].view(np.uint32)
                items.append((self.buffers[c], 4 * w0, words.reshape(-1).view(np.uint8)))
        self.device.transfer.upload(items)

    def fill(self, t: int, value: float) -> None:
        """Tensor ``t`` back to a zero state (the only initial value quantized states have)."""
        if value != 0:
            raise ValueError(f"{self.label}: a quantized state starts at 0, not {value}")
        n = self.layout.sizes[t]
        self.write_many([(t, np.zeros(n, np.uint8), np.zeros(-(-n // self.block), np.float32))])
