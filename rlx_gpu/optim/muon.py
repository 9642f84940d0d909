"""Muon on the GPU: ``shaders/muon.wgsl`` for the momentum and the update (``shaders/muon16.wgsl``: the update from
Newton-Schulz's float16 result), and Newton-Schulz on the matrices of each shape batched in one set of GEMM
dispatches (``rlx_gpu.linalg``), all in the step's one compute pass."""
from __future__ import annotations

import numpy as np

from .. import linalg
from ..linalg import tcns
from ..reference import muon as ref
from ..runtime.kernels import shipped_kernel
from ..runtime.params import Params, declare
from .matrix import REC_BYTES, MatrixOptimizer

#: shaders/muon.wgsl's record of a tensor piece (``mp``), by name.
PIECE = Params("MuonPiece", "count", "chunk_off", "work_off", "nesterov", "gm_word", "omm:f32", "mom:f32",
               "decay:f32", "neg_lr:f32", "w_off", "w_scale:f32")
declare("muon.wgsl", PIECE)
declare("muon16.wgsl", PIECE)


class Muon(MatrixOptimizer):
    """Muon (Jordan et al. 2024): torch.optim.Muon's semantics and defaults, Newton-Schulz in float32.

        b = lerp(b, g, 1 - momentum);  u = lerp(g, b, momentum) if nesterov else b;  u = NS(u)
        p *= 1 - lr * weight_decay;  p -= adjusted_lr * u

    Newton-Schulz (``rlx_gpu.linalg.newton_schulz_orth``): X = u / max(|u|_F, eps) (transposed when rows > cols),
    then ``ns_steps`` times A = X X^T, B = b A + c A A, X = a X + B X. torch runs it in bfloat16 on tensor cores;
    here float32 GEMMs (the matrices of one shape batched in one set of dispatches), or with
    ``ns_dtype="float16"`` float16 operands: on the tensor cores where the device has subgroup matrices (Dawn;
    f32 sums; every shape in one set of dispatches per step: ``rlx_gpu.linalg.ns_tc``), else gemm16 (packed f16
    products, partial sums added in float32; adapters with shader-f16). ``ns_path`` says which. 2-D float32
    tensors only (others: ValueError; route them to AdamW).

    Args:
        params: dict name -> 2-D float32 array, torch tensors, or a list of param-group dicts.
        lr (1e-3).  weight_decay (0.1, decoupled).  momentum (0.95).  nesterov (True).
        ns_coefficients ((3.4445, -4.775, 2.0315)).  eps (1e-7).  ns_steps (5).
        adjust_lr_fn (None = "original": lr * sqrt(max(1, rows / cols)); "match_rms_adamw": lr * 0.2 *
        sqrt(max(rows, cols))).  ns_dtype ("float32" | "float16").
    State (torch's names): step, momentum_buffer.
    """
    spec = ref.Muon
    wgsl = "muon.wgsl"

    def __init__(self, params, *args, **kwargs):
        super().__init__(params, *args, **kwargs)  # (the float32 and 2-D checks, the shape groups: .matrix)
        self._scratch = {s: self.device.buffer(4 * len(ts) * s[0] * s[1], f"Muon.scratch{s}")
                         for s, ts in self._groups.items()}
        self._check_f16()

    def _begin_checks(self, grads, check: bool):
        self._check_f16()  # (a group may have switched to float16 since: refused before anything is recorded)
        return super()._begin_checks(grads, check)

    def _check_f16(self) -> None:
        if any(g["ns_dtype"] == "float16" for g in self.param_groups):
            linalg.f16_device(self.device, "Muon(ns_dtype='float16')")

    def _max_dispatches(self) -> int:
        """Every tensor piece's two kernels and, at worst, a Newton-Schulz of its own with the most steps allowed
        (the checked step's indirect-argument buffer is sized once: groups may change ns_steps later)."""
        return 2 * self._pieces_count() + len(self._names) * linalg.ns_dispatches(99) + 8

    #: A profiler's hook (``benchmarks/muon_phases.py``): ``phase_mark(pass, name)`` is called where each phase of a
    #: step begins ("momentum", Newton-Schulz's on the tensor cores: ``linalg.ns_tc``, "update"); None: no marks.
    phase_mark = None
    #: Newton-Schulz's kernel per stage on the tensor cores ({"A" | "B" | "X": a ``TcConfig``}) where not
    #: ``rlx_gpu.linalg.tcns.SM_BASES``' (an experiment's switch, e.g. B on K steps of 32); None: those.
    ns_bases = None
    #: Whether a step keeps the last step's piece records (not packed nor written again) while nothing they are made
    #: of changed: the groups' hyperparameters, the lr scales, the tensors with a grad. False: rebuilt and written
    #: every step, as before (a benchmark's switch; the results are the same).
    reuse_records = True
    #: Whether the update of a matrix that float16 Newton-Schulz on the tensor cores does not transpose reads its
    #: float16 result itself (``shaders/muon16.wgsl``: the same values, without ns_out's float32 copy; with
    #: :attr:`vec4`); False: through ns_out and the scratch, as before (a benchmark's switch).
    fuse_out = True
    #: Whether the momentum and the update of pieces whose sizes and offsets allow it, and Newton-Schulz's conversions
    #: of matrices it does not transpose (``linalg.ns_tc``'s ``vec4``), run by vec4s, 4 elements a thread: the same
    #: values (False: one element a thread, the conversions through 32 x 32 tiles, as before: a benchmark's switch).
    vec4 = True
    _jobs_kept: tuple = (None, None)

    def _encode(self, enc) -> None:
        """Momentum into the shape's scratch, Newton-Schulz batched per shape (and per group's settings), update."""
        keep, mark = [], self.phase_mark or (lambda enc, name: None)
        self._ensure("momentum_buffer")
        jobs = self._jobs()
        mark(enc, "momentum")
        self._elementwise(enc, jobs, "muon_momentum")
        self._newton_schulz(enc, jobs, keep, mark)
        mark(enc, "update")
        self._elementwise(enc, jobs, "muon_apply")
        self._keep = keep  # (the parameter buffers of this step's GEMMs, until the next step)

    def _elementwise(self, enc, jobs, entry) -> None:
        """Kernel ``entry`` on every piece (its vec4 form on the pieces that allow it: :meth:`_jobs`; the update of a
        fused piece from Newton-Schulz's float16 result: :meth:`_fuse`)."""
        k, k4 = self._k(entry), self._k(entry + "4")
        k16 = shipped_kernel(self.device, "muon16.wgsl", "muon_apply16") if entry == "muon_apply" else None
        for shape, _, _, steps, coeffs, eps, _, rows in jobs:
            for (r, b, c, ln, v, fused) in rows:
                if fused and k16 is not None:
                    w = self._wout[steps, coeffs, eps]
                    key = ("muon16", r, id(w), id(b.param.buffers[c]))
                    bg = self._binds.get(key) or self._binds.setdefault(key, k16.bind(
                        {"param4": b.param.buffers[c], "wh4": w, "mp": self._record_range(r)}))
                    k16.dispatch(enc, bg, -(-ln // 1024))
                    continue
                kk = k4 if v else k
                kk.dispatch(enc, self._mbind(kk, r, b, c, self._scratch[shape]), -(-ln // (1024 if v else 256)))

    def _ns_job(self, job) -> "linalg.Job":
        """The tensor-core Newton-Schulz job of one of :meth:`_jobs`' jobs."""
        (m, n), base, count = job[:3]
        return linalg.Job(self._scratch[m, n], base * m * n, count, m, n, len(self._groups[m, n]))

    def _fuse(self, jobs, words) -> list:
        """The jobs with each piece marked whether its update reads Newton-Schulz's float16 result (:attr:`fuse_out`:
        float16 jobs on the tensor cores that are not transposed, every piece by vec4s), those records given the
        result's offset (``w_off``, ``tcns._layout``'s) and scale (sqrt(n), ns_out's)."""
        tc = self.fuse_out and self.vec4 and self.ns_path != "tiled"
        by: dict = {}
        for j in jobs if tc else ():
            if j[6] == "float16":
                by.setdefault(j[3:6], []).append(j)
        at = {}
        for js in by.values():
            at.update({id(j): lay[0] for j, lay in zip(js, tcns._layout([self._ns_job(j) for j in js])[0])})
        w_off, w_scale, work = (PIECE.offset(f) // 4 for f in ("w_off", "w_scale", "work_off"))
        out = []
        for j in jobs:
            (m, n), base, rows = j[0], j[1], j[7]
            fused = id(j) in at and m <= n and all(row[4] for row in rows)
            for row in rows if fused else ():
                w = row[0] * REC_BYTES // 4
                words[w + w_off] = at[id(j)] + int(words[w + work]) - base * m * n
                words[w + w_scale] = np.float32(np.sqrt(n)).view(np.uint32)
            out.append((*j[:7], [(*row, fused) for row in rows]))
        return out

    def _jobs(self) -> list:
        """The step's jobs per shape and Newton-Schulz setting (shape, first slot, count, steps, coefficients, eps,
        dtype, the pieces' rows), their records written to the records' buffer (kept from the last step, neither
        packed nor written again, while :attr:`reuse_records` and nothing they are made of changed)."""
        gm_word = self._grad_mul_word()
        key = (gm_word, self.vec4, self.fuse_out, self.ns_path, self._active.tobytes(), self._scale.tobytes(),
               tuple(repr([g.get(k) for k in self.spec.defaults]) for g in self.param_groups))
        if self.reuse_records and self._jobs_kept[0] == key:
            return self._jobs_kept[1]
        words = np.zeros((self._mp.size // 4,), np.uint32)
        jobs = []
        for shape, ts in self._groups.items():
            by_setting: dict = {}
            for t in (t for t in ts if self._active[t]):
                g = self.param_groups[self._group_of[t]]
                by_setting.setdefault((g["ns_steps"], tuple(g["ns_coefficients"]), g["eps"], g["ns_dtype"]),
                                      []).append(t)
            base = 0
            for (steps, coeffs, eps, dt), members in by_setting.items():
                rows = []
                for slot, t in enumerate(members):
                    g = self.param_groups[self._group_of[t]]
                    lr = g["lr"] * self._scale[t]
                    adj = ref.adjusted_lr(lr, g["adjust_lr_fn"], shape)
                    at = (base + slot) * shape[0] * shape[1]
                    got = self._piece_records(words, t, PIECE, at, nesterov=int(g["nesterov"]), gm_word=gm_word,
                                              omm=1 - g["momentum"], mom=g["momentum"],
                                              decay=1 - lr * g["weight_decay"], neg_lr=-adj, w_off=0, w_scale=1.0)
                    b, i = self._where[t]
                    rows += [(*row, self.vec4 and (at + toff) % 4 == 0 and ln % 4 == 0 and shape[0] * shape[1] % 4 == 0)
                             for row, (_, _, ln, toff) in zip(got, b.layout.pieces[i])]
                jobs.append((shape, base, len(members), steps, coeffs, eps, dt, rows))
                base += len(members)
        jobs = self._fuse(jobs, words)
        self.device.queue.write_buffer(self._mp, 0, words)
        self._jobs_kept = (key, jobs)
        return jobs

    @property
    def ns_path(self) -> str:
        """The GEMM that float16 Newton-Schulz runs on for this device (``rlx_gpu.linalg.gemm_path``:
        "subgroup-matrix", "emulated" or "tiled"); float32 Newton-Schulz always runs "tiled"."""
        return linalg.gemm_path("float16", self.device)

    def _newton_schulz(self, enc, jobs, keep, mark=None) -> None:
        """float32 jobs one by one on the tiled GEMMs; float16 ones on the tensor-core GEMM all shapes together, one
        set of dispatches per setting (or one by one on gemm16 where the device has no tensor-core path)."""
        dev, grouped, self._wout = self.device, {}, {}
        path = self.ns_path if any(j[6] == "float16" for j in jobs) else "tiled"
        for job in jobs:
            shape, base, count, steps, coeffs, eps, dt, rows = job
            m, n = shape
            if dt == "float16" and path != "tiled":
                grouped.setdefault((steps, coeffs, eps), []).append((self._ns_job(job), rows[0][5]))
                continue
            linalg.ns_encode(dev, enc, self._scratch[shape], base * m * n, count, m, n, steps, coeffs, eps, keep,
                             self._cache, capacity=len(self._groups[shape]), f16=dt == "float16")
        for (steps, coeffs, eps), js in grouped.items():
            self._wout[steps, coeffs, eps] = linalg.ns_tc(
                dev, enc, [j for j, _ in js], steps, coeffs, eps, keep, path, self._cache, bases=self.ns_bases,
                mark=mark, vec4=self.vec4, no_out=[j for j, fused in js if fused])

    def _mbind(self, k, r, b, c, scratch):
        key = ("muon", k.entry, r, id(scratch), id(b.states.get("momentum_buffer")))
        if key not in self._binds:
            bufs = {"grad": b.grad.buffers[c], "buf": b.states["momentum_buffer"].buffers[c],
                    "param": b.param.buffers[c], "scratch": scratch}
            self._binds[key] = k.bind({"hyper": self._hyper, **bufs, **{n + "4": v for n, v in bufs.items()},
                                       "mp": self._record_range(r)})
        return self._binds[key]
