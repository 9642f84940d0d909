"""SOAP's eigenbases (rlx_gpu/optim/soap.py): made on the device (``decompositions="device"``, the default) or on the
host (``"host"``: float64 NumPy, the twin's own), and the parameters of ``shaders/soap.wgsl``.

On the device, recorded at the end of the step that needs them:
  a tensor's first step: the eigenvectors of GG_0 = w g g^T and GG_1 = w g^T g from the step's grad itself
    (:func:`rlx_gpu.linalg.eigen.gram_bases`: Householder QR and one-sided Jacobi, no matrix squared), by descending
    eigenvalue. (A tensor whose GG was loaded non-zero before its first step is decomposed on the host.)
  every precondition_frequency-th step after it: per side, est = diag(Q^T M) for the power iteration's M = GG Q,
    the stable descending order of est, Q = the Q of M's columns in that order by blocked Householder QR (R's
    diagonal positive), and exp_avg_sq's rows and columns put in the two orders.
On the host: the GG_i (or M_i, Q_i) downloaded after the step, decomposed every side in parallel, uploaded.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from threadpoolctl import ThreadpoolController

from ..linalg.eigen import gather_cols, gram_bases, gram_dispatches, gram_work, order_by, qr_dispatches
from ..linalg.factor import Mat, Rec
from ..linalg.householder import form_q, positive_r, qr
from ..reference import soap as ref
from ..runtime.params import Params, declare

__all__ = ["PIECE", "RUN", "device_buffers", "device_init", "device_refresh", "device_dispatches", "host_work"]

#: shaders/soap.wgsl's parameters, by name: a tensor piece's record (``mp``) and a run of matrices' (``rp``).
PIECE = Params("SoapPiece", "count", "chunk_off", "work_off", "flags", "gm_word", "slot", "omb1:f32", "omb2:f32",
               "eps:f32", "neg_step:f32", "decay:f32", "toff", "rows", "cols")
RUN = Params("SoapRun", "count", "dst_off", "src_off", "batch", "slot0", "w:f32", "eps:f32")
declare("soap.wgsl", PIECE, RUN)

_BLAS_LOCK = threading.Lock()  # (limiting changes the process's BLAS setting: one SOAP at a time holds it)
_BLAS: list = []  # (the process's threadpool controller, made once: making one scans the loaded libraries)


def device_buffers(dev, w: dict, batch: int, m: int, n: int, label: str) -> None:
    """A shape's buffers for the device decompositions, in ``w`` (the large ones are the step's own: free when
    these run)."""
    short, long_ = ("M_0", "M_1") if m <= n else ("M_1", "M_0")
    s = min(m, n)
    w["ws"] = dev.buffer(4 * batch * s * s, f"{label}.ws")
    w["gram"] = gram_work(dev, batch, m, n, label, h=w["ts"], vs=w["ps"], qf=w["tmp"], fs=w[short], us=w[long_],
                          ws=w["ws"])
    w["o0"], w["o1"] = (dev.buffer(4 * batch * k, f"{label}.order") for k in (m, n))


def device_dispatches(m: int, n: int) -> int:
    """The most dispatches one run's device decompositions record (beyond its pieces' kernels)."""
    return max(gram_dispatches(m, n), 2 * (3 + qr_dispatches(max(m, n), max(m, n))))


def device_init(r: Rec, w: dict, s0: int, m: int, n: int) -> None:
    """The eigenbases of the run's first steps (its B matrices from slot s0) from their grads in gs."""
    mn = m * n
    gram_bases(r, Mat(w["gs"], s0 * mn, mn, n), m, n, Mat(w["Q_0"], s0 * m * m, m * m, m),
               Mat(w["Q_1"], s0 * n * n, n * n, n), w["gram"])


def device_refresh(r: Rec, w: dict, s0: int, m: int, n: int) -> None:
    """The refresh of the run's bases from M_i = GG_i Q_i (the step's GEMMs); the orders into o0, o1 (exp_avg_sq
    follows them in the caller's per-piece kernels)."""
    g = w["gram"]
    for i, s in ((0, m), (1, n)):
        q, mm = Mat(w[f"Q_{i}"], s0 * s * s, s * s, s), Mat(w[f"M_{i}"], s0 * s * s, s * s, s)
        order_by(r, q, mm, s, s, g["est"], w[f"o{i}"], at=s0 * s)
        h = Mat(w["tmp"], 0, s * s, s)
        gather_cols(r, h, mm, s, s, w[f"o{i}"], at=s0 * s)
        vs = Mat(mm.buf, 0, s * s, s)  # (M is used up)
        qr(r, h, s, s, vs, g["t"], (g["w1"], g["w2"]))
        form_q(r, q, s, s, s, vs, g["t"], (g["w1"], g["w2"]))
        positive_r(r, q, h, s, s)


def host_work(opt, todo: list) -> None:
    """The host's decompositions after a step, for ``todo`` = [(tensor, "init" | "refresh")]: download, decompose
    (every side in parallel, LAPACK releasing the GIL; BLAS held to one thread in each: nested BLAS threads thrash,
    six workers over a two-thread BLAS were 7x slower than one at a time), upload."""
    facts = opt._factors({t: ("GG_0", "GG_1") if what == "init" else ("M_0", "M_1", "Q_0", "Q_1")
                          for t, what in todo})
    jobs = [(t, i, what) for t, what in todo for i in (0, 1)]

    def side(job):
        t, i, what = job
        mat = facts[t][f"GG_{i}" if what == "init" else f"M_{i}"]
        return ref.host_work(what, [mat], [facts[t].get(f"Q_{i}")])[0]
    with _BLAS_LOCK:
        if not _BLAS:
            _BLAS.append(ThreadpoolController())
        with _BLAS[0].limit(limits=1, user_api="blas"), \
                ThreadPoolExecutor(max_workers=min(len(jobs), os.cpu_count() or 1)) as ex:
            new = dict(zip([(t, i) for t, i, _ in jobs], ex.map(side, jobs)))
    per_bucket: dict = {}  # (the refreshed tensors' second moments re-ordered: one transfer each way a bucket)
    for t, what in todo:
        opt._put_factors(t, {"Q_0": new[t, 0][0], "Q_1": new[t, 1][0]})
        if what == "refresh":
            b, i = opt._where[t]
            per_bucket.setdefault(id(b), (b, []))[1].append((t, i))
    for b, tis in per_bucket.values():
        arena = b.states["exp_avg_sq"]
        evs = arena.read_many([i for _, i in tis])
        arena.write_many([(i, np.take(np.take(ev.reshape(opt._shapes[opt._names[t]]), new[t, 0][1], axis=0),
                                      new[t, 1][1], axis=1)) for (t, i), ev in zip(tis, evs)])
