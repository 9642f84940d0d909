"""The host side of a step, typed: the host state and tables of record sets for the next steps of a run.

A *run* is a sequence of steps with the same tensors active, the same state buffers needed and (for optimizers
with scalar states) the same hyperparameters. After ``a`` of its steps were applied (a checked step may be skipped),
the host state depends on ``a`` alone: the step counts are the base's plus ``a`` on the active tensors (saturating
at MAX_STEP), every state buffer the run needs exists once a step was applied, and scalar states (NAdam's
mu_product) have advanced ``a`` times. So a :class:`RecordTable` holds the hyper buffer's words of many steps at
once, computed in one vectorised ``fill`` over a (rows x tensors) grid: row ``a`` is the step taken after ``a``
applied ones. An unchecked step writes its row; a checked step's row is picked on the device by its count of
applied steps (``shaders/gate.wgsl``), so recording a step never needs the outcome of an earlier one.

A table costs little per row: a ``by_step`` fill runs once per class of alike tensors (same group, lr scale, step
counts, fresh state), and every row is the first row with only the words that vary between rows written over it
(Adam's bias corrections). The tables of a steady run grow (each twice the last, up to MAX_ROWS), so the general
step that makes one, and a checked run's upload of it, are shared by more steps. PERF_NOTES.md 61.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..core.groups import MAX_STEP, scaled
from ..core.lowp import step_keys
from .onerow import one_row

ROWS = 32                 # rows of a table (fewer when the hyperparameters change every step, or for many tensors)
MAX_ROWS = 512            # rows of the tables of a steady run (each twice its predecessor's, from ROWS)
MAX_TABLE_BYTES = 4 << 20
NONE = frozenset()


def by_step(fill):
    """Marks an optimizer's ``fill`` whose results for a tensor depend only on its group, its lr scale, its step
    count and its fresh state buffers (not on which tensor it is): a table's ``fill`` then runs once per class of
    tensors alike in those, its results spread to every tensor of the class (bit for bit: fill is elementwise).
    A subclass that overrides ``fill`` marks its own."""
    fill.by_step = True
    return fill


class HostState(NamedTuple):
    """What the host keeps per tensor between steps."""
    steps: np.ndarray       # step counts (int64)
    scalars: dict           # scalar state name -> float32 per tensor (NAdam's mu_product)
    materialized: list      # the state buffers each tensor has (frozensets of names)
    last_skipped: bool      # whether the last step was skipped on its inf/NaN check


@dataclass
class RecordTable:
    """Record sets for ``rows`` consecutive steps of a run from ``base``: ``words[a]`` is the hyper buffer of the step
    taken after ``a`` applied ones, ``steps[a]``/``scalars[a]`` the host state after ``a`` applied steps."""
    key: tuple              # what the records depend on besides the host state (_table_key)
    base: HostState
    active: np.ndarray
    need: tuple             # per tensor, the state buffers the run's steps need
    mat1: list              # per tensor, the state buffers once a step of the run was applied
    steps: np.ndarray       # (rows + 1, n)
    scalars: list           # rows + 1 dicts
    words: np.ndarray       # (rows, (n + 1) * REC) uint32
    served: int = 0         # steps recorded with it (the next table's size follows it)

    @property
    def rows(self) -> int:
        return len(self.words)

    def materialized(self, a: int) -> list:
        return self.base.materialized if a == 0 else self.mat1

    def state(self, a: int, last_skipped: bool) -> HostState:
        """The host state after ``a`` applied steps (fresh copies)."""
        return HostState(self.steps[a].copy(), {k: v.copy() for k, v in self.scalars[a].items()},
                         list(self.materialized(a)), last_skipped)

    def holds(self, a: int, steps, scalars: dict, materialized: list) -> bool:
        """Whether a host state is this table's state after ``a`` applied steps (so row ``a`` is its next step)."""
        if a >= self.rows:
            return False
        row = self.steps[a]  # (int64 both: equal bytes are equal counts, and the compare is 5x cheaper)
        if steps.dtype != row.dtype or steps.shape != row.shape or steps.tobytes() != row.tobytes():
            return False
        return materialized == self.materialized(a) and all(np.array_equal(v, self.scalars[a][k])
                                                            for k, v in scalars.items())


class TableMixin:
    """Records of the GPU optimizers: the hyper buffer's words from ``fill``, for one step or a table of them."""

    def _init_tables(self) -> None:
        self._rtable: RecordTable | None = None
        self._rrow = 0            # the live host state is row _row's base (when the table holds it)
        self._scale_version = 0   # bumped by set_lr_scale
        self._needs: dict = {}
        self._globals: dict = {}  # (_global_words)
        self._one_row = True      # (rows of one step by .onerow's template where it applies)
        self._grad_mul = 1.0
        self._all_active = np.ones(len(self._names), bool)  # (the active set of a step from the grad slots; never
        self._all_active.flags.writeable = False            #  written)

    def _live(self) -> HostState:
        return HostState(self._steps, self._scalars, self._materialized, self._last_skipped)

    def _set_live(self, s: HostState) -> None:
        self._steps, self._scalars, self._materialized, self._last_skipped = s

    def _table_key(self, active, device_scale: bool, grad_mul: float | None = None) -> tuple:
        """What a table's records depend on besides the host state (``grad_mul``: the grads' multiplier of the
        step, default the one set for it)."""
        act = None if active is self._all_active or active.all() else active.tobytes()
        return (self._groups_version, self._scale_version, self.clip_grad_norm,
                self._grad_mul if grad_mul is None else grad_mul, device_scale, self.precision["rounding_seed"], act)

    def _need(self, key: tuple, active) -> tuple:
        """Per tensor, the state buffers a step of this key needs (none for a tensor without a grad)."""
        k = (key[0], key[-1])
        if k not in self._needs:
            if len(self._needs) > 16:  # (the versions' entries go; the buffer sets' stay, the same objects: a run's
                old = self._needs      #  next table after a changed lr finds its need is the last table's)
                self._needs = {c: v for c, v in old.items() if type(c[0]) is tuple} if len(old) < 64 else {}
            per = tuple(frozenset(self.spec.state_names(g)) for g in self.param_groups)
            same = self._needs.get((per, key[-1]))  # (the same buffers under other hyperparameters: an lr changed)
            if same is None:
                same = self._needs[per, key[-1]] = tuple(per[gi] if a else NONE for gi, a in
                                                         zip(self._group_of.tolist(), active.tolist()))
            self._needs[k] = same
        return self._needs[k]

    def _new_table(self, key: tuple, active, rows: int) -> RecordTable:
        """A table from the live host state (which must be exact: every earlier outcome known)."""
        base = HostState(self._steps.copy(), {k: v.copy() for k, v in self._scalars.items()},
                         list(self._materialized), self._last_skipped)
        need, tb = self._need(key, active), self._rtable
        if tb is not None and need is tb.need and base.materialized == tb.mat1:  # (a run's next table: its buffers
            fresh0, mat1 = [NONE] * len(need), tb.mat1                          #  exist, none is fresh)
        else:
            for s in sorted(set().union(*set(need))):
                self._ensure(s)
            fresh0 = [NONE if nd <= m else nd - m for nd, m in zip(need, base.materialized)]
            mat1 = [m if nd <= m else m | nd for nd, m in zip(need, base.materialized)]
        width = 4 * self.record.size * (len(self._names) + 1)
        rows = max(1, min(rows, MAX_TABLE_BYTES // width))
        steps = np.minimum(base.steps[None, :] + np.arange(rows + 1)[:, None] * active, MAX_STEP)
        device_scale = key[4]
        if not self._scalars:
            words = self._records_rows(active, steps[1:], fresh0, mat1, device_scale)
            scalars = [{}] * (rows + 1)
        else:  # scalar states advance in fill: one row after the other
            sc, scalars, words = base.scalars, [base.scalars], []
            for a in range(rows):
                self._pending = {k: v.copy() for k, v in sc.items()}
                words.append(self._records_rows(active, steps[a + 1][None], fresh0 if a == 0 else [NONE] * len(need),
                                                mat1, device_scale)[0])
                sc = {k: np.where(active, self._pending[k], v) for k, v in sc.items()}
                scalars.append(sc)
            words = np.stack(words)
        return RecordTable(key, base, active.copy(), need, mat1, steps, scalars, words)

    def _records(self, active, steps, fresh, mat, device_scale=False) -> np.ndarray:
        """The hyper buffer's words for one step: n tensor records, then the global record."""
        return self._records_rows(active, np.asarray(steps)[None], fresh, mat, device_scale)[0]

    def _records_rows(self, active, steps, fresh0, mat, device_scale=False) -> np.ndarray:
        """(R, words) for R steps at once: row r with step counts ``steps[r]`` (an (R, n) array), the fresh state
        buffers ``fresh0`` in row 0 (none after), ``mat`` the state buffers each tensor has in them. One ``fill``
        per group over the R x n grid (fill is elementwise over its tensors; a ``by_step`` fill over its classes of
        alike tensors), packed per group; every row is the first row's records with the words that vary between
        rows (the step-dependent ones: a bias correction, a fresh state's flag) written over them."""
        R, n = steps.shape
        if R == 1 and self._one_row:
            words = one_row(self, active, steps, fresh0, mat, device_scale)
            if words is not None:
                return words
        rec, w = self.record, self.record.tensor.offset
        t_all = np.maximum(steps, 1).astype(np.float64)
        parts = [(sel, *self._group_records(g, sel, steps, t_all, fresh0))
                 for g, sel in zip(self.param_groups, self._group_members) if len(sel)]
        vary = np.zeros(rec.size, bool)
        base = np.empty((n, rec.size), np.uint32)
        for sel, small, inv in parts:
            if R > 1:
                vary |= (small != small[:1]).any(axis=(0, 1))
            base[sel] = small[0, inv]
        bits = self._tensor_bits(active, mat)
        base[:, w["flags"]] |= bits
        base[:, w["first_block"]], base[:, w["num_blocks"]] = self._first_block, self._num_blocks
        out = np.empty((R, (n + 1) * rec.size), np.uint32)
        recs = out[:, :n * rec.size].reshape(R, n, rec.size)
        recs[:] = base
        for c in np.flatnonzero(vary).tolist():
            for sel, small, inv in parts:
                recs[:, sel, c] = small[:, inv, c] | bits[sel] if c == w["flags"] else small[:, inv, c]
        if self._sr.any():
            recs[:, :, w["rkey"]] = step_keys(self.precision["rounding_seed"], steps, self._name_hash)
        out[:, n * rec.size:] = self._global_words(device_scale)
        return out

    def _global_words(self, device_scale) -> np.ndarray:
        """The global record of a table's rows (cached: it depends on the grads' multiplier, the clip and whether a
        device loss scale sets the multiplier and the inverse scale)."""
        key = (repr(self._grad_mul), repr(self.clip_grad_norm), bool(device_scale))  # (repr: -0.0 is not 0.0)
        words = self._globals.get(key)
        if words is None:
            if len(self._globals) > 16:
                self._globals.clear()
            words = self._globals[key] = self.record.pack_global(
                grad_mul=self._grad_mul, inv_scale=1.0, norm_p=2.0, device_scale=1 if device_scale else 0,
                max_norm=self.clip_grad_norm if self.clip_grad_norm is not None else 0.0)
        return words

    def _tensor_bits(self, active, mat) -> np.ndarray:
        """The flags every row of a table sets per tensor: master, sr, active and one per state buffer it has."""
        key = tuple(mat)
        if key not in self._has_bits:
            if len(self._has_bits) > 64:
                self._has_bits.clear()
            self._has_bits[key] = self.record.flags(len(mat), {f"has_{s}": [s in m for m in mat]
                                                               for s in self.arena_states})
        return self._static_bits | self._has_bits[key] | (active.astype(np.uint32) *
                                                          np.uint32(self.record.bit["active"]))

    def _group_records(self, g, sel, steps, t_all, fresh0) -> tuple:
        """(R, k, REC) records from fill of group ``g``'s tensors ``sel`` (k = len(sel)) or of its k classes,
        without the per-tensor words; and ``inv``, which maps each tensor of ``sel`` to its record."""
        R = len(steps)
        reps, inv = self._fill_classes(sel, steps, fresh0)
        inv = np.arange(len(sel)) if inv is None else inv
        k = len(reps)
        rs = np.tile(reps, R) if R > 1 else reps
        fr = [fresh0[t] for t in reps] + [NONE] * (k * (R - 1))
        c, f = self.fill(scaled(g, self._scale[rs], self.spec.lr_keys), t_all[:, reps].reshape(-1), fr, rs)
        flags = self.record.flags(R * k, dict(f, maximize=bool(g.get("maximize", False))))
        return self.record.pack(R * k, c, flags, {}).reshape(R, k, -1), inv

    @staticmethod
    def _rows_after(tb, key: tuple, rows: int) -> int:
        """Rows of the next table of a run after ``tb``: ``rows``, twice ``tb``'s (up to MAX_ROWS) when the run used
        most of ``tb`` (a steady run: a table's cost, much of it fixed, is shared by more steps), one when the key
        changed after a table served at most one step (hyperparameters that change every step)."""
        if tb is None:
            return rows
        if tb.key != key:
            return rows if tb.served > 1 else 1
        return max(rows, min(2 * tb.rows, MAX_ROWS)) if 2 * tb.served >= tb.rows else rows

    def _fill_classes(self, sel, steps, fresh0) -> tuple:
        """A ``by_step`` fill's classes among a group's tensors ``sel``: the tensors with the same lr scale (bit
        for bit), step counts in every row and fresh state buffers get the same records from fill, so fill runs on
        one of each (``reps``) and ``inv`` maps each tensor of ``sel`` to its class (None: every tensor its own)."""
        if len(sel) < 2 or not getattr(type(self).fill, "by_step", False):
            return sel, None
        if fresh0.count(NONE) == len(fresh0):
            codes = np.zeros((len(sel), 1), np.int64)
        else:
            ids: dict = {}
            codes = np.array([[ids.setdefault(fresh0[t], len(ids))] for t in sel.tolist()], np.int64)
        keys = np.concatenate([self._scale[sel].view(np.int64)[:, None], codes, steps[:, sel].T], axis=1)
        if (keys == keys[0]).all():
            return sel[:1], np.zeros(len(sel), np.intp)
        _, first, inv = np.unique(keys, axis=0, return_index=True, return_inverse=True)
        return (sel, None) if len(first) == len(sel) else (sel[first], inv.reshape(-1))

    def _plain_row(self, key: tuple, active) -> tuple[RecordTable, int]:
        """The table and row of the next step from the live host state (a new table when the key changed, the
        rows ran out, or something else changed the host state since: a state dict, a sparse step, ...)."""
        tb = self._rtable
        if tb is not None and tb.key == key and tb.holds(self._rrow, self._steps, self._scalars, self._materialized):
            return tb, self._rrow
        rows = self._rows_after(tb, key, ROWS)
        self._rtable, self._rrow = self._new_table(key, active, rows), 0
        return self._rtable, 0
