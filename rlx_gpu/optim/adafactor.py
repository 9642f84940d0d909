"""Adafactor on the GPU: ``shaders/adafactor.wgsl``. The factored second moments (row and column means of g*g)
are tiny next to the tensors, so they live in one small float32 ``aux`` buffer (with the unfactored tensors'
second moments) instead of param-sized arenas; six passes per step (``MERGE`` and ``ROWCOLS`` off: eight), no host
round trip."""
from __future__ import annotations

import numpy as np

from ..core.sync import locked
from ..engine import Optimizer, Pass
from ..reference import adafactor as ref
from ..runtime.params import Params, declare

RT = 128  # rows per column job
RPW = 8  # row segments per workgroup of the rows pass
# The tables' entries (shaders/adafactor.wgsl reads them by name, each from whole vec4s of `tables`): two header
# rows, the rows pass's segments, the cols pass's jobs, the finish pass's jobs and the mean pass's pairs.
ROWS_HEAD = Params("AfRowsHead", "segs_at", "segs", "cols_at", "cols")
FINISH_HEAD = Params("AfFinishHead", "jobs_at", "jobs", "means_at", "means")
SEGMENT = Params("AfSegment", "t", "row", "start", "length")  # tensor t's row `row` (of all B*m) at chunk `start`
COL_JOB = Params("AfColJob", "t", "b", "c0", "row_a", "row_b", "lo", "hi", "at")  # columns c0.. of rows [row_a,
#   row_b) of batch b, for tensor elements [lo, hi) found from chunk word `at`
JOB = Params("AfJob", "t", "b", "axis", "first")  # WG rows (axis 0) or columns (1) of (t, b) from `first`
PAIR = Params("AfPair", "t", "b")  # a (tensor, batch) whose mean of R the mean pass takes
declare("adafactor.wgsl", read_from={"tables": (ROWS_HEAD, FINISH_HEAD, SEGMENT, COL_JOB, JOB, PAIR)})
DIMS = np.dtype([("m", np.int64), ("n", np.int64), ("B", np.int64), ("A", np.int64), ("CP", np.int64)])
# per tensor: rows, columns, batch, its first aux word, its column partials' first word
ENTRIES = ("rows", "cols", "finish", "mean")  # the custom passes, in the order of _table's counts


class Adafactor(Optimizer):
    """Adafactor (Shazeer & Stern 2018) with torch.optim.Adafactor's semantics, names and defaults (torch >= 2.5).

        per tensor: w = t^beta2_decay;  rho = min(lr, 1/sqrt(t));  alpha = max(eps2, RMS(p)) * rho;
        p *= 1 - lr * weight_decay;  g = -g if maximize
        >= 2 dims [..., m, n]: R = lerp(R, mean_n(g^2), w);  C = lerp(C, mean_m(g^2), w);
                               v = R (C / max(mean_m(R), eps1)) (CSCALE; off: R C / max(...))
        <  2 dims:             v = lerp(v, g^2, w)
        u = g / sqrt(max(v, eps1^2));  p -= alpha / max(1, RMS(u) / d) * u

    Args:
        params: dict name -> array (float32, float16 or bfloat16), torch tensors (``model.parameters()``), or
            a list of param-group dicts.
        lr (1e-2: caps the relative step size), beta2_decay (-0.8), eps ((None, 1e-3): eps1 floors the second
        moment, None = float32's epsilon; eps2 floors RMS(p)), d (1.0: clipping threshold of RMS(u)),
        weight_decay (0, decoupled), maximize (False).
    State: step, row_var and col_var (>= 2 dims) or variance; float32 whatever ``state_dtype`` says.
    """
    spec = ref.Adafactor
    shader = "adafactor.wgsl"
    fields = ("decay", "w", "rho", "eps1", "eps2", "d", "sqrt_numel", "inv_cols", "inv_eps1", "rows:u32", "row_tiles:u32",
              "aux:u32",
              "cols:u32", "col_parts:u32", "batch:u32", "numel:u32")
    flags = ("factored", "decay", "recip")
    # Switches (a subclass may turn them off; each keeps every bit): MERGE: RMS(p)'s per-block sums taken by
    # update_norm (which then reads p too), not by a stats pass of their own (the same sums in the same order);
    # ROWCOLS: the rows and cols passes (independent) in one dispatch. Both: six dependent passes, not eight.
    # FINISH: the column partials the finish pass loads at once before adding them (1, 8 or 16; the same adds in
    # the same order, so the same bits): 1 leaves a tall matrix's columns a chain of dependent loads (16: the H200's
    # choice, -9 to -11% a step in every precision, PERF_NOTES 63).
    # RECIP: direction() (update_norm's and apply's) finds an element's row by a float32 reciprocal with an exact
    # correction, and skips the batch division of a single matrix: the same row, so the same bits (on: the H200's
    # choice, -3 to -7% a step in every precision, PERF_NOTES 66).
    # CSCALE (on: the H200's choice, -1.5 to -6% a step, PERF_NOTES 70; it changes the rounding, so the twin follows
    # it): the mean pass divides each column factor by the row mean once (CN = C / max(M, eps1)) and direction()
    # takes v = R * CN, one multiply and four loads a vec4 instead of (R * C) / max(M, eps1)'s five loads and four
    # divisions; the spec is the twin that rounds the same way (rlx_gpu.reference.Adafactor, whose CSCALE is on too;
    # with it off, rlx_gpu.reference.adafactor.AdafactorDivided).
    # RSQRT (off: the H100's choice, bf16 -1.5% a step but f16 +4%, PERF_NOTES 75; with CSCALE; it changes the
    # rounding, so the twin follows it: rlx_gpu.reference.adafactor.AdafactorRsqrt): the finish pass keeps
    # RR = 1/sqrt(R) beside R, the mean pass writes 1/sqrt(CN) for CN, and direction() takes min(RR CN', 1/eps1)
    # for rsqrt(max(R CN, eps1^2)): no inverseSqrt, maximum or clamp an element (a multiply and a minimum).
    MERGE = True
    ROWCOLS = True
    FINISH = 16
    RECIP = True
    CSCALE = True
    RSQRT = False
    constants = {"RT": RT, "RPW": RPW, "FL": FINISH, "RC": int(RECIP), "CS": int(CSCALE), "RQ": int(RSQRT)}  # (a subclass's:
    #                                                                                        __init_subclass__)
    passes = (Pass("rowcols", kind="custom"), Pass("finish", kind="custom"), Pass("mean", kind="custom"),
              Pass("update_norm", fn="update_norm", param="r", reduce="xy"),
              Pass("ratio", kind="per_tensor", fn="ratio"),
              Pass("apply", fn="apply"))

    def __init_subclass__(cls, **kwargs):
        """A subclass's ``MERGE`` and ``ROWCOLS`` pick its passes, its ``FINISH`` the finish pass's loads, its
        ``RECIP`` direction()'s row, its ``CSCALE`` direction()'s factors and its spec (the modules are made from
        the class)."""
        super().__init_subclass__(**kwargs)
        cls.passes = cls.pass_list(cls.MERGE, cls.ROWCOLS)
        cls.constants = {**cls.constants, "FL": cls.FINISH, "RC": int(bool(cls.RECIP)), "CS": int(bool(cls.CSCALE)),
                         "RQ": int(bool(cls.RSQRT))}
        if "spec" not in vars(cls):
            cls.spec = (ref.AdafactorRsqrt if cls.RSQRT else ref.Adafactor) if cls.CSCALE else ref.AdafactorDivided

    @staticmethod
    def pass_list(merge: bool, rowcols: bool) -> tuple:
        """The passes of a step with the switches ``MERGE`` and ``ROWCOLS`` as given."""
        p = Adafactor.passes
        first = p[:1] if rowcols else (Pass("rows", kind="custom"), Pass("cols", kind="custom"))
        if merge:
            return (*first, *p[1:])
        return (Pass("stats", fn="stats", param="r", grad="", reduce="x"), *first, *p[1:3],
                Pass("update_norm", fn="update_norm", param="", reduce="y"), *p[4:])

    def __init__(self, params, *args, **kwargs):
        if self.FINISH not in (1, 8, 16) or isinstance(self.FINISH, bool):
            raise ValueError(f"{type(self).__name__}.FINISH must be 1, 8 or 16 (column partials loaded at once), "
                             f"got {self.FINISH!r}")
        if self.RSQRT and not self.CSCALE:
            raise ValueError(f"{type(self).__name__}.RSQRT needs CSCALE (its column factors are CN's)")
        super().__init__(params, *args, **kwargs)
        n = len(self._names)
        self._fact = np.array([ref.factored(self._shapes[x]) for x in self._names])
        self._dims = d = np.zeros(n, DIMS)
        off = 0
        for t, name in enumerate(self._names):  # R, C, RA, M, RS, CN, RR per factored tensor; V per unfactored one
            shape = self._shapes[name]
            if self._fact[t]:
                m, nn, B = shape[-2], shape[-1], int(np.prod(shape[:-2], dtype=np.int64))
                d["m"][t], d["n"][t], d["B"][t], d["A"][t] = m, nn, B, off
                off += 3 * B * m + 2 * B * nn + B + B * -(-m // self.WG)  # (the sections: aux_* in the shader)
            else:
                d["A"][t] = off
                off += int(np.prod(shape, dtype=np.int64))
        for t in np.flatnonzero(self._fact):
            d["CP"][t] = off
            off += d["B"][t] * (-(-d["m"][t] // RT)) * d["n"][t]
        if 4 * off > self.device.max_storage_binding:
            raise ValueError(f"Adafactor: the factored and unfactored state needs {4 * off} bytes in one buffer, "
                             f"more than the adapter's max storage binding ({self.device.max_storage_binding})")
        self._aux = self.device.buffer(4 * max(off, 1), "Adafactor.aux")
        self._sqrt_numel = np.sqrt(np.maximum(1, np.array([np.prod(self._shapes[x]) for x in self._names], np.float64)))
        self._tables = {}
        pairs = [(t, b) for t in np.flatnonzero(self._fact) for b in range(self._dims["B"][t])]
        for k, bucket in enumerate(self.buckets):
            for c in range(bucket.layout.num_chunks):
                self._tables[(id(bucket), c)] = self._table(bucket, c, pairs if k == 0 and c == 0 else [])

    def _table(self, bucket, c, pairs):
        """One chunk's header, row segments and column jobs (and the (tensor, batch) pairs of the finish pass)."""
        rows, cols = [], []
        for t in bucket.ids:
            if not self._fact[t]:
                continue
            m, nn, B = (int(self._dims[k][t]) for k in ("m", "n", "B"))
            for (pc, off, ln, toff) in bucket.layout.pieces[bucket.local[t]]:
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
        jobs = np.array([(t, b, 0, r0) for t, b in pairs for r0 in range(0, self._dims["m"][t], self.WG)]
                        + [(t, b, 1, c0) for t, b in pairs for c0 in range(0, self._dims["n"][t], self.WG)],
                        np.int64).reshape(-1, 4)
        means = np.array(pairs, np.int64).reshape(-1, 2)
        body = [P.pack_vec4s(**dict(zip(P.names, x.T))) for P, x in
                ((SEGMENT, rows), (COL_JOB, cols), (JOB, jobs), (PAIR, means))]
        at = np.cumsum([ROWS_HEAD.vec4s + FINISH_HEAD.vec4s] + [len(b) for b in body])  # each table's first vec4
        head = [ROWS_HEAD.pack_vec4s(segs_at=at[0], segs=len(rows), cols_at=at[1], cols=len(cols)),
                FINISH_HEAD.pack_vec4s(jobs_at=at[2], jobs=len(jobs), means_at=at[3], means=len(means))]
        tab = np.concatenate(head + body).astype(np.uint32)
        counts = (-(-len(rows) // RPW), len(cols), len(jobs), len(means))
        return self.device.buffer(tab.nbytes, f"Adafactor.tables[{c}]", data=tab), dict(zip(ENTRIES, counts))

    def _extra_buffers(self, bucket, chunk):
        return {"aux": self._aux, "tables": self._tables[(id(bucket), chunk)][0]}

    def _custom_groups(self, p, bucket, chunk):
        n = self._tables[(id(bucket), chunk)][1]
        return n["rows"] + n["cols"] if p.entry == "rowcols" else n[p.entry]

    def _scratch_bytes(self) -> int:
        return super()._scratch_bytes() + self._aux.size + sum(b.size for b, _ in self._tables.values())

    def fill(self, g, t, fresh, sel):
        lr, wd = g["lr"], g["weight_decay"]
        d = self._dims[sel]
        numel = [int(np.prod(self._shapes[self._names[i]])) for i in sel]
        # RECIP's bounds (shaders/adafactor.wgsl row_of: the reciprocal's row within 1 of the quotient)
        recip = self._fact[sel] & (d["B"] * d["m"] < 1 << 20) & (np.array(numel, np.int64) < 1 << 30)
        cols = dict(decay=1 - lr * wd, w=t ** g["beta2_decay"], rho=np.minimum(lr, 1 / np.sqrt(t)),
                    eps1=ref.eps1_of(g), eps2=g["eps"][1], d=g["d"], sqrt_numel=self._sqrt_numel[sel],
                    inv_cols=1 / np.maximum(d["n"], 1), inv_eps1=1 / ref.eps1_of(g),
                    rows=d["m"], row_tiles=-(-d["m"] // RT), aux=d["A"], cols=d["n"], col_parts=d["CP"],
                    batch=d["B"], numel=numel)
        return cols, dict(factored=self._fact[sel], decay=wd != 0, recip=recip)

    # -- state dicts: the factored moments live in aux --------------------------------------------------
    def _aux_views(self, host: np.ndarray, t: int) -> dict:
        m, nn, B, A = (int(self._dims[k][t]) for k in ("m", "n", "B", "A"))
        shape = self._shapes[self._names[t]]
        if not self._fact[t]:
            return {"variance": host[A:A + int(np.prod(shape))].reshape(shape)}
        return {"row_var": host[A:A + B * m].reshape(self.spec.state_shape("row_var", shape)),
                "col_var": host[A + B * m:A + B * m + B * nn].reshape(self.spec.state_shape("col_var", shape))}

    @locked
    def state_dict(self, dequantize: bool = False) -> dict:
        sd = super().state_dict(dequantize=dequantize)
        host = self.device.read(self._aux, 0, self._aux.size, out=np.empty(self._aux.size // 4, np.float32))
        for t, n in enumerate(self._names):
            if n in sd["state"]:
                sd["state"][n].update({k: v.copy() for k, v in self._aux_views(host, t).items()})
        return sd

    @locked
    def load_state_dict(self, sd: dict, cast: bool = False, params: dict | None = None) -> None:
        super().load_state_dict(sd, cast, params)  # validates everything first, then steps and hyperparameters
        host = np.zeros(self._aux.size // 4, np.float32)  # moments from sd; row/column accumulators zero
        for t, n in enumerate(self._names):
            st = sd["state"].get(n, {})
            for k, view in self._aux_views(host, t).items():
                if k in st:
                    view[...] = np.asarray(st[k]).astype(np.float32)
        self.device.transfer.upload([(self._aux, 0, host.view(np.uint8))])
