"""The ``qat=`` export: a quantized copy of chosen tensors written in the step's own submission
(``shaders/qat_export.wgsl``; the spec is :func:`rlx_gpu.reference.qat.export_copy`).

The update pass of a bucket with exported tensors is the generated driver's variant that notes each stored weight's
|w| in its channel's amax (:func:`driver_lines`); after the optimizer's passes, ``qat_rescale`` (a workgroup per
exported tensor) makes the scales and ``qat_encode`` (a workgroup per block) the codes and values, all gated with
the step (a skipped step leaves every copy untouched) and only for tensors with a grad this step. Weights written
from the host (construction, ``write_params``, ``load_state_dict``, ``restore``) are exported by ``qat_amax``
instead of the update. ``opt.qat[name]`` is a :class:`QuantizedCopy`.
"""
from __future__ import annotations

import numpy as np

from ..core.qatspec import parse_qat
from ..core.sync import locked

__all__ = ["QatMixin", "QuantizedCopy", "driver_lines", "qat_load"]

HEAD = 16  # words before the per-tensor index
ALIGN = 64  # words (256 bytes): every tensor's range of a buffer can be bound on its own


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def qat_load(sig) -> str:
    """``qat_load(i)``: the stored weights the copy is made of (the float32 master copy where there is one)."""
    return f"fn qat_load(i: u32) -> vec4<f32> {{ return ld_{'master' if sig.master else 'param'}(i); }}"


def driver_lines() -> tuple[list, list, list]:
    """The update driver's variant: lines before its loop, after each vec4's store, and after the loop."""
    before = ["    let qe = qat_entry(select(0u, blk.x, live), live);",
              "    let qc0 = qat_first_channel(qe, elem0(blk, r, blk.y));", "    qat_begin(lid);"]
    note = ["        qat_note(qe, qc0, e, qat_load(i), keep);"]
    return before, note, ["    qat_end(qe, qc0, lid);"]


class QuantizedCopy:
    """One tensor's export: ``spec`` (:class:`~rlx_gpu.core.qatspec.QatSpec`), ``codes()`` (int8 in the
    tensor's shape, int4 codes as int8 in [-8, 7]), ``packed()`` (the device words as uint8: int4 two per byte, low
    nibble first), ``scale()`` (float32 per channel), ``values()`` (the fake-quantized weights, float32, where the
    spec asks for them), and ``binding(part)`` for ``part`` in "codes", "scale", "values": the
    ``{"buffer", "offset", "size"}`` your own WGSL binds (codes: ``array<u32>``, four int8 or eight int4 per word;
    scale: ``array<f32>``; values: ``array<f32>``, or ``array<u32>`` of two bfloat16)."""

    def __init__(self, opt, name, spec, shape, chan, code, vals, channels):
        self._opt, self.name, self.spec, self.shape = opt, name, spec, tuple(shape)
        self.size = int(np.prod(self.shape, dtype=np.int64))
        self.channels = channels
        self._ranges = {"codes": (opt._qat_bufs["qat_codes"], 4 * code, 4 * max(1, -(-self.size * spec.bits // 32))),
                        "scale": (opt._qat_bufs["qat_scale"], 4 * chan, 4 * channels)}
        if spec.values:
            per = 1 if spec.values == "float32" else 2
            self._ranges["values"] = (opt._qat_bufs["qat_values"], 4 * vals, 4 * max(1, -(-self.size // per)))

    def binding(self, part: str = "codes") -> dict:
        if part not in self._ranges:
            raise KeyError(f"qat[{self.name!r}]: no {part!r} (it has {sorted(self._ranges)})")
        b, o, s = self._ranges[part]
        return {"buffer": b, "offset": o, "size": -(-s // 16) * 16 if o + -(-s // 16) * 16 <= b.size else s}

    def _read(self, part, dtype):
        b, o, s = self._ranges[part]
        return self._opt.device.read(b, o, s, out=np.empty(s // np.dtype(dtype).itemsize, dtype))

    def packed(self) -> np.ndarray:
        return self._read("codes", np.uint8)[:-(-self.size * self.spec.bits // 8)]

    def codes(self) -> np.ndarray:
        raw = self.packed()
        if self.spec.bits == 8:
            return raw.view(np.int8).reshape(self.shape)
        nib = np.stack([raw & 15, raw >> 4], 1).reshape(-1)[:self.size].astype(np.int8)
        return np.where(nib >= 8, nib - 16, nib).astype(np.int8).reshape(self.shape)

    def scale(self) -> np.ndarray:
        return self._read("scale", np.float32).copy()

    def values(self) -> np.ndarray:
        if self.spec.values == "float32":
            return self._read("values", np.float32)[:self.size].reshape(self.shape).copy()
        import ml_dtypes
        return self._read("values", np.uint16)[:self.size].view(ml_dtypes.bfloat16).astype(np.float32).reshape(
            self.shape)


class QatMixin:
    """The export's host side on :class:`~rlx_gpu.engine.Optimizer`: buffers, tables, dispatches, refreshes."""

    def _init_qat(self) -> None:
        name = type(self).__name__
        specs = parse_qat(name, self.precision.get("qat"), self._shapes)
        self.qat: dict = {}
        self._qat_bufs: dict = {}
        if not specs:
            return
        writers = [p for p in self.passes if p.kind == "elementwise" and p.param == "rw"]
        if len(writers) != 1 or any(p.kind == "custom" for p in self.passes):
            raise ValueError(f"{name}: qat= needs an optimizer whose parameters one elementwise pass writes "
                             "(Adam, AdamW, SGD, RMSprop, Adagrad, LAMB, NAdamW, RAdam, QHAdamW, Lion, SophiaH, Mars)")
        if any(b.sig.qbits for b in self.buckets):
            raise ValueError(f"{name}: qat= does not combine with state_bits (block-quantized states)")
        n, ents, chan, code, vals = len(self._names), [], 0, 0, 0
        for k, (nm, s) in enumerate(specs.items()):
            shape, size = self._shapes[nm], int(np.prod(self._shapes[nm], dtype=np.int64))
            channels = shape[0] if s.per_channel else 1
            flags = int(s.per_channel) | (s.bits << 8) | ({None: 0, "float32": 1, "bfloat16": 2}[s.values] << 16)
            ents.append((self._index[nm], flags, max(1, size // max(1, channels)), channels, chan, code, vals, 0))
            self.qat[nm] = (nm, s, shape, chan, code, vals, channels)
            chan += _align(channels)
            code += _align(-(-size * s.bits // 32))
            vals += _align(size if s.values == "float32" else -(-size // 2)) if s.values else 0
        ent, amax = _align(HEAD + n), _align(HEAD + n) + 8 * len(ents)
        inv = amax + _align(chan)
        words = np.zeros(inv + _align(chan), np.uint32)
        words[:7] = [n, len(ents), ent, amax, inv, np.float32(np.finfo(np.float32).eps).view(np.uint32), 0]
        for k, e in enumerate(ents):
            words[HEAD + e[0]] = k + 1
            words[ent + 8 * k: ent + 8 * k + 8] = e
        dev = self.device
        self._qat_bufs = {"qat": dev.buffer(words.nbytes, f"{name}.qat", data=words),
                          "qat_scale": dev.buffer(4 * chan, f"{name}.qat.scale"),
                          "qat_codes": dev.buffer(4 * max(4, code), f"{name}.qat.codes"),
                          "qat_values": dev.buffer(4 * max(4, vals), f"{name}.qat.values")}
        self.qat = {nm: QuantizedCopy(self, *v) for nm, v in self.qat.items()}
        self._qat_refresh()

    def _qat_buffers(self) -> dict:
        return dict(self._qat_bufs)

    def _max_dispatches(self) -> int:
        chunks = sum(b.layout.num_chunks for b in self.buckets)
        return super()._max_dispatches() + (chunks + 1 if self.qat else 0)

    def _qat_plan(self, refresh: bool = False) -> list:
        """(kernel, bind group, workgroups) of the export's dispatches after a step (or, ``refresh``, without one)."""
        if not self.qat:
            return []
        b0 = self.buckets[0]
        out = [(self._kernel(b, "qat_amax"), self._bind("qat_amax", b, c), len(blk))
               for b in self.buckets for c, blk in enumerate(b.layout.blocks)] if refresh else []
        out.append((self._kernel(b0, "qat_rescale"), self._bind("qat_rescale", b0, 0), len(self.qat)))
        out += [(self._kernel(b, "qat_encode"), self._bind("qat_encode", b, c), len(blk))
                for b in self.buckets for c, blk in enumerate(b.layout.blocks)]
        return out

    @locked
    def _qat_refresh(self) -> None:
        """Export every chosen tensor from its stored weights (after the host wrote them)."""
        if not self.qat:
            return
        self._settle()
        n = len(self._names)
        flags = self._static_bits | np.uint32(self.record.bit["active"])
        recs = self.record.pack(n, {}, flags, {"first_block": self._first_block, "num_blocks": self._num_blocks})
        dev, q = self.device, self._qat_bufs["qat"]
        dev.queue.write_buffer(self._hyper, 0, np.ascontiguousarray(recs))
        dev.queue.write_buffer(q, 24, np.array([1], np.uint32))
        enc = dev.encoder()
        for k, bind, groups in self._qat_plan(refresh=True):
            k.dispatch(enc, bind, groups)
        dev.submit(enc)
        dev.queue.write_buffer(q, 24, np.array([0], np.uint32))

    def write_params(self, params: dict) -> None:
        """As the engine's, then the quantized copies of the tensors written are made again."""
        super().write_params(params)
        self._qat_refresh()

    def load_state_dict(self, *args, **kwargs) -> None:
        """As the engine's, then every quantized copy is made again from the loaded weights."""
        super().load_state_dict(*args, **kwargs)
        self._qat_refresh()
