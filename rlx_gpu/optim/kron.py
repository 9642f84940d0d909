"""Kron (PSGD) on the GPU: the momentum and the update in ``shaders/kron.wgsl``, the products with the triangular
factors as batched GEMMs per shape (``rlx_gpu.linalg``), the triangular solves, norm lower bounds and balancing as
``kron.wgsl`` kernels, all in the step's one compute pass; the default probes too (a caller's ``probe=`` runs on the
host)."""
from __future__ import annotations

import math

import numpy as np

from .. import linalg
from ..reference import kron as ref
from .matrix import MatrixOptimizer

F32 = np.float32


class Kron(MatrixOptimizer):
    """Kron: PSGD with Kronecker-factored upper-triangular preconditioners (Li 2018; kron-torch,
    ``pytorch_optimizer.Kron``), on 2-D tensors (update rule: :mod:`rlx_gpu.reference.kron`).

    Per step and matrix: momentum and its bias correction; on update steps (probability ``precond_update_prob``)
    A = Q_0 h Q_1^T, B = Q_0^-T V Q_1^-1 (V: the probe), and each factor moves by
    triu(precond_lr (t1 - t2)) / norm_lower_bound(t1 + t2) Q_i with (t1, t2) = (A A^T, B B^T) or (A^T A, B^T B);
    then P = Q_0^T Q_0 d Q_1^T Q_1, its RMS capped at 1.1, p += -lr P. The GEMMs are batched over each shape's
    matrices; the triangular solves (a row a workgroup), the norm lower bounds (column passes, a thread a column) and balancing
    are kernels of ``shaders/kron.wgsl``.

    Randomness (see :mod:`rlx_gpu.reference.kron`): ``probe(name, shape, step)`` supplies V (default: the
    counter-based generator of the first group's ``seed``, made on the device by ``kron_probe``; a probe of the
    caller's is called on the host before the step is recorded, even for a step the device then skips, and uploaded),
    and the update and balancing draws come from ``seed``; the twin with the same ``probe``/``seed`` draws the same
    values (the device's log and cos may differ from NumPy's in the last bits). A checked step is read
    back right after submission (the next step's draws depend on whether it was taken).

    Args:
        params: dict name -> 2-D float32 array (each side 2 to ``max_size_triangular``), torch tensors, or a list
            of param-group dicts.
        lr (1e-3).  momentum (0.9).  weight_decay (0).  weight_decouple (True).  precond_update_prob (None:
        pytorch_optimizer's schedule; a number or a callable of the step).  max_size_triangular (8192).
        momentum_into_precondition_update (True).  precond_lr (0.1).  precond_init_scale (1.0).
        balance_prob (0.01).  seed (0, a hyperparameter: saved).  probe (None, keyword only: not saved).
    State: step, momentum_buffer, Q_0, Q_1 (pytorch_optimizer's list Q).
    """
    spec = ref.Kron
    wgsl = "kron.wgsl"
    factor_states = {"Q_0": 0, "Q_1": 1}
    extra_kwargs = ("probe",)

    def __init__(self, params, *args, probe=None, **kwargs):
        ref.check_probe(type(self).__name__, probe)
        super().__init__(params, *args, **kwargs)
        #: A probe of the caller's (name, shape, step) -> array, called on the host; None: the device's generator of
        #: the first group's ``seed``. Not saved in checkpoints (pass it again after loading).
        self.probe = probe
        self._plan = None
        self._factor_buffers(("ds", "hs", "vs", "as", "bs", "ts"), ("Sa", "Sb"))
        for (m, n), w in self._work.items():
            B = len(self._groups[m, n])
            w["xv"] = self.device.buffer(8 * B * max(m, n), f"Kron.xv{(m, n)}")
            w["nl"] = self.device.buffer(12 * B, f"Kron.nl{(m, n)}")
            w["bound"], w["scale"] = self.device.buffer(4 * B, "Kron.bound"), self.device.buffer(4 * B, "Kron.scale")

    def _max_dispatches(self) -> int:
        return 3 * self._pieces_count() + 48 * len(self._names) + 8

    # -- the step --------------------------------------------------------------------------------------------
    def _begin_checks(self, grads, check: bool):
        """The draws, and a caller's probes (checked), before anything of the step is recorded: a bad probe or
        schedule changes nothing."""
        active = super()._begin_checks(grads, check)
        k = int(self._steps.max()) if len(self._steps) else 0  # (settled: see _after_submit)
        update, bal = ref.decide(self.param_groups[0], k)
        probes = {}
        if update and self.probe is not None:
            probes = {t: ref.probe_of(self.probe, self._names[t], self._shapes[self._names[t]], k + 1)
                      for t in np.flatnonzero(active)}
        bad = check and not all(np.isfinite(v).all() for v in probes.values())  # (skips the step: issue 21 item 5)
        self._plan = (k, update, bal, probes, bad)
        return active

    def _encode_clip(self, enc, scale_grads: bool, flat: bool = False, check: bool = False, norm: bool = True):
        """The engine's check, and a checked step whose caller's probe holds inf or NaN marked as failing it."""
        super()._encode_clip(enc, scale_grads, flat, check, norm)
        if check and self._plan is not None and self._plan[4]:
            k = self._k("kron_nonfinite")
            word = self.record.size * len(self._names) + self.record.global_word("nonfinite")
            prm = linalg._prm(self.device, [word], "kron.nonfinite", None, self._cache)
            k.dispatch(enc, k.cached_bind({"flag": self._hyper, "prm": prm}), 1)

    def _encode(self, enc) -> None:
        keep = []
        k, update, bal, probes, _ = self._plan
        seed = int(self.param_groups[0]["seed"])
        gm_word = self._grad_mul_word()
        words = np.zeros((self._mp.size // 4,), np.uint32)
        runs = self._runs(self._settings)
        for shape, run, (into, plr), rows in runs:
            w = self._work[shape]
            for t in run:
                g = self.param_groups[self._group_of[t]]
                self._first_step(t, g)
                if t in probes:  # (a probe of the caller's: made on the host, uploaded)
                    v = probes[t]
                    self.device.queue.write_buffer(w["vs"], 4 * self._slot[t] * v.size, np.ascontiguousarray(v))
                key = ref.probe_key(seed, k + 1, self._names[t]) if self.probe is None else 0
                step = min(int(self._steps[t]) + 1, 2 ** 31)
                wd, lr = g["weight_decay"], g["lr"] * self._scale[t]
                flags = (1 if wd and not g["weight_decouple"] else 0) | (0 if into else 2) | \
                    (4 if wd and g["weight_decouple"] else 0)
                rows += self._piece_records(words, t, self._slot[t] * shape[0] * shape[1],
                                            [flags, gm_word, self._slot[t]],
                                            [g["momentum"], 1 - g["momentum"], 1 - g["momentum"] ** step, wd, -lr],
                                            extra=lambda toff, key=key: (key, toff))
        self.device.queue.write_buffer(self._mp, 0, words)
        for shape, run, setting, rows in runs:
            self._encode_run(enc, shape, run, setting, rows, update, bal, keep)
        self._keep = keep

    def _settings(self, t) -> tuple:
        g = self.param_groups[self._group_of[t]]
        return (bool(g["momentum_into_precondition_update"]), float(g["precond_lr"]))

    def _first_step(self, t, g) -> None:
        """A tensor's first step starts its factors at sqrt(precond_init_scale) I (as the twin makes them)."""
        if self._steps[t] == 0:
            m, n = self._shapes[self._names[t]]
            s = F32(math.sqrt(g["precond_init_scale"]))
            self._put_factors(t, {"Q_0": np.eye(m, dtype=F32) * s, "Q_1": np.eye(n, dtype=F32) * s})

    def _encode_run(self, enc, shape, run, setting, rows, update, bal, keep) -> None:
        dev, cache = self.device, self._cache
        (m, n), w = shape, self._work[shape]
        into, plr = setting
        s0, B, mn = self._slot[run[0]], len(run), m * n
        at, q0, q1 = s0 * mn, s0 * m * m, s0 * n * n

        def gemm(a, b, c, M, N, K, offs, strides, **kw):
            linalg.gemm(dev, enc, w[a], w[b], w[c], M, N, K, offsets=offs, strides=strides, batch=B, keep=keep,
                        cache=cache, **kw)

        def run_k(entry, groups, words, **bufs):
            k = self._k(entry)
            prm = linalg._prm(dev, [int(x) for x in words], f"kron.{entry}", keep, cache)
            k.dispatch(enc, k.cached_bind({**{b: w[v] for b, v in bufs.items()}, "prm": prm}), groups)

        kmom, kapp, kpr = self._k("kron_momentum"), self._k("kron_apply"), self._k("kron_probe")
        for (r, b, c, ln) in rows:
            kmom.dispatch(enc, self._pbind(kmom, r, b, c, w), -(-ln // 256))
            if update and self.probe is None:
                kpr.dispatch(enc, self._pbind(kpr, r, b, c, w), -(-ln // 256))
        if bal:
            run_k("kron_balance", B, [m, n, B, q0, q1], q="Q_0", sa="Q_1")
        if update:
            h = "ds" if into else "hs"
            gemm("Q_0", h, "ts", m, n, m, (q0, at, at), (m * m, mn, mn))  # A = Q_0 h Q_1^T
            gemm("ts", "Q_1", "as", m, n, n, (at, q1, at), (mn, n * n, mn), tb=True)
            # B = Q_0^-T V Q_1^-1: W = V^T Q_0^-1 (n x m, into ts), then W^T Q_1^-1 (into bs)
            run_k("kron_trsm", B * n, [n, m, B, 1, at, q0, at, mn, m * m, mn], sx="vs", q="Q_0", sa="ts")
            run_k("kron_trsm", B * m, [m, n, B, 1, at, q1, at, mn, n * n, mn], sx="ts", q="Q_1", sa="bs")
            for side, s, qoff in (("Q_0", m, q0), ("Q_1", n, q1)):
                ss, other = s * s, mn // s
                kw = dict(tb=True) if side == "Q_0" else dict(ta=True)
                gemm("as", "as", "Sa", s, s, other, (at, at, 0), (mn, mn, ss), **kw)
                gemm("bs", "bs", "Sb", s, s, other, (at, at, 0), (mn, mn, ss), **kw)
                run_k("kron_terms", -(-B * ss // 256), [B * ss], sa="Sa", sb="Sb")
                cols = B * -(-s // 256)  # norm_lower_bound(t1 + t2) into bound, in passes
                for what in range(4):
                    run_k("kron_nl_col", cols, [s, B, s0, what], sb="Sb", xv="xv", vals="nl")
                    run_k("kron_nl_vec", B, [s, B, s0, what], xv="xv", vals="nl", q="bound")
                run_k("kron_tri", -(-B * ss // 256), [s, B * ss, linalg._bits(plr), s0], sa="Sa", vals="bound")
                gemm("Sa", side, "Sb", s, s, s, (0, qoff, 0), (ss, ss, ss))
                run_k("kron_sub", -(-B * ss // 256), [B * ss, qoff], q=side, sb="Sb")
        # P = Q_0^T Q_0 d Q_1^T Q_1 (into as), its RMS cap, the update
        gemm("Q_0", "ds", "ts", m, n, m, (q0, at, at), (m * m, mn, mn))
        gemm("Q_0", "ts", "bs", m, n, m, (q0, at, at), (m * m, mn, mn), ta=True)
        gemm("bs", "Q_1", "ts", m, n, n, (at, q1, at), (mn, n * n, mn), tb=True)
        gemm("ts", "Q_1", "as", m, n, n, (at, q1, at), (mn, n * n, mn))
        run_k("kron_rms", B, [mn, at, B, s0], sx="as", vals="scale")
        for (r, b, c, ln) in rows:
            kapp.dispatch(enc, self._pbind(kapp, r, b, c, w), -(-ln // 256))

    def _pbind(self, k, r, b, c, w):
        key = ("kron", k.entry, r, id(w["ds"]), id(b.states.get("momentum_buffer")))
        if key not in self._binds:
            self._binds[key] = k.bind({"hyper": self._hyper, "grad": b.grad.buffers[c],
                                       "buf": b.states["momentum_buffer"].buffers[c], "param": b.param.buffers[c],
                                       "ds": w["ds"], "hs": w["hs"], "ps": w["as"], "sc": w["scale"], "vs": w["vs"],
                                       "mp": self._record_range(r)})
        return self._binds[key]

    outcome_every = 1  # (the host's work after a step needs its outcome: copied back every step)

    def _after_submit(self) -> None:
        self._settle()  # (the next step's draws and first steps need the settled step counts)
