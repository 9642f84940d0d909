"""Riemannian SGD on the Stiefel manifold on the GPU: the projections and products as batched GEMMs per shape
(``rlx_gpu.linalg``), the QR retraction as Cholesky-QR run twice (Gram matrix by GEMM, blocked Cholesky, blocked
triangular solve) and the Cayley retraction by Woodbury (GEMMs and a 2p x 2p solve by blocked LU with partial
pivoting): ``shaders/stiefel.wgsl`` and ``rlx_gpu.linalg.factor``, all in the step's one compute pass."""
from __future__ import annotations

import numpy as np

from .. import linalg
from ..linalg.factor import BLOCK, Mat, Rec, lu_solve
from ..linalg.half import FloatProducts, HalfProducts
from ..reference import stiefel as ref
from ..runtime.params import Params, declare
from .matrix import MatrixOptimizer

#: shaders/stiefel.wgsl's parameters: a tensor piece's record (``mp``) and a batch's (``sp``; ``rec``: each matrix's
#: record word), by name.
PIECE = Params("StiefelPiece", "count", "chunk_off", "work_off", "rec", "gm_word", "momentum", "q", "p")
RUN = Params("StiefelRun", "n", "p", "batch", "q", "momentum", "canonical", tail="rec")
declare("stiefel.wgsl", PIECE, RUN)


def _blocks(s: int) -> int:
    return -(-s // BLOCK)


class StiefelSGD(MatrixOptimizer):
    """Riemannian SGD (with optional Nesterov momentum) keeping (n, p) matrices with orthonormal columns: geoopt's
    ``RiemannianSGD`` on ``geoopt.EuclideanStiefel`` (QR retraction, ``manifold="euclidean"``, the default) or
    ``geoopt.CanonicalStiefel`` (Cayley retraction, ``"canonical"``).

    For geoopt users: ``geoopt.Stiefel()`` IS ``CanonicalStiefel``, so ``ManifoldParameter(x, manifold=Stiefel())``
    with ``RiemannianSGD`` is ``StiefelSGD(..., manifold="canonical")`` here; this class's default,
    ``"euclidean"``, is ``geoopt.EuclideanStiefel()`` (cheaper per step; the two differ in the tangent projection
    and the retraction, so trajectories differ). The update (see
    :mod:`rlx_gpu.reference.stiefel`): g += weight_decay * X; r = g - X sym(X^T g); momentum as geoopt (the buffer
    starts as the raw grad); X = Q of QR(X - lr d) (R's diagonal positive), the buffer projected onto the new
    tangent space. The QR runs as Cholesky-QR twice in float32 (the Q with a positive-diagonal R, as geoopt's).
    ``manifold="canonical"`` (geoopt's CanonicalStiefel): r = g - X g^T X and the Cayley retraction
    (I - A/2)^-1 (I + A/2) [X, b], A = u X^T - X u^T, by Woodbury: GEMMs and one 2p x 2p solve per matrix (blocked
    LU with partial pivoting, the trailing updates as GEMMs), instead of geoopt's n x n solve.

    Args:
        params: dict name -> (n, p) float32 array with n >= p and orthonormal columns (checked: ValueError naming
            the tensor otherwise), torch tensors, or a list of param-group dicts.
        lr (1e-3).  momentum (0).  dampening (0).  weight_decay (0).  nesterov (False).  manifold ("euclidean").
        matmul_dtype ("float32" | "float16": the tangent projections' products in float16 with float32 sums, on
        the tensor-core GEMM where the device has subgroup matrices, else gemm16; the retractions stay float32,
        so the points stay on the manifold to float32 rounding).
    State (geoopt's names): step[, momentum_buffer].
    """
    spec = ref.StiefelSGD
    wgsl = "stiefel.wgsl"
    fields = ("wd", "mu", "omd", "neg_lr")
    flags = ("nesterov", "seed")

    def __init__(self, params, *args, **kwargs):
        super().__init__(params, *args, **kwargs)  # (the float32 and point checks, the shape groups: .matrix)
        dev = self.device
        self._work = {}
        for (rows, cols), ts in self._groups.items():
            size = 4 * len(ts) * rows * cols
            self._work[rows, cols] = {k: dev.buffer(size, f"StiefelSGD.{k}{(rows, cols)}")
                                      for k in ("xs", "gs", "ms", "ys", "zs")}
            self._work[rows, cols]["small"] = dev.buffer(4 * len(ts) * cols * cols, f"StiefelSGD.small{(rows, cols)}")
        # (two placeholders: one buffer in two writable bindings of a dispatch is invalid WebGPU, refused by Dawn)
        self._dummy_buf = dev.buffer(16, "StiefelSGD.no-momentum")
        self._dummy_vv = dev.buffer(16, "StiefelSGD.no-cayley")
        rec = self.record
        self._consts = dict(W_FLAGS=rec.tensor.offset["flags"], W_WD=rec.tensor.offset["wd"],
                            W_MU=rec.tensor.offset["mu"], W_OMD=rec.tensor.offset["omd"],
                            W_NLR=rec.tensor.offset["neg_lr"], B_NEST=rec.bit["nesterov"], B_SEED=rec.bit["seed"])

    def _check_matrices(self) -> None:
        self.spec.check_points(type(self).__name__, self.read_params())

    def fill(self, g, t, fresh, sel):
        cols = dict(wd=g["weight_decay"], mu=g["momentum"], omd=1 - g["dampening"], neg_lr=-g["lr"])
        return cols, dict(nesterov=g["nesterov"], seed=np.array(["momentum_buffer" in f for f in fresh]))

    def _max_dispatches(self) -> int:
        """Every piece's two kernels, and per shape each of the four settings (momentum, manifold) at its worst:
        Cholesky-QR twice (two dispatches a 32-column block for the Cholesky, two for the solve) or the Cayley
        step (five a block of its 2p-wide LU solve)."""
        per = sum(40 + 8 * _blocks(p) + 5 * _blocks(2 * p) for _, p in self._groups)
        return 2 * self._pieces_count() + 8 * per + 8

    def _kernel_constants(self) -> dict:
        return self._consts

    def _encode(self, enc) -> None:
        """Per shape (and momentum on or off): gather, project, momentum, QR twice, transport, scatter."""
        dev, keep = self.device, []
        gm_word = self._grad_mul_word()
        words = np.zeros((self._mp.size // 4,), np.uint32)
        jobs = []
        for shape, ts in self._groups.items():
            active = [t for t in ts if self._active[t]]
            for mom, can, half in ((a, b, c) for a in (False, True) for b in (False, True) for c in (False, True)):
                members = [t for t in active if self._setting(t) == (mom, can, half)]
                if not members:
                    continue
                q = (2 if mom else 1) * shape[1] if can else 0
                rows = []
                for slot, t in enumerate(members):
                    rows += self._piece_records(words, t, PIECE, slot * shape[0] * shape[1], rec=t * self.record.size,
                                                gm_word=gm_word, momentum=int(mom), q=q, p=shape[1])
                jobs.append((shape, members, mom, q, rows, half))
        dev.queue.write_buffer(self._mp, 0, words)
        for shape, members, mom, q, rows, half in jobs:
            self._encode_shape(enc, shape, members, mom, q, rows, half, keep)
        self._keep = keep

    def _setting(self, t) -> tuple:
        """(momentum, canonical, float16 products) of tensor t's group: the batches' kinds."""
        g = self.param_groups[self._group_of[t]]
        return (g["momentum"] > 0, g["manifold"] == "canonical", g["matmul_dtype"] == "float16")

    def _encode_shape(self, enc, shape, members, mom, q, rows, half, keep) -> None:
        """One batch of matrices of one shape and one setting (momentum on or off; ``q`` > 0: canonical; ``half``:
        the projections' products through float16)."""
        dev, cache = self.device, self._cache
        n, p = shape
        B = len(members)
        w = self._work[shape]
        np_, pp = n * p, p * p
        prm = linalg._prm(dev, RUN.pack(n=n, p=p, batch=B, q=q, momentum=int(mom), canonical=int(q > 0),
                                        rec=[t * self.record.size for t in members]), "stiefel.prm", keep, cache)
        kg, ks = self._k("st_gather"), self._k("st_scatter")
        vv = self._cayley_buffers(shape)["vv"] if q else self._dummy_vv
        for (r, b, c, ln) in rows:
            kg.dispatch(enc, self._pbind(kg, r, b, c, w, mom, vv), -(-ln // 256))

        r = Rec(dev, enc, B, keep, cache)
        mat = {k: Mat(w[k], 0, np_, p) for k in ("xs", "gs", "ms", "ys", "zs")}
        small = Mat(w["small"], 0, pp, p)
        pr = self._products(r, shape) if half else FloatProducts(r)

        def sym():
            k = self._k("st_sym")
            k.dispatch(enc, k.cached_bind({"small": w["small"], "sp": prm}), -(-B * pp // 256))

        def proj(x, v):  # v = v - x sym(x^T v)  (the products through float16 with matmul_dtype="float16")
            pr.half(x, mat[x], n, p)
            pr.half(v, mat[v], n, p)
            pr.mm(x, v, small, p, p, n, ta=True)
            sym()
            pr.half("s", small, p, p)
            pr.mm(x, "s", mat["zs"], n, p, p, sub=mat[v])

        if q:  # canonical: r = g - X g^T X
            pr.half("gs", mat["gs"], n, p)
            pr.half("xs", mat["xs"], n, p)
            pr.mm("gs", "xs", small, p, p, n, ta=True)
            pr.half("s", small, p, p)
            pr.mm("xs", "s", mat["zs"], n, p, p, sub=mat["gs"])
        else:
            proj("xs", "gs")
        k = self._k("st_momentum")
        k.dispatch(enc, k.cached_bind({"hyper": self._hyper, "xs": w["xs"], "gs": w["gs"], "ms": w["ms"],
                                       "ys": w["ys"], "sp": prm}), -(-B * np_ // 256))
        if q:
            self._cayley(enc, shape, B, q, prm, keep)
        else:  # the QR retraction: Y's Q, in place
            linalg.cholesky_qr_encode(dev, enc, w["ys"], w["zs"], w["small"], n, p, B, keep, cache)
        if mom and not q:
            proj("ys", "ms")
        for (r, b, c, ln) in rows:
            ks.dispatch(enc, self._pbind(ks, r, b, c, w, mom, vv), -(-ln // 256))

    def _products(self, r, shape) -> HalfProducts:
        """The float16 products of a batch (matmul_dtype="float16"): float16 copies by name in the shape's
        buffers."""
        n, p = shape
        h16 = self._halves(shape, dict(xs=n * p, gs=n * p, ys=n * p, ms=n * p, s=p * p, scratch=n * p), 5)
        return HalfProducts(r, self._mm_path, h16, h16["scales"], 0)

    def _cayley_buffers(self, shape) -> dict:
        """The Cayley retraction's work buffers for a shape (made on first use)."""
        n, p = shape
        cap = len(self._groups[shape])
        w = self._work[shape]
        if "vv" not in w:
            for k, size in (("ww", n * 2 * p), ("zz", n * 2 * p), ("vv", n * 2 * p), ("kk", 4 * p * p),
                            ("tt", 4 * p * p), ("aug", 8 * p * p), ("p1", 4 * p * BLOCK), ("p2", 4 * p * BLOCK)):
                w[k] = self.device.buffer(4 * cap * size, f"StiefelSGD.{k}{shape}")
            w["piv"] = self.device.buffer(4 * cap * BLOCK, f"StiefelSGD.piv{shape}")
        return w

    def _cayley(self, enc, shape, B, q, prm, keep) -> None:
        """[X', b'] = (I - A/2)^-1 (I + A/2) [X, b] by Woodbury, into vv (see shaders/stiefel.wgsl)."""
        dev, n, p = self.device, shape[0], shape[1]
        w = self._cayley_buffers(shape)
        m = 2 * p

        def gemm(a, bb, c, M, N, K, strides, **kw):
            linalg.gemm(dev, enc, w[a], w[bb], w[c], M, N, K, batch=B, keep=keep, cache=self._cache,
                        strides=strides, **kw)

        def run(entry, groups, **bufs):
            k = self._k(entry)
            k.dispatch(enc, k.cached_bind({**{b: w[b] for b in bufs.get("use", ())}, "sp": prm}), groups)

        run("st_pack", -(-B * n * p // 256), use=("xs", "ys", "ms", "ww", "zz", "vv"))
        gemm("zz", "vv", "tt", m, q, n, (n * m, n * q, m * q), ta=True)           # T = Z^T V
        gemm("ww", "tt", "vv", n, q, m, (n * m, m * q, n * q), alpha=0.5, beta=1.0)  # R = V + W T / 2
        gemm("zz", "ww", "kk", m, m, n, (n * m, n * m, m * m), ta=True)           # K = Z^T W
        gemm("zz", "vv", "tt", m, q, n, (n * m, n * q, m * q), ta=True)           # T = Z^T R
        run("st_augment", -(-B * m * (m + q) // 256), use=("kk", "tt", "aug"))
        lu_solve(Rec(dev, enc, B, keep, self._cache), Mat(w["aug"], 0, m * (m + q), m + q), m, q, (w["p1"], w["p2"]),
                 w["piv"], w["kk"])
        run("st_extract", -(-B * m * q // 256), use=("aug", "tt"))
        gemm("ww", "tt", "vv", n, q, m, (n * m, m * q, n * q), alpha=0.5, beta=1.0)  # + W P / 2

    def _pbind(self, k, r, b, c, w, mom, vv):
        buf = b.states["momentum_buffer"].buffers[c] if mom else self._dummy_buf
        key = ("stiefel", k.entry, r, id(w["xs"]), id(buf), id(vv))
        if key not in self._binds:
            self._binds[key] = k.bind({"hyper": self._hyper, "grad": b.grad.buffers[c], "buf": buf,
                                       "param": b.param.buffers[c], "xs": w["xs"], "gs": w["gs"], "ms": w["ms"],
                                       "ys": w["ys"], "vv": vv, "mp": self._record_range(r)})
        return self._binds[key]
