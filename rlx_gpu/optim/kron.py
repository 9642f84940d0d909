"""Kron (PSGD) on the GPU: the momentum and the update in ``shaders/kron.wgsl``, the products with the triangular
factors as batched GEMMs per shape (``rlx_gpu.linalg``: the triangles' zeros skipped block by block), the triangular
solves blocked (``rlx_gpu.linalg.factor``), the norm lower bounds and balancing as ``kron.wgsl`` kernels, all in the
step's one compute pass; the default probes too (a caller's ``probe=`` runs on the host)."""
from __future__ import annotations

import math

import numpy as np

from .. import linalg
from ..linalg.factor import BLOCK, Mat, Rec, copy2d, trsm_right
from ..linalg.half import FloatProducts, HalfProducts
from ..reference import kron as ref
from ..runtime.params import Params, declare
from .matrix import MatrixOptimizer

F32 = np.float32
#: shaders/kron.wgsl's parameters, by name: a tensor piece's record (``mp``) and a run of matrices' (``kp``: each
#: kernel reads the fields it needs).
PIECE = Params("KronPiece", "count", "chunk_off", "work_off", "flags", "gm_word", "slot", "mom:f32", "omm:f32",
               "bias:f32", "wd:f32", "neg_lr:f32", "key", "probe_off")
RUN = Params("KronRun", "s", "count", "batch", "slot0", "what", "q0_off", "q1_off", "m", "n", "off", "plr:f32",
             "word")
declare("kron.wgsl", PIECE, RUN)


def _run_words(**kw) -> np.ndarray:
    return RUN.pack(**{**dict.fromkeys(RUN.names, 0), **kw})


class Kron(MatrixOptimizer):
    """Kron: PSGD with Kronecker-factored upper-triangular preconditioners (Li 2018; kron-torch,
    ``pytorch_optimizer.Kron``), on 2-D tensors (update rule: :mod:`rlx_gpu.reference.kron`).

    Per step and matrix: momentum and its bias correction; on update steps (probability ``precond_update_prob``)
    A = Q_0 h Q_1^T, B = Q_0^-T V Q_1^-1 (V: the probe), and each factor moves by
    triu(precond_lr (t1 - t2)) / norm_lower_bound(t1 + t2) Q_i with (t1, t2) = (A A^T, B B^T) or (A^T A, B^T B);
    then P = Q_0^T Q_0 d Q_1^T Q_1, its RMS capped at 1.1, p += -lr P. The GEMMs are batched over each shape's
    matrices, those with a triangular factor in blocks that skip its zeros; the triangular solves are blocked (32
    columns solved, the rest updated by GEMM); the norm lower bounds (column passes, a thread a column) and balancing
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
        matmul_dtype ("float32" | "float16": the products' inputs in float16 with float32 sums, on the tensor-core
        GEMM where the device has subgroup matrices, else gemm16; the triangular solves stay float32).
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
        """Every piece's three kernels, and per shape the run's kernels and GEMMs (at most 8 a triangular product;
        two a 32-column block of each triangular solve)."""
        per = sum(64 + 4 * (-(-m // BLOCK) - (-n // BLOCK)) for m, n in self._groups)
        return 3 * self._pieces_count() + per + 8

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
            prm = linalg._prm(self.device, _run_words(word=word), "kron.nonfinite", None, self._cache)
            k.dispatch(enc, k.cached_bind({"flag": self._hyper, "kp": prm}), 1)

    def _encode(self, enc) -> None:
        keep = []
        k, update, bal, probes, _ = self._plan
        seed = int(self.param_groups[0]["seed"])
        gm_word = self._grad_mul_word()
        words = np.zeros((self._mp.size // 4,), np.uint32)
        runs = self._runs(self._settings)
        for shape, run, (into, _, _), rows in runs:
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
                rows += self._piece_records(words, t, PIECE, self._slot[t] * shape[0] * shape[1], flags=flags,
                                            gm_word=gm_word, slot=self._slot[t], mom=g["momentum"],
                                            omm=1 - g["momentum"], bias=1 - g["momentum"] ** step, wd=wd, neg_lr=-lr,
                                            key=key, probe_off=lambda toff: toff)
        self.device.queue.write_buffer(self._mp, 0, words)
        for shape, run, setting, rows in runs:
            self._encode_run(enc, shape, run, setting, rows, update, bal, keep)
        self._keep = keep

    def _settings(self, t) -> tuple:
        g = self.param_groups[self._group_of[t]]
        return (bool(g["momentum_into_precondition_update"]), float(g["precond_lr"]), g["matmul_dtype"] == "float16")

    def _first_step(self, t, g) -> None:
        """A tensor's first step starts its factors at sqrt(precond_init_scale) I (as the twin makes them)."""
        if self._steps[t] == 0:
            m, n = self._shapes[self._names[t]]
            s = F32(math.sqrt(g["precond_init_scale"]))
            self._put_factors(t, {"Q_0": np.eye(m, dtype=F32) * s, "Q_1": np.eye(n, dtype=F32) * s})

    def _encode_run(self, enc, shape, run, setting, rows, update, bal, keep) -> None:
        dev, cache = self.device, self._cache
        (m, n), w = shape, self._work[shape]
        into, plr, half = setting
        s0, B, mn = self._slot[run[0]], len(run), m * n
        r = Rec(dev, enc, B, keep, cache)

        def mat(k, rows_, cols):  # buffer k's run of (rows_, cols) matrices (from the run's first slot)
            return Mat(w[k], s0 * rows_ * cols, rows_ * cols, cols)

        def run_k(entry, groups, **bufs):
            k = self._k(entry)
            prm = linalg._prm(dev, _run_words(**bufs.pop("words")), f"kron.{entry}", keep, cache)
            k.dispatch(enc, k.cached_bind({**{b: w[v] for b, v in bufs.items()}, "kp": prm}), groups)

        q0, q1 = mat("Q_0", m, m), mat("Q_1", n, n)
        pr = self._products(r, shape, s0) if half else FloatProducts(r)
        kmom, kapp, kpr = self._k("kron_momentum"), self._k("kron_apply"), self._k("kron_probe")
        for (rr, b, c, ln) in rows:
            kmom.dispatch(enc, self._pbind(kmom, rr, b, c, w), -(-ln // 256))
            if update and self.probe is None:
                kpr.dispatch(enc, self._pbind(kpr, rr, b, c, w), -(-ln // 256))
        if bal:
            run_k("kron_balance", B, words=dict(m=m, n=n, batch=B, q0_off=q0.off, q1_off=q1.off), q="Q_0", sa="Q_1")
        if update:
            self._update_factors(r, pr, mat, run_k, shape, s0, B, into, plr)
        # P = Q_0^T Q_0 d Q_1^T Q_1 (into as), its RMS cap, the update
        pr.half("q0", q0, m, m)
        pr.half("q1", q1, n, n)
        pr.half("d", mat("ds", m, n), m, n)
        pr.mm("q0", "d", mat("ts", m, n), m, n, m, tri="a_upper")
        pr.half("t", mat("ts", m, n), m, n)
        pr.mm("q0", "t", mat("bs", m, n), m, n, m, ta=True, tri="a_lower")
        pr.half("t", mat("bs", m, n), m, n)
        pr.mm("t", "q1", mat("ts", m, n), m, n, n, tb=True, tri="b_lower")
        pr.half("t", mat("ts", m, n), m, n)
        pr.mm("t", "q1", mat("as", m, n), m, n, n, tri="b_upper")
        run_k("kron_rms", B, words=dict(count=mn, off=s0 * mn, batch=B, slot0=s0), sx="as", vals="scale")
        for (rr, b, c, ln) in rows:
            kapp.dispatch(enc, self._pbind(kapp, rr, b, c, w), -(-ln // 256))

    def _update_factors(self, r, pr, mat, run_k, shape, s0, B, into, plr) -> None:
        """An update step's factor moves for a run of B matrices of ``shape`` (from slot ``s0``): A and B, then per
        side the terms, their norm lower bound and ``Q_i -= triu(...) Q_i``."""
        (m, n), w = shape, self._work[shape]
        mn = m * n
        q0, q1 = mat("Q_0", m, m), mat("Q_1", n, n)
        pr.half("q0", q0, m, m)
        pr.half("q1", q1, n, n)
        pr.half("h", mat("ds" if into else "hs", m, n), m, n)
        pr.mm("q0", "h", mat("ts", m, n), m, n, m, tri="a_upper")  # A = Q_0 h Q_1^T
        pr.half("t", mat("ts", m, n), m, n)
        pr.mm("t", "q1", mat("as", m, n), m, n, n, tb=True, tri="b_lower")
        # B = Q_0^-T V Q_1^-1 (float32): W = V^T Q_0^-1 (n x m, in ts), then B = W^T Q_1^-1 (in bs); panels in Sa
        copy2d(r, mat("ts", n, m), mat("vs", m, n), n, m, transpose=True)
        trsm_right(r, mat("ts", n, m), q0, n, m, w["Sa"])
        copy2d(r, mat("bs", m, n), mat("ts", n, m), m, n, transpose=True)
        trsm_right(r, mat("bs", m, n), q1, m, n, w["Sa"])
        pr.half("a", mat("as", m, n), m, n)
        pr.half("b", mat("bs", m, n), m, n)
        for side, sz in (("Q_0", m), ("Q_1", n)):
            ss, other = sz * sz, mn // sz
            sa, sb = Mat(w["Sa"], 0, ss, sz), Mat(w["Sb"], 0, ss, sz)
            kw = dict(tb=True) if side == "Q_0" else dict(ta=True)
            pr.mm("a", "a", sa, sz, sz, other, **kw)  # A A^T and B B^T (side 0), A^T A and B^T B (side 1)
            pr.mm("b", "b", sb, sz, sz, other, **kw)
            run_k("kron_terms", -(-B * ss // 256), words=dict(count=B * ss), sa="Sa", sb="Sb")
            cols = B * -(-sz // 256)  # norm_lower_bound(t1 + t2) into bound, in passes
            for what in range(4):
                nl = dict(s=sz, batch=B, slot0=s0, what=what)
                run_k("kron_nl_col", cols, words=nl, sb="Sb", xv="xv", vals="nl")
                run_k("kron_nl_vec", B, words=nl, xv="xv", vals="nl", q="bound")
            run_k("kron_tri", -(-B * ss // 256), words=dict(s=sz, count=B * ss, plr=plr, slot0=s0), sa="Sa",
                  vals="bound")
            pr.half("T", sa, sz, sz)
            pr.mm("T", "q0" if side == "Q_0" else "q1", sb, sz, sz, sz, tri="both_upper")  # T Q (its triangle)
            run_k("kron_sub", -(-B * ss // 256), words=dict(count=B * ss, off=s0 * ss, s=sz), q=side, sb="Sb")

    def _products(self, r, shape, s0) -> HalfProducts:
        """The float16 products of a run (matmul_dtype="float16"): float16 copies by name in the shape's buffers."""
        m, n = shape
        big = max(m, n) ** 2
        h16 = self._halves(shape, dict(q0=m * m, q1=n * n, h=m * n, t=m * n, a=m * n, b=m * n, d=m * n, T=big,
                                       scratch=max(big, m * n)), 8)
        return HalfProducts(r, self._mm_path, h16, h16["scales"], s0)

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
