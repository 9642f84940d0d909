"""The steady state of a step from the device grad slots, with few Python calls: the step's dispatches as a cached
program (pipeline, bind group, grid), its records a row of the record table already made.

``step()`` with no arguments takes this path when nothing else is needed: every tensor active, no loss scale, no
torch tensors, the hyperparameters and host state as the record table expects, and an optimizer whose step is the
engine's own (no ``_encode``/``_begin_checks``/``_after_submit`` of its own). It makes the same native calls in
the same order as the general path (:mod:`.steps`), which it leaves to every other step: the first steps, a
changed hyperparameter, a checked run whose record table runs out of rows. PERF_NOTES.md 47.
"""
from __future__ import annotations

from ..runtime.kernels import grid
from .gating import ARGS_BYTE, LOG, Outcome
from .tables import unchanged


class QuickMixin:
    """``_quick_step``: the steady state of ``step()``; False (nothing done) where the general path is needed."""

    def _quick_step(self, check: bool) -> bool:
        tb, clip = self._rtable, self.clip_grad_norm
        if tb is None or not unchanged(self.param_groups, self._validated):
            return False
        if tb.key != (self._groups_version, self._scale_version, clip, 1.0, False, self.precision["rounding_seed"],
                      None):
            return False
        run = self._run
        if check:
            if run is not None and run.reads and self._j + run.u - run.reads[0].j >= self.outcome_every:
                self._settle_old()  # (a copy of outcomes that is due)
                run = self._run
            if run is None or tb is not self._on_device or run.row + run.u >= tb.rows or \
                    run.u >= LOG - self.outcome_every or run.key[1] is not self._needs.get((tb.key[0], None)):
                return False
            j = self._j + run.u
        else:
            r = self._rrow
            if run is not None or not tb.holds(r, self._steps, self._scalars, self._materialized):
                return False
        prog = self._binds.get(("quick", check, clip is not None))
        if prog is None:
            prog = self._binds[("quick", check, clip is not None)] = self._quick_program(check, clip is not None)
        if check and self._gate_args != prog[1]:
            return False
        d = self.device
        if not check:
            d.queue.write_buffer(self._hyper, 0, tb.words[r])
        enc = d.device.create_command_encoder()
        p = enc.begin_compute_pass()
        gate = self._gate if check else None
        for pipe, bind, x, y, off in prog[0]:
            p.set_pipeline(pipe)
            p.set_bind_group(0, bind)
            if off is None:
                p.dispatch_workgroups(x, y, 1)
            else:
                p.dispatch_workgroups_indirect(gate, off)
        p.end()
        slot = self._outcome_copy(enc, j) if check else None
        try:
            d.queue.submit([enc.finish()])
        except Exception as e:
            d._failed(e)
            raise RuntimeError(f"rlx_gpu: {type(self).__name__} step ({self.shader}) failed on {d.name}: {e}") from e
        self._active, self._norm_taken, self._grad_mul = self._all_active, clip is not None, 1.0
        tb.served += 1
        if check:
            run.outcomes.append(Outcome(self, None, j))
            self._mapped(slot)
        else:
            self._steps, self._materialized, self._last_skipped = tb.steps[r + 1].copy(), list(tb.mat1), False
            self._scalars = {k: v.copy() for k, v in tb.scalars[r + 1].items()}
            self._rrow = r + 1
        return True

    def _quick_program(self, check: bool, clip: bool) -> tuple:
        """(dispatches (pipeline, bind group, x, y, indirect offset or None), the indirect arguments) of the step
        from the device grad slots, in the general path's order."""
        out = []
        if check:
            k, binds = self._gate_kernels(), self._gate_binds(None)
            out.append((k["choose"].pipeline, binds["choose"], -(-self._hyper.size // 1024), 1, None))
        if check or clip:
            per, (tk, tb) = self._clip_binds(check, clip, True)
            out += [(kk.pipeline, b, *grid(n, self.device.max_workgroups), None) for kk, b, n in per if n > 0]
            out.append((tk.pipeline, tb, 1, 1, None))
        if check:
            out.append((k["gate_step"].pipeline, binds["gate_step"], 1, 1, None))
        plan = self._binds.get("plan") or self._binds.setdefault("plan", self._plan())
        args = []
        for pipe, bind, x, y in plan:
            out.append((pipe, bind, x, y, ARGS_BYTE + 4 * len(args) if check else None))
            args += [x, y, 1] if check else []
        return out, args

