"""Top-k gradient compression with error feedback on the GPU, for :mod:`rlx_gpu.distributed`.

``TopK(ratio=0.01, error_feedback=True)`` is what a user passes (``grad_compression=``); :class:`TopKCompressor`
runs it on one rank's device: the grads live in a device arena (``grads``: one DeviceTensor per tensor, which a
user's WGSL backward pass can write in place), the residual in another; ``compress()`` selects each tensor's top k
entries (``shaders/topk.wgsl``: a three-pass radix select, a per-tensor scan and a compaction, all on the device)
and downloads only them (indices and values, 8 bytes an entry); :class:`Rebuild` adds every rank's lists into an
optimizer's grad buffers on the device and takes the mean (``shaders/topk_rebuild.wgsl``). The rule (which entries,
in which order, how the mean is summed) is :mod:`rlx_gpu.reference.topk`'s, bit for bit.
"""
from __future__ import annotations

import numbers

import numpy as np

from ...core.lowp import F32
from ...reference.topk import topk_count
from ...runtime.arena import Arena, DeviceTensor
from ...runtime.kernels import shipped_kernel
from ...runtime.layout import BLOCK_ROW, Layout
from ...runtime.params import Params, declare

__all__ = ["TopK", "TopKCompressor", "Rebuild"]

BLOCK = 4096  # entries per workgroup (shaders/topk.wgsl)
BINS = 2048
# The kernels' parameters, read by name in shaders/topk.wgsl and shaders/topk_rebuild.wgsl: the radix pass, the
# blocks of a dispatch, K, the tensors and the grads' factor; one rank's entries [lo, hi) of its list at base (values
# K further on) and the segments of its target; the finish pass's vec4s, its factor 1/N and its first partial.
TOPK = Params("TopkParams", "radix_pass", "blocks", "K", "tensors", "inv_scale:f32")
SCATTER = Params("ScatterParams", "lo", "hi", "K", "base", "segments")
FINISH = Params("FinishParams", "nvec", "inv_n:f32", "part0")
# The device tables, by name: a tensor's selection state (topk.wgsl ``sel``: the threshold's bits found so far, the
# equal entries still needed, k, its flat offset, its output base, first block and block count), a block's counts
# (``cnt``: above and equal to the threshold; the scan's output offset and equal entries before), a segment of a
# rebuilt grad buffer (topk_rebuild.wgsl ``segs``: flat start, size, element offset in the buffer).
SEL = Params("TensorSel", "prefix", "need", "k", "flat", "out_base", "first_block", "nblocks")
BLOCK_COUNT = Params("BlockCount", "above", "equal")
SEGMENT = Params("Segment", "start", "size", "at")
declare("topk.wgsl", TOPK, SEL, BLOCK_COUNT, BLOCK_ROW)  # (BLOCK_ROW: the Layout's block table, ``blocks``)
declare("topk_rebuild.wgsl", SCATTER, FINISH, SEGMENT)
INV_SCALE_AT = TOPK.offset("inv_scale")  # (its byte in the buffer, rewritten when the factor changes)


class TopK:
    """Send the ``ratio`` largest-magnitude entries of each tensor per step (at least one), keeping the rest in a
    residual added to the next step's grads (``error_feedback``; without it they are dropped)."""

    def __init__(self, ratio: float = 0.01, error_feedback: bool = True):
        if isinstance(ratio, (bool, np.bool_)) or not isinstance(ratio, numbers.Real):
            raise TypeError(f"TopK: ratio must be a number in (0, 1], got {ratio!r}")
        if not 0.0 < float(ratio) <= 1.0:
            raise ValueError(f"TopK: ratio must be in (0, 1], got {float(ratio)!r}")
        if not isinstance(error_feedback, (bool, np.bool_)):
            raise TypeError(f"TopK: error_feedback must be True or False, got {error_feedback!r}")
        self.ratio, self.error_feedback = float(ratio), bool(error_feedback)

    def __repr__(self):
        return f"TopK(ratio={self.ratio}, error_feedback={self.error_feedback})"


def _u32(words) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(words, np.uint32))


class TopKCompressor:
    """One rank's top-k state on ``device`` for tensors ``shapes`` (name -> shape, in the model's flat order)."""

    def __init__(self, device, shapes: dict, topk: TopK):
        self.device, self.topk = device, topk
        self.shapes = {n: tuple(s) for n, s in shapes.items()}
        sizes = [int(np.prod(s)) for s in self.shapes.values()]
        self.layout = lay = Layout(sizes, alignment=device.alignment, max_binding=device.max_storage_binding,
                                   block=BLOCK)
        self.grads_arena = Arena(device, lay, "topk.grads", F32)
        self.grads = {n: DeviceTensor(self.grads_arena, i, n, s) for i, (n, s) in enumerate(self.shapes.items())}
        ef = topk.error_feedback
        self.residual = Arena(device, lay, "topk.residual", F32) if ef else None
        self.k = [topk_count(topk.ratio, n) for n in sizes]
        self.K = K = int(sum(self.k))
        T = len(sizes)
        sel = SEL.pack_rows(prefix=0, need=self.k, k=self.k, flat=np.concatenate([[0], np.cumsum(sizes)[:-1]]),
                            out_base=np.concatenate([[0], np.cumsum(self.k)[:-1]]), first_block=lay.first_block,
                            nblocks=lay.num_blocks)
        self._sel_init = _u32(sel.reshape(-1))
        buf = device.buffer
        self.sel = buf(sel.nbytes, "topk.sel")
        self.hist = buf(4 * (T * BINS + 1), "topk.hist")
        self.cnt = buf(BLOCK_COUNT.nbytes * max(1, lay.block_end), "topk.cnt")
        self.outp = buf(8 * K, "topk.out")
        self._flag = np.zeros(4, np.uint8)
        self.out = np.zeros(2 * K, np.uint32)
        dummy = buf(16, "topk.no-residual")
        self._tables = [buf(b.nbytes, f"topk.blocks[{c}]", data=b) for c, b in enumerate(lay.blocks)]
        self._prm = {}
        for p in range(3):
            for c, b in [*enumerate(lay.blocks), (None, ())]:  # (chunk None: the per-tensor entries, no blocks)
                words = TOPK.pack(radix_pass=p, blocks=len(b), K=K, tensors=T, inv_scale=1.0)
                self._prm[p, c] = buf(words.nbytes, "topk.prm", data=words)
        self._inv = 1.0
        self._T = T
        self._kern = {e: shipped_kernel(device, "topk.wgsl", e, EF=int(ef))
                      for e in ("topk_hist", "topk_pick", "topk_count", "topk_scan", "topk_compact")}
        common = {"hist": self.hist, "sel": self.sel, "cnt": self.cnt, "outp": self.outp}
        self._binds = {}  # (entry, pass, chunk): per-tensor entries (pick, scan) run once, chunk None
        for e, passes, chunks in (("topk_hist", range(3), range(lay.num_chunks)), ("topk_pick", range(3), [None]),
                                  ("topk_count", [0], range(lay.num_chunks)), ("topk_scan", [0], [None]),
                                  ("topk_compact", [0], range(lay.num_chunks))):
            for p in passes:
                for c in chunks:
                    res = self.residual.buffers[c] if ef and c is not None else dummy
                    self._binds[e, p, c] = self._kern[e].bind({
                        **common, "prm": self._prm[p, c], "blocks": self._tables[c or 0], "res": res,
                        "grad": self.grads_arena.buffers[c or 0]})

    def _record(self, enc, entry: str, p: int = 0) -> None:
        k = self._kern[entry]
        if entry in ("topk_pick", "topk_scan"):
            k.dispatch(enc, self._binds[entry, p, None], self._T)
            return
        for c, b in enumerate(self.layout.blocks):
            k.dispatch(enc, self._binds[entry, p, c], len(b))

    def compress(self, agree=None, out: np.ndarray | None = None, mark=None, inv_scale: float = 1.0):
        """Select this step's entries from ``grads`` (+ the residual). ``agree``: with it, whether any entry is
        inf/NaN is read back first and passed to ``agree(bad) -> bool``; when that says to skip, nothing changes and
        None is returned. Else the residual is updated and ``(indices, values)`` (uint32 flat indices, ascending;
        float32) are returned (views of ``out``: 2K uint32 words, indices then value bits; default ``self.out``).
        ``mark``: called with "select" once the selection is queued (a profiler's timer). ``inv_scale``: the grads
        are multiplied by it first (float32: a GradScaler's 1/scale), so the residual holds unscaled values."""
        dev = self.device
        if inv_scale != self._inv:
            bits = _u32([np.array(inv_scale, np.float32).view(np.uint32)])
            for b in self._prm.values():
                dev.queue.write_buffer(b, INV_SCALE_AT, bits)
            self._inv = inv_scale
        dev.queue.write_buffer(self.sel, 0, self._sel_init)
        enc = dev.encoder()
        enc.clear_buffer(self.hist, 0, self.hist.size)
        for p in range(3):
            self._record(enc, "topk_hist", p)
            self._record(enc, "topk_pick", p)
        self._record(enc, "topk_count")
        self._record(enc, "topk_scan")
        if agree is not None:
            dev.submit(enc)
            dev.read(self.hist, 4 * self._T * BINS, 4, out=self._flag)
            if agree(bool(self._flag.view(np.uint32)[0])):
                return None
            enc = dev.encoder()
        self._record(enc, "topk_compact")
        dev.submit(enc)
        if mark is not None:
            mark("select")
        out = self.out if out is None else out
        dev.read(self.outp, 0, 8 * self.K, out=out)
        return out[:self.K], out[self.K:].view(np.float32)

    def write(self, grads: dict) -> None:
        """Upload host grads (name -> float32 array of the tensor's shape; every tensor) into ``grads``."""
        self.grads_arena.write_many([(i, np.asarray(grads[n], np.float32).reshape(-1))
                                     for i, n in enumerate(self.shapes)])

    def read_residual(self) -> dict:
        if self.residual is None:
            return {}
        flat = self.residual.read_many(range(len(self.shapes)))
        return {n: a.reshape(s) for a, (n, s) in zip(flat, self.shapes.items())}


class Rebuild:
    """The mean of every rank's lists, rebuilt in an optimizer's grad buffers. ``pieces``: (DeviceTensor grad slot,
    its first element's position in the model's flat order), float32 slots; ``K`` entries a rank; ``world`` ranks."""

    def __init__(self, device, pieces, K: int, world: int):
        self.device, self.K, self.world = device, int(K), int(world)
        segs = {}  # buffer id -> (buffer, [(flat start, length, element offset)])
        for slot, flat in pieces:
            if slot.dtype != np.float32:
                raise TypeError(f"Rebuild: {slot.name!r} has {slot.dtype} grads; top-k rebuilds float32 grads")
            toff = 0
            for b in slot.bindings():
                ln = b["size"] // 4
                segs.setdefault(id(b["buffer"]), (b["buffer"], []))[1].append((flat + toff, ln, b["offset"] // 4))
                toff += ln
        buf = device.buffer
        self.lst = buf(8 * self.K * self.world, "topk.lists")
        self._scatter = shipped_kernel(device, "topk_rebuild.wgsl", "topk_scatter")
        self._finish = shipped_kernel(device, "topk_rebuild.wgsl", "topk_finish")
        self.targets, npart = [], 0
        for dense, ss in segs.values():
            ss.sort()
            table = SEGMENT.pack_rows(**dict(zip(SEGMENT.names, np.array(ss, np.int64).T)))
            span = (ss[0][0], max(a + ln for a, ln, _ in ss), len(ss))
            sprm = [buf(SCATTER.nbytes, "topk.sprm") for _ in range(self.world)]
            seg_buf = buf(table.nbytes, "topk.segs", data=table)
            binds = [self._scatter.bind({"dense": dense, "segs": seg_buf, "lst": self.lst, "sprm": p}) for p in sprm]
            nvec = dense.size // 16
            groups = -(-nvec // 1024)
            fprm = FINISH.pack(nvec=nvec, inv_n=1.0 / self.world, part0=npart)  # (inv_n: float32(1/N))
            fprm = buf(fprm.nbytes, "topk.fprm", data=fprm)
            self.targets.append((dense, span, sprm, binds, fprm, groups))
            npart += groups
        self.partials = buf(4 * max(1, npart), "topk.partials")
        self._fbind = [self._finish.bind({"mean": t[0], "partials": self.partials, "fprm": t[4]})
                       for t in self.targets]
        self._out = np.zeros(max(1, npart), np.float32)

    def run(self, lists: np.ndarray) -> np.ndarray:
        """``lists``: (world, 2K) uint32, rank r's K ascending flat indices then K value bits. Rebuilds the mean in
        the grad buffers and returns the per-workgroup sums of squares of the result (inf/NaN there if any)."""
        dev, K = self.device, self.K
        q = dev.queue
        dev.transfer.upload([(self.lst, 0, np.ascontiguousarray(lists, np.uint32).reshape(-1).view(np.uint8))])
        enc = dev.encoder()
        for dense, (lo, hi, nseg), sprm, binds, _, _ in self.targets:
            enc.clear_buffer(dense, 0, dense.size)
            for r in range(self.world):
                e0, e1 = np.searchsorted(lists[r, :K], [lo, hi])
                q.write_buffer(sprm[r], 0, SCATTER.pack(lo=e0, hi=e1, K=K, base=2 * K * r, segments=nseg))
                if e1 > e0:
                    self._scatter.dispatch(enc, binds[r], -(-(int(e1) - int(e0)) // 256))
        for (_, _, _, _, _, groups), fb in zip(self.targets, self._fbind):
            self._finish.dispatch(enc, fb, groups)
        dev.submit(enc)
        return dev.read(self.partials, 0, self._out.nbytes, out=self._out)
