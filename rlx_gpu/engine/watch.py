"""Which group values changed since they were last checked, and their validation (again only where one changed).

A step compares every group's hyperparameters with what the last validation saw: by identity where a value cannot
change in place, else by repr (which also tells NaNs, -0.0, arrays and lists apart). A change is validated (the
changed values against their defaults' types and ranges, then the spec's checks across its group's values) and
bumps the groups' version, which tells the step's record tables (:mod:`.tables`) to start over.
"""
from __future__ import annotations

import types

from ..core.torchio import plain_hyper

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
    return changes(groups, seen, first=True) == []


def changes(groups: list, seen: list, first: bool = False):
    """The (group index, key) pairs whose values are not as :func:`watch` saw them (``first``: up to the first),
    or None where the groups are not the ones seen (another number of them)."""
    if len(groups) != len(seen) - 1:
        return None
    keys, out = seen[-1], []
    for gi, (g, snap) in enumerate(zip(groups, seen)):
        for i, k in enumerate(keys):
            x = g.get(k)
            v, r, fixed = snap[i]
            if x is v and fixed:
                continue
            if repr(x) != r:
                out.append((gi, k))
                if first:
                    return out
                continue
            snap[i] = (x, r, _fixed(x))  # (the same value in a new object: compared by identity next time)
    return out


def seen_again(groups: list, seen: list, pairs) -> None:
    """``seen`` (from :func:`watch`) updated for the values of ``pairs`` (group index, key), as watch sees them."""
    keys = seen[-1]
    for gi, k in pairs:
        x = groups[gi].get(k)
        seen[gi][keys.index(k)] = (x, repr(x), _fixed(x))


def checked_by_caller(opt, key: str) -> None:
    """Every group's ``key`` recorded as checked, as a step would check it (``set_lr`` checked its value before
    setting it): the next step does not check it again, and where a value changed the groups' version is bumped
    as :func:`validate_groups` would (the record tables start over). Nothing where the snapshot does not hold
    the groups (their number changed: the step checks them all)."""
    seen, groups = opt._validated, opt.param_groups
    if seen is None or len(seen) != len(groups) + 1 or key not in seen[-1]:
        return
    i = seen[-1].index(key)
    moved = [(gi, key) for gi, (g, snap) in enumerate(zip(groups, seen)) if repr(g.get(key)) != snap[i][1]]
    if moved:
        seen_again(groups, seen, moved)
        opt._groups_version = opt.__dict__.get("_groups_version", 0) + 1


def validate_groups(opt) -> None:
    """``opt``'s groups checked where they changed since the last check (all of them the first time or when
    their number changed); nothing changes in the snapshot if a value is bad (it raises)."""
    seen = opt._validated
    diff = None if seen is None else changes(opt.param_groups, seen)
    if diff == []:
        return
    keys, name = list(opt.spec.defaults), type(opt).__name__
    redo = [(g, keys) for g in opt.param_groups] if diff is None else [
        (opt.param_groups[gi], [k for i, k in diff if i == gi]) for gi in sorted({gi for gi, _ in diff})]
    for g, ks in redo:
        g.update(plain_hyper(name, {k: g[k] for k in ks if k in g}))  # (tensor lr: a float)
        opt.spec.validate(g, ks)
    if diff is None:
        opt._validated = watch(opt.param_groups, keys)
    else:
        seen_again(opt.param_groups, seen, diff)
    opt._groups_version = opt.__dict__.get("_groups_version", 0) + 1
