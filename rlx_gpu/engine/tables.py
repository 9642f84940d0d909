"""The host side of a step, typed: the host state and tables of record sets for the next steps of a run.

A *run* is a sequence of steps with the same tensors active, the same state buffers needed and (for optimizers
with scalar states) the same hyperparameters. After ``a`` of its steps were applied (a checked step may be skipped),
the host state depends on ``a`` alone: the step counts are the base's plus ``a`` on the active tensors (saturating
at MAX_STEP), every state buffer the run needs exists once a step was applied, and scalar states (NAdam's
mu_product) have advanced ``a`` times. So a :class:`RecordTable` holds the hyper buffer's words of many steps at
once, computed in one vectorised ``fill`` over a (rows x tensors) grid: row ``a`` is the step taken after ``a``
applied ones. An unchecked step writes its row; a checked step's row is picked on the device by its count of
applied steps (``shaders/gate.wgsl``), so recording a step never needs the outcome of an earlier one.
"""
from __future__ import annotations

import types
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..core.groups import MAX_STEP, scaled
from ..core.lowp import step_keys

ROWS = 32                 # rows of a table (fewer when the hyperparameters change every step, or for many tensors)
MAX_TABLE_BYTES = 4 << 20
NONE = frozenset()


_FIXED = (float, int, str, bytes, type(None), complex, types.FunctionType, types.BuiltinFunctionType)


def _fixed(v) -> bool:
    """Whether a value cannot change in place (then the same object is the same value)."""
    return isinstance(v, _FIXED) or (type(v) is tuple and all(_fixed(x) for x in v))


def watch(groups: list, keys: list) -> list:
    """What :func:`unchanged` compares a group's hyperparameters with: per group and key (object, repr, fixed)."""
    return [[(g.get(k), repr(g.get(k)), _fixed(g.get(k))) for k in keys] for g in groups] + [keys]


def unchanged(groups: list, seen: list) -> bool:
    """Whether every group's hyperparameters are as :func:`watch` saw them: the same object where it cannot change
    in place, else the same repr (which also tells NaNs, -0.0, arrays and lists apart, as a full check would)."""
    if len(groups) != len(seen) - 1:
        return False
    keys = seen[-1]
    for g, snap in zip(groups, seen):
        for i, k in enumerate(keys):
            x = g.get(k)
            v, r, fixed = snap[i]
            if x is v and fixed:
                continue
            if repr(x) != r:
                return False
            snap[i] = (x, r, _fixed(x))  # (the same value in a new object: compared by identity next time)
    return True


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
        if a >= self.rows or steps.shape != self.base.steps.shape or not (steps == self.steps[a]).all():
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
        self._grad_mul = 1.0
        self._all_active = np.ones(len(self._names), bool)  # (the active set of a step from the grad slots; never
        self._all_active.flags.writeable = False            #  written)

    def _live(self) -> HostState:
        return HostState(self._steps, self._scalars, self._materialized, self._last_skipped)

    def _set_live(self, s: HostState) -> None:
        self._steps, self._scalars, self._materialized, self._last_skipped = s

    def _table_key(self, active, device_scale: bool) -> tuple:
        act = None if active.all() else active.tobytes()
        return (self._groups_version, self._scale_version, self.clip_grad_norm, self._grad_mul, device_scale,
                self.precision["rounding_seed"], act)

    def _need(self, key: tuple, active) -> tuple:
        """Per tensor, the state buffers a step of this key needs (none for a tensor without a grad)."""
        k = (key[0], key[-1])
        if k not in self._needs:
            if len(self._needs) > 16:
                self._needs.clear()
            per = [frozenset(self.spec.state_names(g)) for g in self.param_groups]
            self._needs[k] = tuple(per[gi] if a else NONE for gi, a in zip(self._group_of.tolist(), active.tolist()))
        return self._needs[k]

    def _new_table(self, key: tuple, active, rows: int) -> RecordTable:
        """A table from the live host state (which must be exact: every earlier outcome known)."""
        base = HostState(self._steps.copy(), {k: v.copy() for k, v in self._scalars.items()},
                         list(self._materialized), self._last_skipped)
        need = self._need(key, active)
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
        per group over the R x n grid (fill is elementwise over its tensors)."""
        R, n = steps.shape
        rec = self.record
        cols, flags = {}, np.zeros((R, n), np.uint32)
        t_all = np.maximum(steps, 1).astype(np.float64)
        for g, sel in zip(self.param_groups, self._group_members):
            m = len(sel)
            if not m:
                continue
            rs = np.tile(sel, R) if R > 1 else sel
            fr = [fresh0[t] for t in sel] + [NONE] * (m * (R - 1))
            c, f = self.fill(scaled(g, self._scale[rs], self.spec.lr_keys), t_all[:, sel].reshape(-1), fr, rs)
            for k, v in c.items():
                v = np.asarray(v)
                if m == n:  # (one group holds every tensor: its columns as they are)
                    cols[k] = v
                else:
                    cols.setdefault(k, np.zeros((R, n)))[:, sel] = v.reshape(R, m) if v.ndim else v
            flags[:, sel] = rec.flags(R * m, dict(f, maximize=bool(g.get("maximize", False)))).reshape(R, m)
        key = tuple(mat)
        if key not in self._has_bits:
            if len(self._has_bits) > 64:
                self._has_bits.clear()
            self._has_bits[key] = rec.flags(n, {f"has_{s}": [s in m for m in mat] for s in self.arena_states})
        flags |= self._static_bits | self._has_bits[key] | (active.astype(np.uint32) * np.uint32(rec.bit["active"]))
        words = {"first_block": np.tile(self._first_block, R), "num_blocks": np.tile(self._num_blocks, R)}
        if self._sr.any():
            words["rkey"] = step_keys(self.precision["rounding_seed"], steps, self._name_hash).reshape(-1)
        recs = rec.pack(R * n, {k: v.reshape(-1) if v.ndim else v for k, v in cols.items()}, flags.reshape(-1), words)
        glob = rec.pack_global(grad_mul=self._grad_mul, inv_scale=1.0, norm_p=2.0,  # (a device loss scale sets both)
                               max_norm=self.clip_grad_norm if self.clip_grad_norm is not None else 0.0,
                               device_scale=1 if device_scale else 0)
        out = np.empty((R, (n + 1) * rec.size), np.uint32)
        out[:, :n * rec.size] = recs.reshape(R, -1)
        out[:, n * rec.size:] = glob
        return out

    def _plain_row(self, key: tuple, active) -> tuple[RecordTable, int]:
        """The table and row of the next step from the live host state (a new table when the key changed, the
        rows ran out, or something else changed the host state since: a state dict, a sparse step, ...)."""
        tb = self._rtable
        if tb is not None and tb.key == key and tb.holds(self._rrow, self._steps, self._scalars, self._materialized):
            return tb, self._rrow
        rows = ROWS if tb is None or tb.key == key or tb.served > 1 else 1  # (hyperparameters changing every step)
        self._rtable, self._rrow = self._new_table(key, active, rows), 0
        return self._rtable, 0
