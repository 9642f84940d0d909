"""SOAP on the GPU: the projections into and out of the eigenbasis and Shampoo's GG products as batched GEMMs per
shape (``rlx_gpu.linalg``), Adam's moments and the update in ``shaders/soap.wgsl``, and the eigenbases (a tensor's
first step: eigendecompositions; every ``precondition_frequency``-th step: a power iteration and QR) on the device
by default, all in the step's one compute pass (``soap_basis.py``; ``decompositions="host"``: float64 on the host,
right after the step)."""
from __future__ import annotations

import numpy as np

from .. import linalg
from ..core.groups import MAX_STEP
from ..linalg.factor import Mat, Rec, _mm
from ..reference import soap as ref
from . import soap_basis as basis
from .matrix import MatrixOptimizer
from .soap_products import SoapFloat, SoapHalf

F32 = np.float32


class SOAP(MatrixOptimizer):
    """SOAP (Vyas et al. 2024): Adam in the eigenbasis of Shampoo's two Kronecker factors, as
    ``pytorch_optimizer.SOAP`` on 2-D tensors (update rule: :mod:`rlx_gpu.reference.soap`).

    Per step and matrix (m, n), on the GPU: GG_0 += (1 - shampoo_beta)(g g^T - GG_0), GG_1 likewise with g^T g;
    the grad and exp_avg projected (Q_0^T x Q_1), the second moment kept in the rotated space, the update projected
    back (Q_0 x Q_1^T): eight float32 GEMMs, batched over the matrices of each shape. A tensor's first step ends
    with the eigenbases of its GG_i (no update is made at that step, as in pytorch_optimizer); every
    ``precondition_frequency``-th step after it ends with one power iteration (M_i = GG_i Q_i) and QR per side, the
    second moment's axes re-ordered by the eigenvalue estimates diag(Q_i^T M_i). ``decompositions="device"`` (the
    default) makes them on the GPU in float32 in the same submission (:mod:`rlx_gpu.optim.soap_basis`: the first
    step's from the grad's SVD by Householder QR and one-sided Jacobi, the refresh's by blocked Householder QR), so
    no step waits for the host; ``"host"`` makes them in float64 NumPy right after the step (the twin's way: the
    GG_i or M_i downloaded, every side decomposed in parallel, uploaded), for reference. A checked step
    (``skip_nonfinite``, GradScaler) is read back right after it is submitted (the next step's kinds depend on it).

    Args:
        params: dict name -> 2-D float32 array, torch tensors, or a list of param-group dicts (other shapes:
            ValueError; route them to AdamW with :class:`rlx_gpu.Partition`).
        lr (3e-3).  betas ((0.95, 0.95)).  shampoo_beta (None: betas[1]).  weight_decay (1e-2, decoupled, by
        lr).  precondition_frequency (10).  correct_bias (True).  normalize_gradient (False).  eps (1e-8).
        decompositions ("device" | "host").  matmul_dtype ("float32" | "float16": the projections' and GG
        products' inputs in float16 with float32 sums, on the tensor-core GEMM where the device has subgroup
        matrices, else gemm16; the power iteration and the decompositions stay float32).
    State (pytorch_optimizer's names): step, exp_avg, exp_avg_sq, GG_0, GG_1, Q_0, Q_1 (its lists GG and Q).
    """
    spec = ref.SOAP
    wgsl = "soap.wgsl"
    factor_states = {"GG_0": 0, "Q_0": 0, "GG_1": 1, "Q_1": 1}

    def __init__(self, params, *args, **kwargs):
        super().__init__(params, *args, **kwargs)
        self._factor_buffers(("gs", "ms", "ts", "ps"), ("tmp",))
        dev = self.device
        for (m, n), w in self._work.items():
            B = len(self._groups[m, n])
            w["nrm"] = dev.buffer(4 * B, f"SOAP.nrm{(m, n)}")
            w["M_0"], w["M_1"] = (dev.buffer(4 * B * s * s, f"SOAP.M{(m, n)}") for s in (m, n))
            basis.device_buffers(dev, w, B, m, n, f"SOAP{(m, n)}")
        self._gg_loaded = np.zeros(len(self._names), bool)  # (GG non-zero before a first step: host decomposition)

    def _max_dispatches(self) -> int:
        per = sum(20 + basis.device_dispatches(m, n) for m, n in self._groups)
        return 5 * self._pieces_count() + per * len(self._names) + 8

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
                rows += self._piece_records(words, t, basis.PIECE, self._slot[t] * shape[0] * shape[1],
                                            flags=int(update) | 2 * int(setting[2]), gm_word=gm_word,
                                            slot=self._slot[t], omb1=1 - g["betas"][0], omb2=1 - g["betas"][1],
                                            eps=g["eps"], neg_step=-ss, decay=1 - lr * g["weight_decay"],
                                            toff=lambda toff: toff, rows=shape[0], cols=shape[1])
        self.device.queue.write_buffer(self._mp, 0, words)
        for shape, run, setting, rows in jobs:
            self._encode_run(enc, shape, run, setting, rows, keep)
        self._keep = keep

    def _settings(self, t) -> tuple:
        g = self.param_groups[self._group_of[t]]
        first = self._steps[t] == 0  # (settled: a SOAP step is read back before the next one is recorded)
        refresh = ref.needs_host(int(self._steps[t]) + 1, g["precondition_frequency"]) == "refresh"
        normalize = bool(g["normalize_gradient"]) and not first
        on_device = g["decompositions"] == "device" and not (first and self._gg_loaded[t])
        return (not first, ref.shampoo_beta_of(g), normalize, refresh, g["eps"] if normalize else None, on_device,
                g["matmul_dtype"] == "float16")

    def _encode_run(self, enc, shape, run, setting, rows, keep) -> None:
        dev, cache = self.device, self._cache
        (m, n), w = shape, self._work[shape]
        update, sb, normalize, refresh, eps, on_device, half = setting
        s0, B, mn = self._slot[run[0]], len(run), m * n
        r = Rec(dev, enc, B, keep, cache)
        x = {k: Mat(w[k], s0 * a * b, a * b, b)
             for k, (a, b) in dict(gs=(m, n), ms=(m, n), ts=(m, n), ps=(m, n), Q_0=(m, m), Q_1=(n, n)).items()}
        self._piece_pass(enc, self._k("soap_gather"), rows, w)
        prod = SoapHalf(self, r, shape, s0, x) if half else SoapFloat(r, x)  # (float16: g converted here)
        for i, s in ((0, m), (1, n)):  # tmp = g g^T (g^T g), lerped into GG_0 (GG_1)
            prod.gram(i, Mat(w["tmp"], 0, s * s, s), m, n)
            self._run_k(r, "soap_lerp", -(-B * s * s // 256), dict(count=B * s * s, dst_off=s0 * s * s, w=1 - sb),
                        dst=w[f"GG_{i}"], src=w["tmp"])
        if refresh:  # the power iteration's products M_i = GG_i Q_i (float32), for the QR after the update
            for i, s in ((0, m), (1, n)):
                q = x[f"Q_{i}"]
                _mm(r, q._replace(buf=w[f"GG_{i}"]), q, q._replace(buf=w[f"M_{i}"]), s, s, s, alpha=1.0, beta=0.0)
        if update:
            prod.project_in(m, n)     # ps = Q_0^T g Q_1, ms = Q_0^T exp_avg Q_1
            self._piece_pass(enc, self._k("soap_precond"), rows, w)
            prod.project_out(m, n)    # ps = Q_0 ms Q_1^T
            if normalize:
                self._run_k(r, "soap_rms", B, dict(count=mn, src_off=s0 * mn, batch=B, eps=eps, slot0=s0),
                            dst=w["nrm"], src=w["ps"])
            self._piece_pass(enc, self._k("soap_apply"), rows, w)
        if on_device:
            if not update:
                basis.device_init(r, w, s0, m, n)
            elif refresh:
                basis.device_refresh(r, w, s0, m, n)
                self._piece_pass(enc, self._k("soap_ev_out"), rows, w)
                self._piece_pass(enc, self._k("soap_ev_in"), rows, w)

    def _run_k(self, r, entry, groups, words, **bufs) -> None:
        k = self._k(entry)
        prm = linalg._prm(self.device, basis.RUN.pack(**{**dict.fromkeys(basis.RUN.names, 0), **words}),
                          f"soap.{entry}", r.keep, r.cache)
        k.dispatch(r.enc, k.cached_bind({**bufs, "rp": prm}), groups)

    def _piece_pass(self, enc, k, rows, w) -> None:
        for (r, b, c, ln) in rows:
            k.dispatch(enc, self._pbind(k, r, b, c, w), -(-ln // 256))

    def _pbind(self, k, r, b, c, w):
        key = ("soap", k.entry, r, id(w["gs"]), id(b.states.get("exp_avg")), id(b.states.get("exp_avg_sq")))
        if key not in self._binds:
            self._binds[key] = k.bind({"hyper": self._hyper, "grad": b.grad.buffers[c],
                                       "ea": b.states["exp_avg"].buffers[c], "ev": b.states["exp_avg_sq"].buffers[c],
                                       "param": b.param.buffers[c], "gs": w["gs"], "ms": w["ms"], "ps": w["ps"],
                                       "nrm": w["nrm"], "mp": self._record_range(r), "ts": w["ts"], "o0": w["o0"],
                                       "o1": w["o1"]})
        return self._binds[key]

    # -- the host's part: decompositions after the steps that need them -----------------------------------------
    outcome_every = 1  # (the host's work after a step needs its outcome: copied back every step)

    def _after_submit(self) -> None:
        active = np.flatnonzero(self._active)
        self._settle()  # (a checked step: was it applied? the next step's records need the settled counts too)
        if self._last_skipped:
            return
        todo = []
        for t in active:
            g = self.param_groups[self._group_of[t]]
            what = ref.needs_host(int(self._steps[t]), g["precondition_frequency"])
            if what and (g["decompositions"] == "host" or (what == "init" and self._gg_loaded[t])):
                todo.append((t, what))
            if what == "init":
                self._gg_loaded[t] = False
        if todo:
            basis.host_work(self, todo)

    def load_state_dict(self, sd: dict, cast: bool = False, params: dict | None = None) -> None:
        with self.lock:
            super().load_state_dict(sd, cast, params)
            for t, n in enumerate(self._names):  # (the device's first bases come from the grad: GG must start at 0)
                st = sd["state"].get(n, {})
                self._gg_loaded[t] = int(st.get("step", 0)) == 0 and any(
                    np.any(np.asarray(st[k]) != 0) for k in ("GG_0", "GG_1") if k in st)
