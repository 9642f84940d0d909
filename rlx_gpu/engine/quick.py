"""The steady state of a step from the device grad slots, with few Python calls: the step's dispatches as a cached
program (pipeline, bind group, grid), its records a row of the record table already made.

``step()`` with no arguments takes this path when nothing else is needed: every tensor active, no loss scale, no
torch tensors, the host state as the record table expects (or, unchecked, changed hyperparameters: validated and
their table made here, PERF_NOTES.md 68), and an optimizer whose step is the engine's own (no
``_encode``/``_begin_checks``/``_after_submit`` of its own). It makes the same native calls in the same order as
the general path (:mod:`.steps`), which it leaves to every other step: the first steps, a checked step after a
change, a checked run whose record table runs out of rows. PERF_NOTES.md 49.
"""
from __future__ import annotations

from ..runtime.kernels import grid
from .gating import ARGS_BYTE, LOG, Outcome
from .watch import unchanged


class QuickMixin:
    """``_quick_step``: the steady state of ``step()``; False (nothing done) where the general path is needed."""

    def _quick_step(self, check: bool) -> bool:
        at = self._quick_at(check)
        if at is None:
            return False
        clip = self.clip_grad_norm is not None
        prog = self._binds.get(("quick", check, clip))
        if prog is None:
            prog = self._binds[("quick", check, clip)] = self._quick_program(check, clip)
        if check and self._gate_args != prog[1]:  # (the pristine indirect arguments are another step's)
            return False
        tb = self._rtable
        slot = self._replay(prog[0], None if check else tb.words[at], at if check else None)
        self._active, self._norm_taken, self._grad_mul = self._all_active, clip, 1.0
        tb.served += 1
        if check:
            self._run.outcomes.append(Outcome(self, None, at))
            self._mapped(slot)
        else:
            self._steps, self._materialized, self._last_skipped = tb.steps[at + 1].copy(), list(tb.mat1), False
            self._scalars = {k: v.copy() for k, v in tb.scalars[at + 1].items()}
            self._rrow = at + 1
        return True

    def _quick_at(self, check: bool):
        """Where the next step stands when it may take the quick path: the table row of the live state (unchecked),
        or the device's step index (checked); None otherwise (a copy of outcomes that is due is read first). An
        unchecked step after a hyperparameter change (a scheduler's lr) takes it too: the groups are validated as
        the general path does (a bad value raises before anything changes; ``set_lr`` checked its own) and its
        table made first."""
        tb, run = self._rtable, self._run
        if tb is None:
            return None
        changed = not unchanged(self.param_groups, self._validated)
        if changed or tb.key[0] != self._groups_version:  # (a change seen here, or one set_lr checked)
            if check or run is not None:
                return None
            if changed:
                self._validate_groups()
            self._grad_mul = 1.0  # (the table's global record: as the general path sets it first)
            tb, _ = self._plain_row(self._quick_key(), self._all_active)
        if tb.key != self._quick_key():
            return None
        if not check:
            r = self._rrow
            return r if run is None and tb.holds(r, self._steps, self._scalars, self._materialized) else None
        if run is not None and run.reads and self._j + run.u - run.reads[0].j >= self.outcome_every:
            self._settle_old()
            run = self._run
        if run is None or tb is not self._on_device or run.row + run.u >= tb.rows or \
                run.u >= LOG - self.outcome_every or run.key[1] is not self._needs.get((tb.key[0], None)):
            return None
        return self._j + run.u

    def _quick_key(self) -> tuple:
        """The record-table key of a step from the device grad slots (every tensor active, no loss scale, the
        grads' multiplier 1)."""
        return self._table_key(self._all_active, False, 1.0)

    def _replay(self, dispatches, words, j):
        """One submission of ``dispatches`` (the records ``words`` written first, unless None); a checked step
        ``j`` copies its outcomes when due (the slot, or None)."""
        d = self.device
        if words is not None:
            d.queue.write_buffer(self._hyper, 0, words)
        enc = d.device.create_command_encoder()
        p = enc.begin_compute_pass()
        for pipe, bind, x, y, off in dispatches:
            p.set_pipeline(pipe)
            p.set_bind_group(0, bind)
            if off is None:
                p.dispatch_workgroups(x, y, 1)
            else:
                p.dispatch_workgroups_indirect(self._gate, off)
        p.end()
        slot = self._outcome_copy(enc, j) if j is not None else None
        try:
            d.queue.submit([enc.finish()])
        except Exception as e:
            d._failed(e)
            raise RuntimeError(f"rlx_gpu: {type(self).__name__} step ({self.shader}) failed on {d.name}: {e}") from e
        return slot

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

