"""The ``qat=`` export: a quantized copy of chosen tensors written in the step's own submission
(``shaders/qat_export.wgsl``; the spec is :func:`rlx_gpu.reference.qat.export_copy`).

The update pass of a bucket with exported tensors is the generated driver's variant (:func:`driver_lines`) that
walks runs of whole channels where it can (:mod:`.qatfuse`): there it finds each channel's amax in the workgroup
and writes the scales, codes and values itself, after a barrier (*fused*). For the other exported tensors it notes
each stored weight's |w| in its channel's global amax, and after the optimizer's passes ``qat_rescale`` (a
workgroup per exported tensor) makes the scales and ``qat_encode`` (a workgroup per block) the codes and values
(the *second pass*). All of it is gated with the step (a skipped step leaves every copy untouched) and runs only
for tensors with a grad this step. Weights written from the host (construction, ``write_params``,
``load_state_dict``, ``restore``) are exported by ``qat_amax`` and the second pass instead of the update.
``opt.qat[name]`` is a :class:`QuantizedCopy`. How the fused export and the second pass read the weights and
scales are class switches (``QAT_KEEP``, ``QAT_ENCODE``; the same bits either way).
"""
from __future__ import annotations

import numpy as np

from ..core.qatspec import parse_qat
from ..core.sync import locked
from ..runtime.layout import BLOCK_ROW
from ..runtime.params import Params, declare
from .qatfuse import QAT_RUN, fused_span, run_table

__all__ = ["QatMixin", "QuantizedCopy", "driver_lines", "qat_load"]

#: The export buffer's head and each exported tensor's entry, by name (qat_export.wgsl reads the buffer, an
#: ``array<atomic<u32>>``, as ``qat_w(QH_AMAX)`` and ``qat_w(b + QE_FLAGS)``: constants made from these two
#: declarations). After the head: the per-tensor index (``k + 1`` for tensor t's entry k, 0 for none).
QAT_HEAD = Params("QatHead", "tensors", "exported", "ent", "amax", "inv", "eps:f32", "refresh", "scale",
                  "spare:u32[8]")
QAT_ENTRY = Params("QatEntryWords", "tensor", "flags", "row", "channels", "chan", "code", "vals", "spare")
HEAD = QAT_HEAD.words  # words before the per-tensor index
declare("qat_export.wgsl", QAT_HEAD_WORDS=HEAD, QAT_ENTRY_WORDS=QAT_ENTRY.words,
        **{f"QH_{n.upper()}": QAT_HEAD.offset(n) // 4 for n in QAT_HEAD.names},
        **{f"QE_{n.upper()}": QAT_ENTRY.offset(n) // 4 for n in QAT_ENTRY.names})
ALIGN = 64  # words (256 bytes): every tensor's range of a buffer can be bound on its own


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def qat_load(sig, keep: int = 0, wg: int = 256) -> str:
    """``qat_load(i)``: the stored weights the copy is made of (the float32 master copy where there is one);
    ``qat_stored(v, i)``: the same just after the update stored ``v`` (``v`` itself where it is stored exactly);
    ``QAT_KEPT``/``QAT_HALVES``: the vec4s a thread of the update pass keeps (:attr:`QatMixin.QAT_KEEP`) and the
    workgroup's int4 half-words (``QAT_KEPT * WG``)."""
    exact = sig.master or not sig.param.low
    return (f"fn qat_load(i: u32) -> vec4<f32> {{ return ld_{'master' if sig.master else 'param'}(i); }}\n"
            f"fn qat_stored(v: vec4<f32>, i: u32) -> vec4<f32> {{ return {'v' if exact else 'qat_load(i)'}; }}\n"
            f"const QAT_KEPT: u32 = {max(1, keep)}u;\nconst QAT_HALVES: u32 = {max(1, keep) * wg}u;")


def driver_lines(keep: int = 0) -> dict:
    """The update driver's variant (:func:`rlx_gpu.engine.drivers.elementwise`): its block (the engine block's run in
    ``qat_runs``), lines before its loop, the loop over the run's vec4s, each vec4's element index, the line after each
    vec4's store, the loop's closing lines and the lines after the loop. ``keep`` (:attr:`QatMixin.QAT_KEEP`): the
    loop's first ``keep`` vec4s a thread are kept for the fused export (``qat_end_kept``; ``rest``: the loop over a
    longer run's other vec4s), else it walks the run and the export reads them back (``qat_end``)."""
    before = ["    let qe = qat_entry(select(0u, blk.tensor, live), live);",
              "    let qc0 = qat_first_channel(qe, blk.elem);", "    var qrun = vec2<u32>(qc0, 0u);",
              "    var qpos = qat_pos(qe, blk.elem + 4u * lid, 4u * WG);", "    qat_begin(lid);"]
    note = "qat_note(qe, qc0, qpos, {}, keep, &qrun);"
    if not keep:
        return {"block": "qat_run(wid, nwg)", "before": before,
                "loop": ["    for (var i = blk.first + lid; live && 4u * i < blk.end; i = i + WG) {"],
                "elem": "blk.elem + 4u * (i - blk.first)",
                "note": ["        " + note.format("qat_stored(select(o.p, zero, keep), i)"),
                         "        qat_next(qe, &qpos);"], "close": [],
                "after": ["    qat_end(qe, qc0, blk, lid, qrun);"]}
    return {"block": "qat_run(wid, nwg)", "before": before + ["    var qv: array<vec4<f32>, QAT_KEPT>;"],
            "loop": ["    for (var k = 0u; k < QAT_KEPT; k++) {", "        let i = blk.first + k * WG + lid;",
                     "        if (live && 4u * i < blk.end) {"],
            "elem": "blk.elem + 4u * (i - blk.first)",
            "note": ["        let qw = qat_stored(select(o.p, zero, keep), i);", "        " + note.format("qw"),
                     "        qv[k] = qw;", "        qat_next(qe, &qpos);"], "close": ["        }"],
            "rest": {"loop": ["    for (var i = blk.first + QAT_HALVES + lid; live && 4u * i < blk.end; i = i + WG) {"],
                     "note": ["        " + note.format("qat_stored(select(o.p, zero, keep), i)"),
                              "        qat_next(qe, &qpos);"], "close": []},
            "after": ["    qat_end_kept(qe, qc0, blk, lid, qrun, &qv);"]}


class QuantizedCopy:
    """One tensor's export: ``spec`` (:class:`~rlx_gpu.core.qatspec.QatSpec`), ``codes()`` (int8 in the
    tensor's shape, int4 codes as int8 in [-8, 7]), ``packed()`` (the device words as uint8: int4 two per byte, low
    nibble first), ``scale()`` (float32 per channel), ``values()`` (the fake-quantized weights, float32, where the
    spec asks for them), ``fused`` (whether the update pass writes it itself), and ``binding(part)`` for ``part``
    in "codes", "scale", "values": the ``{"buffer", "offset", "size"}`` your own WGSL binds (codes:
    ``array<u32>``, four int8 or eight int4 per word; scale: ``array<f32>``; values: ``array<f32>``, or
    ``array<u32>`` of two bfloat16)."""

    def __init__(self, opt, name, spec, shape, chan, code, vals, channels, fused=False):
        self._opt, self.name, self.spec, self.shape = opt, name, spec, tuple(shape)
        #: True where the update pass itself writes the copy (whole channels in one workgroup), False where the
        #: second pass after it does (the same bits either way).
        self.fused = fused
        self.size = int(np.prod(self.shape, dtype=np.int64))
        self.channels = channels
        buf = opt._qat_bufs["qat"]  # (every part a 256-byte aligned range of the one buffer)
        self._ranges = {"codes": (buf, 4 * code, 4 * max(1, -(-self.size * spec.bits // 32))),
                        "scale": (buf, 4 * chan, 4 * channels)}
        if spec.values:
            per = 1 if spec.values == "float32" else 2
            self._ranges["values"] = (buf, 4 * vals, 4 * max(1, -(-self.size // per)))

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

    #: Export in the update pass the tensors whose channels one workgroup can see whole (engine/qatfuse.py); False
    #: sends every tensor through the second pass (the same bits: what benchmarks/qat_bench.py compares).
    QAT_FUSE = True
    #: The fused export's variant: 0 reads the run's stored weights back after a storage barrier (``qat_end``); N >
    #: 0 has each thread of the update pass keep its first N stored vec4s in registers and quantize them itself
    #: (``qat_end_kept``: a run of at most ``4 * WG * N`` elements is not read back). The same bits either way
    #: (benchmarks/qat_bench.py compares them).
    QAT_KEEP = 4
    #: The second pass's code kernel: "cached" reads a block's scales once into workgroup memory
    #: (``qat_encode_cached``), "atomic" two atomic loads per vec4 (``qat_encode``, the first). The same bits.
    QAT_ENCODE = "cached"

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
        words, copies, spans = self._qat_words(specs)
        dev = self.device
        self._qat_bufs = {"qat": dev.buffer(words.nbytes, f"{name}.qat", data=words)}
        self._qat_buckets = [b for b in self.buckets if b.sig.qat]  # (the exported tensors' buckets)
        table = run_table(self._qat_buckets, self._total_blocks, spans)
        self._qat_runs = {(id(b), c): dev.buffer(max(QAT_RUN.nbytes, 4 * blk.size), f"{b.label}.qat.runs[{c}]",
                                                 data=table[BLOCK_ROW.column(blk, "block")] if len(blk)
                                                 else np.zeros(QAT_RUN.words, np.uint32))
                          for b in self._qat_buckets for c, blk in enumerate(b.layout.blocks)}
        self._qat_second = len(spans) < len(specs)  # (some tensors take the second pass in a step)
        self.qat = {nm: QuantizedCopy(self, *v) for nm, v in copies.items()}
        self._qat_refresh()

    def _qat_words(self, specs: dict) -> tuple:
        """The ``qat`` buffer's words (qat_export.wgsl's header names them), each copy's arguments and the run
        lengths of the fused tensors (global tensor -> elements)."""
        n, ents, spans, at = len(self._names), [], {}, {"chan": 0, "code": 0, "vals": 0}
        for nm, s in specs.items():
            t, shape, size = self._index[nm], self._shapes[nm], int(np.prod(self._shapes[nm], dtype=np.int64))
            b, i = self._where[t]
            span = fused_span(s, shape, len(b.layout.pieces[i]), b.layout.block) if self.QAT_FUSE else 0
            if span:
                spans[t] = span
            channels = shape[0] if s.per_channel else 1
            ents.append((nm, s, t, shape, channels, size, bool(span), dict(at)))
            at["chan"] += _align(channels)
            at["code"] += _align(-(-size * s.bits // 32))
            at["vals"] += _align(size if s.values == "float32" else -(-size // 2)) if s.values else 0
        ent = _align(HEAD + n)
        amax = _align(ent + QAT_ENTRY.words * len(ents))
        inv, scale = amax + at["chan"], amax + 2 * at["chan"]
        codes = scale + at["chan"]
        vals = codes + at["code"]
        words = np.zeros(max(vals + at["vals"], 4), np.uint32)
        words[:HEAD] = QAT_HEAD.pack(tensors=n, exported=len(ents), ent=ent, amax=amax, inv=inv,
                                     eps=np.finfo(np.float32).eps, refresh=0, scale=scale, spare=np.zeros(8))
        copies = {}
        for k, (nm, s, t, shape, channels, size, fused, o) in enumerate(ents):
            flags = int(s.per_channel) | (2 if fused else 0) | (s.bits << 8) | \
                ({None: 0, "float32": 1, "bfloat16": 2}[s.values] << 16)
            words[HEAD + t] = k + 1
            at_k = ent + QAT_ENTRY.words * k
            words[at_k: at_k + QAT_ENTRY.words] = QAT_ENTRY.pack(
                tensor=t, flags=flags, row=max(1, size // max(1, channels)), channels=channels, chan=o["chan"],
                code=codes + o["code"], vals=vals + o["vals"], spare=0)
            copies[nm] = (nm, s, shape, scale + o["chan"], codes + o["code"], vals + o["vals"], channels, fused)
        return words, copies, spans

    def _qat_buffers(self, bucket, chunk: int) -> dict:
        """The export's bindings for one chunk's kernels (the update pass walks the chunk's ``qat_runs``)."""
        if not bucket.sig.qat:
            return {}
        return dict(self._qat_bufs, qat_runs=self._qat_runs[(id(bucket), chunk)])

    def _max_dispatches(self) -> int:
        chunks = sum(b.layout.num_chunks for b in self.buckets if b.sig.qat)
        return super()._max_dispatches() + (chunks + 1 if self.qat else 0)

    def _qat_plan(self, refresh: bool = False) -> list:
        """(kernel, bind group, workgroups) of the export's dispatches after a step (or, ``refresh``, without one)."""
        if not self.qat:
            return []
        mine = self._qat_buckets
        b0 = mine[0]
        out = [(self._kernel(b, "qat_amax"), self._bind("qat_amax", b, c), len(blk))
               for b in mine for c, blk in enumerate(b.layout.blocks)] if refresh else []
        if not (refresh or self._qat_second):
            return out  # (the update pass exported every tensor)
        out.append((self._kernel(b0, "qat_rescale"), self._bind("qat_rescale", b0, 0), len(self.qat)))
        enc = {"cached": "qat_encode_cached", "atomic": "qat_encode"}[self.QAT_ENCODE]
        out += [(self._kernel(b, enc), self._bind(enc, b, c), len(blk)) for b in mine for c, blk in enumerate(b.layout.blocks)]
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
        dev.queue.write_buffer(q, QAT_HEAD.offset("refresh"), np.array([1], np.uint32))
        enc = dev.encoder()
        for k, bind, groups in self._qat_plan(refresh=True):
            k.dispatch(enc, bind, groups)
        dev.submit(enc)
        dev.queue.write_buffer(q, QAT_HEAD.offset("refresh"), np.array([0], np.uint32))

    def write_params(self, params: dict) -> None:
        """As the engine's, then the quantized copies of the tensors written are made again."""
        super().write_params(params)
        self._qat_refresh()

    def load_state_dict(self, *args, **kwargs) -> None:
        """As the engine's, then every quantized copy is made again from the loaded weights."""
        super().load_state_dict(*args, **kwargs)
        self._qat_refresh()
