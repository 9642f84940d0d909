"""One row of records without the table machinery: the step after a hyperparameter change (a scheduler's lr).

A run whose hyperparameters change before every step gets one-row tables (:mod:`.tables`), and all of a row's cost
is fixed: the general ``_records_rows`` makes ~40 NumPy calls for it. Most of that row does not change from one such
step to the next: the per-tensor words (flags of the tensor's buffers, its blocks) and the global record depend on
which tensors are active, which state buffers they have, the clip, the grads' multiplier and the lr scales, not on
the group values. So a *template* of those words is kept, and a row is the template with each group's one record
OR-ed over its tensors: ``pack`` writes only fill's fields and the flags word, the template only the other words,
so the OR is the general path's assembly, word for word (``tests/test_record_classes.py``).

It applies where every group's tensors form one ``by_step`` class (the same lr scale, step count and no fresh
state buffer: every step of a run but its first), with no scalar states (NAdam's mu_product advances in fill) and
fill writing only the optimizer's own fields; anything else takes the general path.
"""
from __future__ import annotations

import numpy as np

from ..core.groups import scaled
from ..core.lowp import step_keys

TEMPLATES = 8  # templates kept per optimizer (active sets x state-buffer sets x clip settings)


def one_row(opt, active, steps, fresh0, mat, device_scale) -> np.ndarray | None:
    """``(1, words)`` for the step with step counts ``steps`` (a (1, n) array), as ``opt._records_rows`` gives them,
    or None where this path does not apply."""
    if opt._scalars or not getattr(type(opt).fill, "by_step", False) or any(fresh0):
        return None
    tmpl = _template(opt, active, mat, device_scale)
    if tmpl is None:
        return None
    words, fields, members, sr = tmpl
    out = words.copy()
    rec = opt.record
    recs = out[:len(opt._names) * rec.size].reshape(-1, rec.size)
    row = steps[0]
    for g, (rep, sel) in zip(opt.param_groups, members):
        if rep is None:
            continue
        r = row[sel]
        t = r[0]
        if not (r == t).all():
            return None
        c, f = opt.fill(scaled(g, opt._scale[rep], opt.spec.lr_keys), np.array([max(t, 1)], np.float64),
                        [fresh0[rep[0]]], rep)
        if not fields.issuperset(c):
            return None
        named = dict(f, maximize=bool(g.get("maximize", False)))
        one = rec.pack_one(c, named)  # (the words pack gives, with fewer NumPy calls)
        recs[sel] |= one if one is not None else rec.pack(1, c, rec.flags(1, named), {})[0]
    if sr:
        recs[:, rec.tensor.offset["rkey"]] = step_keys(opt.precision["rounding_seed"], steps, opt._name_hash)[0]
    return out[None]


def _template(opt, active, mat, device_scale):
    """(the row's words without any group's record, the optimizer's field names, per group its first tensor and its
    tensors, whether any tensor rounds stochastically), or None where a group's tensors have lr scales that differ
    (more than one class)."""
    key = (active.tobytes(), tuple(mat), bool(device_scale), repr(opt._grad_mul), repr(opt.clip_grad_norm),
           opt._scale.tobytes(), id(opt._group_members))  # (repr: -0.0 is not 0.0)
    cache = opt.__dict__.setdefault("_row_templates", {})
    if key in cache:
        return cache[key]
    tmpl = None
    bits = opt._scale.view(np.int64)  # (as _fill_classes compares them: -0.0 is not 0.0)
    if all((bits[sel] == bits[sel[0]]).all() for sel in opt._group_members if len(sel)):
        rec, w = opt.record, opt.record.tensor.offset
        n = len(opt._names)
        words = np.zeros((n + 1) * rec.size, np.uint32)
        recs = words[:n * rec.size].reshape(n, rec.size)
        recs[:, w["flags"]] = opt._tensor_bits(active, mat)
        recs[:, w["first_block"]], recs[:, w["num_blocks"]] = opt._first_block, opt._num_blocks
        words[n * rec.size:] = opt._global_words(device_scale)
        members = [(sel[:1], slice(sel[0], sel[-1] + 1) if sel[-1] - sel[0] + 1 == len(sel) else sel) if len(sel)
                   else (None, None) for sel in opt._group_members]  # (a view where a group's tensors are a run)
        tmpl = (words, frozenset(rec.fields), members, bool(opt._sr.any()))
    if len(cache) >= TEMPLATES:
        cache.clear()
    cache[key] = tmpl
    return tmpl
