"""SOAP on the GPU: the projections into and out of the eigenbasis and Shampoo's GG products as batched GEMMs per
shape (``rlx_gpu.linalg``), Adam's moments and the update in ``shaders/soap.wgsl``, all in the step's one compute
pass; the eigendecompositions (a tensor's first step) and the refreshes' QR (every ``precondition_frequency``-th
step; the power iteration's product is a GEMM of the step) on the host in float64, right after the step."""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from threadpoolctl import ThreadpoolController

from .. import linalg
from ..core.groups import MAX_STEP
from ..reference import soap as ref
from .matrix import MatrixOptimizer

F32 = np.float32
_BLAS_LOCK = threading.Lock()  # (limiting changes the process's BLAS setting: one SOAP at a time holds it)
_BLAS: list = []  # (the process's threadpool controller, made once: making one scans the loaded libraries)


class SOAP(MatrixOptimizer):
    """SOAP (Vyas et al. 2024): Adam in the eigenbasis of Shampoo's two Kronecker factors, as
    ``pytorch_optimizer.SOAP`` on 2-D tensors (update rule: :mod:`rlx_gpu.reference.soap`).

    Per step and matrix (m, n), on the GPU: GG_0 += (1 - shampoo_beta)(g g^T - GG_0), GG_1 likewise with g^T g;
    the grad and exp_avg projected (Q_0^T x Q_1), the second moment kept in the rotated space, the update projected
    back (Q_0 x Q_1^T): eight float32 GEMMs, batched over the matrices of each shape. On the host, in float64: a
    tensor's first step ends with the eigendecompositions of its GG_i (no update is made at that step, as in
    pytorch_optimizer); every ``precondition_frequency``-th step after it ends with one power iteration (M_i =
    GG_i Q_i, a GEMM in the step) and QR per side, and the second moment's axes are re-ordered by the eigenvalue
    estimates diag(Q_i^T M_i). Those steps download the GG_i (or M_i and Q_i, and exp_avg_sq), decompose (every
    side in parallel, BLAS one thread each) and upload: they wait for the GPU. A checked step (``skip_nonfinite``,
    GradScaler) is read back right after it is submitted, so the host knows whether to decompose.

    Args:
        params: dict name -> 2-D float32 array, torch tensors, or a list of param-group dicts (other shapes:
            ValueError; route them to AdamW with :class:`rlx_gpu.Partition`).
        lr (3e-3).  betas ((0.95, 0.95)).  shampoo_beta (None: betas[1]).  weight_decay (1e-2, decoupled, by
        lr).  precondition_frequency (10).  correct_bias (True).  normalize_gradient (False).  eps (1e-8).
    State (pytorch_optimizer's names): step, exp_avg, exp_avg_sq, GG_0, GG_1, Q_0, Q_1 (its lists GG and Q).
    """
    spec = ref.SOAP
    wgsl = "soap.wgsl"
    factor_states = {"GG_0": 0, "Q_0": 0, "GG_1": 1, "Q_1": 1}

    def __init__(self, params, *args, **kwargs):
        super().__init__(params, *args, **kwargs)
        self._factor_buffers(("gs", "ms", "ts", "ps"), ("tmp",))
        for (m, n), w in self._work.items():
            B = len(self._groups[m, n])
            w["nrm"] = self.device.buffer(4 * B, f"SOAP.nrm{(m, n)}")
            w["M_0"], w["M_1"] = (self.device.buffer(4 * B * s * s, f"SOAP.M{(m, n)}") for s in (m, n))

    def _max_dispatches(self) -> int:
        return 3 * self._pieces_count() + 16 * len(self._names) + 8

    # -- the step --------------------------------------------------------------------------------------------
    def _encode(self, enc) -> None:
        """Per shape: runs of consecutive matrices with a grad, the same kind of step (first or later) and the
        same settings, each run batched."""
        keep = []
        gm_word = self._grad_mul_word()
        words = np.zeros((self._mp.size // 4,), np.uint32)
        jobs = self._runs(self._settings)
        for shape, run, setting, rows in jobs:
            update = setting[0]
            for t in run:
                g = self.param_groups[self._group_of[t]]
                lr = g["lr"] * self._scale[t]
                s = min(int(self._steps[t]) + 1, MAX_STEP) - 1  # (this step's s = step - 1, as pytorch_optimizer)
                ss = ref.step_size(dict(g, lr=lr), s) if update else 0.0
                rows += self._piece_records(words, t, self._slot[t] * shape[0] * shape[1],
                                            [int(update) | 2 * int(setting[2]), gm_word, self._slot[t]],
                                            [1 - g["betas"][0], 1 - g["betas"][1], g["eps"], -ss,
                                             1 - lr * g["weight_decay"]])
        self.device.queue.write_buffer(self._mp, 0, words)
        for shape, run, setting, rows in jobs:
            self._encode_run(enc, shape, run, setting, rows, keep)
        self._keep = keep

    def _settings(self, t) -> tuple:
        g = self.param_groups[self._group_of[t]]
        first = self._steps[t] == 0  # (settled: a SOAP step is read back before the next one is recorded)
        refresh = ref.needs_host(int(self._steps[t]) + 1, g["precondition_frequency"]) == "refresh"
        normalize = bool(g["normalize_gradient"]) and not first
        return (not first, ref.shampoo_beta_of(g), normalize, refresh, g["eps"] if normalize else None)

    def _encode_run(self, enc, shape, run, setting, rows, keep) -> None:
        dev, cache = self.device, self._cache
        (m, n), w = shape, self._work[shape]
        update, sb, normalize, refresh, eps = setting
        s0, B, mn = self._slot[run[0]], len(run), m * n
        kg, kp, ka = self._k("soap_gather"), self._k("soap_precond"), self._k("soap_apply")
        kl = self._k("soap_lerp")

        def gemm(a, b, c, M, N, K, offs, strides, **kw):
            linalg.gemm(dev, enc, w[a], w[b], w[c], M, N, K, offsets=offs, strides=strides, batch=B, keep=keep,
                        cache=cache, **kw)

        def lerp(dst, s, count):
            prm = linalg._prm(dev, [B * count, s0 * count, 0, linalg._bits(1 - sb)], "soap.lerp", keep, cache)
            kl.dispatch(enc, kl.cached_bind({"dst": w[dst], "src": w["tmp"], "prm": prm}), -(-B * count // 256))

        for (r, b, c, ln) in rows:
            kg.dispatch(enc, self._pbind(kg, r, b, c, w), -(-ln // 256))
        gemm("gs", "gs", "tmp", m, m, n, (s0 * mn, s0 * mn, 0), (mn, mn, m * m), tb=True)  # g g^T
        lerp("GG_0", m, m * m)
        gemm("gs", "gs", "tmp", n, n, m, (s0 * mn, s0 * mn, 0), (mn, mn, n * n), ta=True)  # g^T g
        lerp("GG_1", n, n * n)
        if refresh:  # the power iteration's products M_i = GG_i Q_i, for the host's QR after the step
            for i, s in ((0, m), (1, n)):
                o = s0 * s * s
                gemm(f"GG_{i}", f"Q_{i}", f"M_{i}", s, s, s, (o, o, o), (s * s,) * 3)
        if not update:
            return
        at, q0, q1 = s0 * mn, s0 * m * m, s0 * n * n
        for src, dst in (("gs", "ps"), ("ms", "ms")):  # Q_0^T x Q_1: the grad into ps, exp_avg in place in ms
            gemm("Q_0", src, "ts", m, n, m, (q0, at, at), (m * m, mn, mn), ta=True)
            gemm("ts", "Q_1", dst, m, n, n, (at, q1, at), (mn, n * n, mn))
        for (r, b, c, ln) in rows:
            kp.dispatch(enc, self._pbind(kp, r, b, c, w), -(-ln // 256))
        gemm("Q_0", "ms", "ts", m, n, m, (q0, at, at), (m * m, mn, mn))  # Q_0 x Q_1^T
        gemm("ts", "Q_1", "ps", m, n, n, (at, q1, at), (mn, n * n, mn), tb=True)
        if normalize:
            prm = linalg._prm(dev, [mn, at, B, linalg._bits(eps), s0], "soap.rms", keep, cache)
            k = self._k("soap_rms")
            k.dispatch(enc, k.cached_bind({"dst": w["nrm"], "src": w["ps"], "prm": prm}), B)
        for (r, b, c, ln) in rows:
            ka.dispatch(enc, self._pbind(ka, r, b, c, w), -(-ln // 256))

    def _pbind(self, k, r, b, c, w):
        key = ("soap", k.entry, r, id(w["gs"]), id(b.states.get("exp_avg")), id(b.states.get("exp_avg_sq")))
        if key not in self._binds:
            self._binds[key] = k.bind({"hyper": self._hyper, "grad": b.grad.buffers[c],
                                       "ea": b.states["exp_avg"].buffers[c], "ev": b.states["exp_avg_sq"].buffers[c],
                                       "param": b.param.buffers[c], "gs": w["gs"], "ms": w["ms"], "ps": w["ps"],
                                       "nrm": w["nrm"], "mp": self._record_range(r)})
        return self._binds[key]

    # -- the host's part: decompositions after the steps that need them -----------------------------------------
    outcome_every = 1  # (the host's work after a step needs its outcome: copied back every step)

    def _after_submit(self) -> None:
        active = np.flatnonzero(self._active)
        self._settle()  # (a checked step: was it applied? the next step's records need the settled counts too)
        if self._last_skipped:
            return
        todo = [(t, what) for t in active for what in [ref.needs_host(
            int(self._steps[t]), self.param_groups[self._group_of[t]]["precondition_frequency"])] if what]
        if not todo:
            return
        facts = self._factors({t: ("GG_0", "GG_1") if what == "init" else ("M_0", "M_1", "Q_0", "Q_1")
                               for t, what in todo})
        jobs = [(t, i, what) for t, what in todo for i in (0, 1)]

        def side(job):
            t, i, what = job
            mat = facts[t][f"GG_{i}" if what == "init" else f"M_{i}"]
            return ref.host_work(what, [mat], [facts[t].get(f"Q_{i}")])[0]
        # every side of every tensor decomposed in parallel (LAPACK releases the GIL), BLAS held to one thread in
        # each: nested BLAS threads thrash (six workers over a two-thread BLAS were 7x slower than one at a time)
        with _BLAS_LOCK:
            if not _BLAS:
                _BLAS.append(ThreadpoolController())
            with _BLAS[0].limit(limits=1, user_api="blas"), \
                    ThreadPoolExecutor(max_workers=min(len(jobs), os.cpu_count() or 1)) as ex:
                new = dict(zip([(t, i) for t, i, _ in jobs], ex.map(side, jobs)))
        per_bucket: dict = {}  # (the refreshed tensors' second moments re-ordered: one transfer each way a bucket)
        for t, what in todo:
            self._put_factors(t, {"Q_0": new[t, 0][0], "Q_1": new[t, 1][0]})
            if what == "refresh":
                b, i = self._where[t]
                per_bucket.setdefault(id(b), (b, []))[1].append((t, i))
        for b, tis in per_bucket.values():
            arena = b.states["exp_avg_sq"]
            evs = arena.read_many([i for _, i in tis])
            arena.write_many([(i, np.take(np.take(ev.reshape(self._shapes[self._names[t]]), new[t, 0][1], axis=0),
                                          new[t, 1][1], axis=1)) for (t, i), ev in zip(tis, evs)])
