"""Adafactor on the GPU (``shaders/adafactor.wgsl``; the update rule is in :mod:`rlx_gpu.reference.adafactor`).

The factored second moments (row and column means of g*g) are tiny next to the tensors, so they live in one
small ``aux`` buffer instead of a param-sized arena; seven dispatches per step, no host round trip.
"""
from __future__ import annotations

import math

import numpy as np

from ._sync import locked
from .optimizer import Optimizer
from .reference import adafactor as ref

FACTORED, DECAY = 4, 16
RT = 128  # rows per column job


class Adafactor(Optimizer):
    """Adafactor (Shazeer & Stern 2018) with torch.optim.Adafactor's semantics, names and defaults.

    Args:
        params: dict name -> float32 array, or a list of param-group dicts.
        lr: the cap of the relative step size rho_t = min(lr, 1/sqrt(t)). beta2_decay: the second-moment
        weight is t^beta2_decay. eps: (eps1, eps2); eps1 floors the second moment (None: float32 epsilon),
        eps2 floors RMS(p). d: clipping threshold of RMS(update). weight_decay: decoupled. maximize: ascend.
        device: adapter selector.
    """
    spec = ref.Adafactor
    shader = "adafactor.wgsl"
    entries = ("stats", "rows", "cols", "finish", "update_norm", "ratio", "apply")
    aux_states = ("row_var", "col_var", "variance")
    constants = {"RT": RT}

    def __init__(self, params, lr=1e-2, beta2_decay=-0.8, eps=(None, 1e-3), d=1.0, weight_decay=0.0,
                 maximize=False, *, device=None, lr_scale=None, clip_grad_norm=None,
                 skip_nonfinite=False):
        super().__init__(params, device=device, lr_scale=lr_scale, clip_grad_norm=clip_grad_norm, skip_nonfinite=skip_nonfinite, lr=lr, beta2_decay=beta2_decay, eps=eps, d=d,
                         weight_decay=weight_decay, maximize=maximize)
        n = len(self._names)
        self._fact = np.array([ref.factored(self._shapes[x]) for x in self._names])
        self._dims = np.zeros((n, 5), np.int64)  # m, n, B, A, CP
        off = 0
        for t, name in enumerate(self._names):  # R, C, RA, M per factored tensor; V per unfactored one
            shape = self._shapes[name]
            if self._fact[t]:
                m, nn = shape[-2], shape[-1]
                B = int(np.prod(shape[:-2], dtype=np.int64))
                self._dims[t, :4] = m, nn, B, off
                off += 2 * B * m + B * nn + B
            else:
                self._dims[t, 3] = off
                off += self.layout.sizes[t]
        for t in np.flatnonzero(self._fact):
            m, nn, B = self._dims[t, :3]
            self._dims[t, 4] = off
            off += B * (-(-m // RT)) * nn
        if 4 * off > self.device.max_storage_binding:
            raise ValueError(f"Adafactor: the factored and unfactored state needs {4 * off} bytes in one buffer, "
                             f"more than the adapter's max storage binding ({self.device.max_storage_binding})")
        self._aux = self.device.buffer(4 * max(off, 1), "Adafactor.aux")
        self._sqrt_numel = np.sqrt(np.maximum(1, np.array(self.layout.sizes, np.float64)))
        self._scratch = self.device.buffer(4 * (2 * max(1, self.layout.total_blocks) + n), "Adafactor.scratch")
        self._tables, self._counts = self._build_tables()

    def _build_tables(self):
        """Per chunk: header, row segments, column jobs; pairs (t, b) in chunk 0's table."""
        tables, counts = [], []
        pairs = [(t, b, 0, 0) for t in np.flatnonzero(self._fact) for b in range(self._dims[t, 2])]
        for c in range(self.layout.num_chunks):
            rows, cols = [], []
            for t in np.flatnonzero(self._fact):
                m, nn, B = (int(x) for x in self._dims[t, :3])
                for (pc, off, ln, toff) in self.layout.pieces[t]:
                    if pc != c or not ln:
                        continue
                    lo, hi = toff, toff + ln
                    q = np.arange(lo // nn, (hi - 1) // nn + 1, dtype=np.int64)
                    s, e = np.maximum(q * nn, lo), np.minimum((q + 1) * nn, hi)
                    seg = np.stack([np.full_like(q, t), q, off + (s - lo), e - s], 1)
                    rows.append(seg[seg[:, 3] > 0])
                    for b in range(B):  # rows of batch b present (maybe in part) in this piece, by row tile
                        ra, re = max(lo // nn, b * m) - b * m, min((hi - 1) // nn + 1, (b + 1) * m) - b * m
                        while ra < re:
                            rb = min((ra // RT + 1) * RT, re)
                            cols += [(t, b, c0, ra, rb, lo, hi, off) for c0 in range(0, nn, self.WG)]
                            ra = rb
            rows = np.concatenate(rows) if rows else np.zeros((0, 4), np.int64)
            cols = np.array(cols, np.int64).reshape(-1, 8)
            extra = np.array(pairs, np.int64).reshape(-1, 4) if c == 0 else np.zeros((0, 4), np.int64)
            hdr = np.array([[2, len(rows), 2 + len(rows), len(cols)],
                            [2 + len(rows) + 2 * len(cols), len(extra), 0, 0]], np.int64)
            tab = np.concatenate([hdr, rows, cols.reshape(-1, 4), extra]).astype(np.uint32)
            tables.append(self.device.buffer(tab.nbytes, f"Adafactor.tables[{c}]", data=tab))
            counts.append((len(rows), len(cols), len(extra)))
        return tables, counts

    def _buffers(self, chunk):
        return dict(super()._buffers(chunk), aux=self._aux, scratch=self._scratch, tables=self._tables[chunk])

    def _fill(self, g, t, fresh, rec, sel):
        lr, wd = g["lr"], g["weight_decay"]
        rec[:, 1] = 1 - lr * wd
        rec[:, 2] = t ** g["beta2_decay"]
        rec[:, 3] = np.minimum(lr, 1 / np.sqrt(t))
        rec[:, 4] = ref.eps1_of(g)
        rec[:, 5] = g["eps"][1]
        rec[:, 6] = g["d"]
        rec[:, 11] = self._sqrt_numel[sel]
        return (np.where(self._fact[sel], FACTORED, 0) | (DECAY if wd != 0 else 0)).astype(np.uint32)

    def _pack(self, words):
        """Integer words of the record (sizes and offsets) over the float ones."""
        d = self._dims
        words[:, 7] = d[:, 0]
        words[:, 8] = -(-d[:, 0] // RT)
        words[:, 9] = d[:, 3]
        words[:, 10] = d[:, 1]
        words[:, 12] = d[:, 4]
        words[:, 13] = d[:, 2]

    def _encode(self, enc):
        k = self._kernels
        for c, b in enumerate(self.layout.blocks):
            k["stats"].dispatch(enc, self._bind("stats", c), len(b))
        for c, (nr, nc, _) in enumerate(self._counts):
            k["rows"].dispatch(enc, self._bind("rows", c), nr)
            k["cols"].dispatch(enc, self._bind("cols", c), nc)
        k["finish"].dispatch(enc, self._bind("finish", 0), self._counts[0][2])
        for c, b in enumerate(self.layout.blocks):
            k["update_norm"].dispatch(enc, self._bind("update_norm", c), len(b))
        k["ratio"].dispatch(enc, self._bind("ratio", 0), len(self._names))
        for c, b in enumerate(self.layout.blocks):
            k["apply"].dispatch(enc, self._bind("apply", c), len(b))

    # -- state dicts: the factored moments live in aux --------------------------------------------------
    def _aux_views(self, host: np.ndarray, t: int) -> dict:
        m, nn, B, A, _ = (int(x) for x in self._dims[t])
        shape = self._shapes[self._names[t]]
        if not self._fact[t]:
            return {"variance": host[A:A + self.layout.sizes[t]].reshape(shape)}
        return {"row_var": host[A:A + B * m].reshape(self.spec.state_shape("row_var", shape)),
                "col_var": host[A + B * m:A + B * m + B * nn].reshape(self.spec.state_shape("col_var", shape))}

    @locked
    def state_dict(self) -> dict:
        sd = super().state_dict()
        host = self.device.read(self._aux, 0, self._aux.size, out=np.empty(self._aux.size // 4, np.float32))
        for t, n in enumerate(self._names):
            if n in sd["state"]:
                sd["state"][n].update({k: v.copy() for k, v in self._aux_views(host, t).items()})
        return sd

    @locked
    def load_state_dict(self, sd: dict) -> None:
        super().load_state_dict(sd)  # validates everything first, then steps and hyperparameters
        host = np.zeros(self._aux.size // 4, np.float32)  # moments from sd; row/column accumulators zero
        for t, n in enumerate(self._names):
            st = sd["state"].get(n, {})
            for k, view in self._aux_views(host, t).items():
                if k in st:
                    view[...] = np.asarray(st[k], np.float32)
        self.device.transfer.upload([(self._aux, 0, host.view(np.uint8))])
