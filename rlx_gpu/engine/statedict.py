"""State dicts of the GPU optimizers: torch's layout (``{"state": {name: {"step", <state buffers>}}, "param_groups":
[...]}``) with NumPy arrays in each buffer's dtype, moved both ways between a GPU class and its NumPy twin.

With master weights, a tensor's state holds ``master_param`` (its float32 copy). ``load_state_dict`` checks
everything before it changes anything; a state of another dtype is refused unless ``cast=True``.
"""
from __future__ import annotations

import numpy as np

from ..core import quant
from ..core.groups import MASTER, check_load_params, check_state_dict, reconcile_master
from ..core.lowp import F32
from ..core.sync import locked



class StateMixin:
    """``state_dict`` and ``load_state_dict`` of the GPU optimizers."""

    def _state_dtype(self, state: str, name: str) -> np.dtype:
        """The NumPy dtype state buffer ``state`` of tensor ``name`` is kept in."""
        if state in self.arena_states:
            return self._where[self._index[name]][0].sig.state.np
        return np.dtype(np.float32)  # master copies, per-tensor scalars, factored moments

    def _qbits_of(self, name: str) -> int:
        """0, 8 or 4: the bits of tensor ``name``'s quantized states (``state_bits``)."""
        return self._where[self._index[name]][0].sig.qbits if name in self._index else 0

    def _state_names(self) -> tuple:
        return tuple(self.spec.all_state_names) + ((MASTER,) if self._master.any() else ())

    @locked
    def state_dict(self, dequantize: bool = False) -> dict:
        """``{"state": {name: {"step", <state buffers>}}, "param_groups": [...]}`` with NumPy arrays (each state
        buffer in its own dtype; ``master_param`` with master weights). A quantized state ``s`` (``state_bits``) is
        ``s_codes``, ``s_absmax`` and ``s_qmap``, or with ``dequantize`` a float32 ``s``."""
        self._settle()
        host = {}
        for b in self.buckets:
            for s, a in b.states.items():
                host[(id(b), s)] = a.read_all()
            if b.master is not None:
                host[(id(b), MASTER)] = b.master.read_all()
        state = {}
        for t, n in enumerate(self._names):
            if self._steps[t] == 0 and not self._materialized[t]:
                continue
            b, i = self._where[t]
            st = {"step": int(self._steps[t])}
            for s in self.spec.all_state_names:
                if s in self._materialized[t] and s in b.quantizable:
                    codes, absmax = b.states[s].gather(host[(id(b), s)], i)
                    bits, signed = b.sig.qbits, self.spec.quantizable[s]
                    codes = codes.reshape(self._shapes[n])
                    st.update({s: quant.dequantize(codes, absmax, bits, signed)} if dequantize
                              else quant.entries(s, codes, absmax, bits, signed))
                elif s in self._materialized[t] and s in self.arena_states:
                    st[s] = b.layout.gather(host[(id(b), s)], i, self._shapes[n], b.sig.state.np)
                elif s in self._materialized[t] and s in self._scalars:
                    st[s] = np.array(self._scalars[s][t], np.float32)
            if b.master is not None:
                st[MASTER] = b.layout.gather(host[(id(b), MASTER)], i, self._shapes[n], np.float32)
            state[n] = st
        groups = [dict({k: v for k, v in g.items() if k != "params"}, params=list(g["params"]))
                  for g in self.param_groups]
        return {"state": state, "param_groups": groups}

    @locked
    def load_state_dict(self, sd: dict, cast: bool = False, params: dict | None = None) -> None:
        """Restore a state dict (from this class or its NumPy twin); checked fully before anything changes.

        ``cast``: convert state buffers (and ``params``) of another float dtype instead of refusing them.
        ``params``: parameters to write in the same checked step (what ``restore`` passes)."""
        state, hypers, qstate, params = self._check_load(sd, cast, params)
        for st in list(state.values()) + list(qstate.values()):
            for s in st:
                if s in self.arena_states:
                    self._ensure(s)
        groups = [dict(g, **h) for g, h in zip(self.param_groups, hypers)]
        if params is not None:
            self._write_params({self._index[n]: a for n, a in params.items()}, init_master=True)
        for b in self.buckets:
            arenas = dict(b.states)
            if b.master is not None:
                arenas[MASTER] = b.master
            for s, arena in arenas.items():
                if s in b.quantizable:
                    arena.write_many(self._qtriples(b, s, qstate))
                else:
                    self._upload_state(b, s, arena, state, groups, keep_master=params is None)
        for g, h in zip(self.param_groups, hypers):
            g.update(h)
        self._norm_taken = False
        for t, n in enumerate(self._names):
            st = state.get(n)
            g = self.param_groups[self._group_of[t]]
            for s, v in self._scalars.items():
                v[t] = st[s] if st is not None and s in st else self.spec.init_value(s, g)
            if st is None:
                self._steps[t] = 0
                self._materialized[t] = frozenset(self.spec.eager_state)
            else:
                self._steps[t] = st["step"]
                self._materialized[t] = frozenset(k for k in st if k not in ("step", MASTER)) | set(qstate.get(n, ()))

    @locked
    def _check_load(self, sd: dict, cast: bool = False, params: dict | None = None) -> tuple:
        """Everything ``load_state_dict`` checks, nothing changed: (state, hyperparameters, quantized state,
        params) as it loads them (``rlx_gpu.Partition`` checks every part before it loads any)."""
        name = type(self).__name__
        self._settle()
        sd, qstate = quant.split_state(name, sd, self.spec.quantizable, self._qbits_of, self._shapes,
                                       lambda s, n: self._state_dtype(s, n) if n in self._index else np.float32)
        sd = reconcile_master(name, sd, lambda n: n in self._index and bool(self._master[self._index[n]]), cast)
        state, hypers = check_state_dict(name, sd, self.param_groups, self._shapes, self._state_names(),
                                         self.defaults, self.spec.state_shape_of, self._state_dtype, cast)
        for h in hypers:
            self.spec.check(h)
        qstate = quant.join_state(state, qstate, self.spec.quantizable, self._qbits_of)
        if params is not None:
            params = check_load_params(name, params, self._shapes,
                                       {n: self._dtypes[self._index[n]] for n in self._names}, cast)
            self.spec.check_param_values(name, params)
        return state, hypers, qstate, params

    def _qtriples(self, b, s, qstate) -> list:
        """(local index, codes, absmax) of every tensor of bucket ``b`` for quantized state ``s``: the state dict's,
        else a zero state."""
        out = []
        for t, i in b.local.items():
            got = qstate.get(self._names[t], {}).get(s)
            n = b.layout.sizes[i]
            out.append((i, *(got if got is not None else (np.zeros(n, np.uint8),
                                                           np.zeros(quant.num_blocks(n, b.sig.qbits), np.float32)))))
        return out

    def _upload_state(self, b, s, arena, state, groups, keep_master: bool) -> None:
        """One state arena of one bucket assembled on the host from ``state`` and uploaded in one transfer.
        Master copies a state dict does not hold stay as they are (or as the params just written set them)."""
        if s == MASTER:
            mine = [(i, state[self._names[t]][MASTER]) for t, i in b.local.items()
                    if self._names[t] in state and MASTER in state[self._names[t]]]
            if mine:
                arena.write_many(mine)
            return
        chunks = [np.zeros(c, arena.dtype.np) for c in b.layout.chunk_elems]
        for t, i in b.local.items():
            st = state.get(self._names[t])
            if st is not None and s in st:
                v = st[s]
            elif s in self.spec.eager_state and st is None:
                v = np.full(self._shapes[self._names[t]], self.spec.init_value(s, groups[self._group_of[t]]),
                            np.float32).astype(arena.dtype.np)
            else:
                continue
            b.layout.scatter(chunks, i, v)
        arena.write_all(chunks)


assert F32.itemsize == 4
