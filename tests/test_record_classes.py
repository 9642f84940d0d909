"""The host path's caches (rlx_gpu/engine/tables.py): a ``by_step`` fill run once per class of alike tensors gives
the records of the full fill, word for word; the tables of a steady run grow; and whatever changes between steps of
the quick path (lr, weight decay, betas, clip value, lr scales, skip_nonfinite, a loaded state dict) is honoured:
bit for bit the run that takes the general path every step, and the twin (tests/cases.py's tolerance)."""
import numpy as np
import pytest

import rlx_gpu
from cases import CASES, case_id
from helpers import assert_same, make_params, snapshot
from test_checked_runs import grads_at

pytestmark = pytest.mark.gpu
SIZES = [(6, 7), 300, 5, 33, 64, 9, 17, 40, 3, 12]


@pytest.mark.parametrize("gpu_cls,twin_cls,opts", CASES, ids=case_id)
def test_class_fill_equals_the_full_fill(gpu_cls, twin_cls, opts, device):
    """Two groups, lr scales alike and not (and -0.0 against 0.0), step counts that differ between tensors, fresh
    state in the first row for some: a table from the classes equals the table from one fill over every tensor."""
    params = make_params(SIZES, seed=31)
    names = sorted(params)
    groups = [{"params": {n: params[n] for n in names[:6]}}, {"params": {n: params[n] for n in names[6:]}}]
    scale = {names[0]: 0.5, names[1]: 0.5, names[2]: 2.0, names[6]: 0.25}
    try:
        opt = gpu_cls(groups, device=device, lr_scale=scale, **opts)
    except (TypeError, ValueError):  # (an optimizer of one group or without lr scales: one group, no scales)
        opt = gpu_cls(params, device=device, **opts)
    rng = np.random.default_rng(32)
    for drop in ([names[1]], [names[3], names[5]], []):
        opt.step({n: rng.standard_normal(p.shape).astype(np.float32) for n, p in params.items() if n not in drop})
    opt._settle()
    opt._scale[-2:] = 0.0, -0.0  # (the same value, not the same lr: fill's results differ in sign)
    merged, real = [], opt._fill_classes
    opt._fill_classes = lambda *a: (lambda r: merged.append(r[1] is not None) or r)(real(*a))
    for active in (opt._all_active, np.array([i % 3 != 1 for i in range(len(opt._names))])):
        key = opt._table_key(active, False)
        classes = opt._new_table(key, active, 7)
        opt._fill_classes = lambda sel, steps, fresh0: (sel, None)  # (every tensor its own class)
        full = opt._new_table(key, active, 7)
        opt._fill_classes = lambda *a: (lambda r: merged.append(r[1] is not None) or r)(real(*a))
        assert np.array_equal(classes.words, full.words), (gpu_cls.__name__, opts)
    assert any(merged) == getattr(type(opt).fill, "by_step", False)  # (alike tensors merged where fill allows)


def test_classes_of_alike_tensors(device):
    """Tensors alike in group, lr scale, step counts and fresh state share a class; -0.0 and 0.0 do not."""
    opt = rlx_gpu.AdamW(make_params(SIZES, seed=33), device=device)
    sel, n = opt._group_members[0], len(opt._names)
    steps = np.tile(np.arange(1, 4)[:, None], (1, n))
    none = [frozenset()] * n
    assert len(opt._fill_classes(sel, steps, none)[0]) == 1
    steps[:, 2] += 1
    opt._scale[4] = 3.0
    reps, inv = opt._fill_classes(sel, steps, none)
    assert len(reps) == 3 and inv[2] != inv[0] != inv[4] and len(set(inv[[0, 1, 3, 5]].tolist())) == 1
    fresh = list(none)
    fresh[1] = frozenset({"exp_avg"})
    assert len(opt._fill_classes(sel, steps, fresh)[0]) == 4


@pytest.mark.parametrize("kw", [{}, {"skip_nonfinite": True}], ids=str)
def test_tables_of_a_steady_run_grow(kw, device):
    """A run that uses its tables makes longer ones, each twice the last (up to MAX_ROWS); a changed
    hyperparameter starts over."""
    from rlx_gpu.engine.gating import LOG
    from rlx_gpu.engine.tables import MAX_ROWS, ROWS
    opt = rlx_gpu.AdamW(make_params(SIZES, seed=35), device=device, **kw)
    opt.write_grads(grads_at(make_params(SIZES, seed=35), 0, False))
    tables = []
    for s in range(1010):
        if s == 1000:
            opt.set_lr(5e-4)
        opt.step()
        if not tables or opt._rtable is not tables[-1][0]:
            tables.append((opt._rtable, s))
    rows, at = [tb.rows for tb, _ in tables], [s for _, s in tables]  # (a checked table: + its unsettled steps)
    steady = rows[:at.index(1000)]
    assert steady[0] == ROWS and all(2 * a <= b for a, b in zip(steady[:3], steady[1:4])), rows
    assert MAX_ROWS <= max(steady) <= MAX_ROWS + LOG and len(steady) <= 6, rows
    assert rows[len(steady)] <= ROWS + LOG, rows  # (a changed hyperparameter: a short table again)


def _change(o, s: int) -> None:
    """Step ``s``'s change between steps (for the GPU optimizer and its twin alike)."""
    g = o.param_groups[0]
    if s == 7:
        o.set_lr(3e-3)
    elif s == 41:
        g["weight_decay"] = 0.1
    elif s == 60:
        g["amsgrad"] = True  # (a state buffer the run did not need: made between quick steps)
    elif s == 77:
        g["betas"] = (0.8, 0.99)
    elif s == 120:
        o.clip_grad_norm = 0.3
    elif s == 150:
        o.clip_grad_norm = None
    elif s == 170 and hasattr(o, "set_lr_scale"):
        o.set_lr_scale({"t1": 0.5, "t3": 2.0})


def _three(params, device, **kw) -> tuple:
    """(an AdamW whose quick-path calls' results go to ``taken``, one kept on the general path, the twin, taken)."""
    quick, general = (rlx_gpu.AdamW(params, device=device, **kw) for _ in range(2))
    general._quick_ok = False
    taken, real = [], quick._quick_step
    quick._quick_step = lambda check: taken.append(real(check)) or taken[-1]
    return quick, general, rlx_gpu.reference.AdamW(params, **kw), taken


@pytest.mark.parametrize("kw", [{}, {"skip_nonfinite": True}, {"clip_grad_norm": 1.0, "skip_nonfinite": True}],
                         ids=str)
def test_changes_between_quick_steps_are_honoured(kw, device):
    """200 steps from the device grad slots with lr, weight decay, amsgrad, betas, the clip value and lr scales changed
    between them, and a state dict loaded: the quick path ends bit for bit where the general path ends, and each
    is the twin's run."""
    params = make_params(SIZES, seed=37)
    quick, general, twin, taken = _three(params, device, **kw)
    saved = None
    for s in range(200):
        g = grads_at(params, s, kw.get("skip_nonfinite", False) and s % 23 == 5)
        for o in (quick, general, twin):
            _change(o, s)
            if s == 100:
                saved = saved or (quick.state_dict(), twin.state_dict())
            if s == 130:
                o.load_state_dict(saved[1] if o is twin else saved[0])
            if o is twin:
                o.step(g)
            else:
                o.write_grads(g)
                o.step()
        if s in (6, 40, 119, 199):
            assert snapshot(quick) == snapshot(general), s
    assert sum(taken) > 150
    assert quick.last_step_skipped == general.last_step_skipped == twin.last_step_skipped
    assert_same(quick, twin, f"quick path {kw}")
    assert_same(general, twin, f"general path {kw}")


def test_a_scheduled_lr_takes_the_quick_path(device):
    """An lr changed before every step (a scheduler's) takes the quick path on every unchecked step after the first
    (validated there, its table made there), bit for bit the general path's run and the twin's; a bad lr set
    there raises before anything changes."""
    params = make_params(SIZES, seed=41)
    quick, general, twin, taken = _three(params, device)
    runs = [(o, rlx_gpu.schedules.CosineAnnealingLR(o, T_max=30)) for o in (quick, general, twin)]
    for s in range(30):
        g = grads_at(params, s, False)
        for o, sched in runs:
            if o is twin:
                o.step(g)
            else:
                o.write_grads(g)
                o.step()
            sched.step()
    assert taken[0] is False and all(taken[1:]), taken  # (the first step makes the programs: the general path)
    assert snapshot(quick) == snapshot(general)
    assert_same(quick, twin, "a scheduled lr on the quick path")
    before, lr = snapshot(quick), quick.param_groups[0]["lr"]
    quick.param_groups[0]["lr"] = -1.0
    with pytest.raises(ValueError, match="learning rate"):
        quick.step()
    quick.param_groups[0]["lr"] = lr
    assert snapshot(quick) == before
    quick.step()
    general.step()
    assert snapshot(quick) == snapshot(general)


@pytest.mark.parametrize("gpu_cls,twin_cls,opts", CASES, ids=case_id)
def test_one_row_template_is_the_general_row(gpu_cls, twin_cls, opts, device):
    """The row of a step after a hyperparameter change from .onerow's template equals the general path's row word
    for word: two groups, an lr changed, lr scales alike and not (-0.0 against 0.0), some tensors inactive; and the
    template is used wherever it applies (a ``by_step`` fill, no scalar states)."""
    from rlx_gpu.engine import tables
    params = make_params(SIZES, seed=43)
    names = sorted(params)
    groups = [{"params": {n: params[n] for n in names[:4]}}, {"params": {n: params[n] for n in names[4:]}}]
    try:
        opt = gpu_cls(groups, device=device, **opts)
    except (TypeError, ValueError):  # (an optimizer of one group: one group)
        opt = gpu_cls(params, device=device, **opts)
    rng = np.random.default_rng(44)
    for _ in range(2):
        opt.step({n: rng.standard_normal(p.shape).astype(np.float32) for n, p in params.items()})
    opt._settle()
    used, real = [], tables.one_row
    tables.one_row = lambda *a: (lambda r: used.append(r is not None) or r)(real(*a))
    try:
        for scales in ({}, {names[0]: 0.5, names[1]: 0.5}, {**{n: 0.0 for n in names[4:]}, names[-1]: -0.0}):
            opt._scale[:] = 1.0
            for n, v in scales.items():
                opt._scale[opt._index[n]] = v
            for active in (opt._all_active, np.array([i % 3 != 1 for i in range(len(opt._names))])):
                opt.param_groups[-1]["lr"] *= 0.5
                opt._validate_groups()
                steps = opt._steps[None, :] + active
                fresh = [frozenset()] * len(opt._names)
                rows = []
                for fast in (True, False):
                    opt._one_row = fast
                    rows.append(opt._records_rows(active, steps, fresh, opt._materialized))
                assert np.array_equal(*rows), (gpu_cls.__name__, opts, scales)
    finally:
        tables.one_row = real
        opt._one_row = True
    applies = getattr(type(opt).fill, "by_step", False) and not opt._scalars
    assert any(used) == applies, (used, applies)


def test_only_changed_values_are_validated_and_each_is(device):
    """After a change only the changed values (and their groups' cross-value checks) are validated again, and
    every one of them is: a bad value in the second group raises naming it and changes nothing; a change that
    breaks a check across values (SGD's nesterov needs a momentum) raises too; a fixed value steps on."""
    params = make_params(SIZES, seed=45)
    names = sorted(params)
    groups = [{"params": {n: params[n] for n in names[:5]}},
              {"params": {n: params[n] for n in names[5:]}, "momentum": 0.9, "nesterov": True}]
    opt = rlx_gpu.SGD(groups, lr=0.1, momentum=0.5, device=device)
    opt.write_grads(grads_at(params, 0, False))
    opt.step()
    before = snapshot(opt)
    opt.param_groups[0]["lr"] = 0.05
    opt.param_groups[1]["weight_decay"] = -1.0
    with pytest.raises(ValueError, match="weight_decay"):
        opt.step()
    assert snapshot(opt) == before
    opt.param_groups[1]["weight_decay"] = 0.0
    opt.param_groups[1]["momentum"] = 0.0
    with pytest.raises(ValueError, match="Nesterov"):
        opt.step()
    assert snapshot(opt) == before
    opt.param_groups[1]["momentum"] = 0.8
    opt.step()
    twin = rlx_gpu.reference.SGD([{"params": {n: params[n] for n in names[:5]}},
                                  {"params": {n: params[n] for n in names[5:]}, "momentum": 0.9, "nesterov": True}],
                                 lr=0.1, momentum=0.5)
    twin.step(grads_at(params, 0, False))
    twin.param_groups[0]["lr"] = 0.05
    twin.param_groups[1]["momentum"] = 0.8
    twin.step(grads_at(params, 0, False))
    assert_same(opt, twin, "SGD after the changes")


def test_set_lr_is_checked_once_and_the_step_takes_it(device):
    """``set_lr`` before every step (a scheduler's way on the NumPy API): the value is checked in set_lr and not
    again at the step, every step after the first takes the quick path, bit for bit the general path's run and the
    twin's; a value the caller changed in a group beside it is still checked at the step (and changes nothing)."""
    params = make_params(SIZES, seed=47)
    quick, general, twin, taken = _three(params, device)
    checks, validate = [], type(quick).spec.validate
    for s in range(25):
        g = grads_at(params, s, False)
        for o in (quick, general, twin):
            o.set_lr(1e-3 / (1 + 0.1 * s))
            if o is twin:
                o.step(g)
                continue
            o.write_grads(g)
            o.spec.validate = lambda group, keys=None: checks.append(keys) or validate(group, keys)
            try:
                o.step()
            finally:
                del o.spec.validate
    assert checks == [] and taken[0] is False and all(taken[1:]), (checks, taken)
    assert snapshot(quick) == snapshot(general)
    assert_same(quick, twin, "set_lr before every step")
    before = snapshot(quick)
    quick.param_groups[0]["weight_decay"] = -1.0
    quick.set_lr(5e-4)
    with pytest.raises(ValueError, match="weight_decay"):
        quick.step()
    assert snapshot(quick) == before


def test_pack_one_is_pack():
    """A tensor's record from ``Record.pack_one`` is ``pack``'s word for word (floats and one-element float64 arrays,
    rounded once to float32, -0.0, subnormals, flags); anything else (an int, a value past float32) is left to
    pack (None)."""
    from rlx_gpu.engine.records import Record
    rec = Record("a", "b", "c", "k:u32", flags=("x", "y"), states=("m",))
    rng = np.random.default_rng(49)
    vals = [0.0, -0.0, 1e-40, -3e-39, 1.0 + 2.0 ** -30, 3.4028235e38, float(np.float32(1e-3)), np.pi]
    for _ in range(200):
        cols = {n: float(rng.choice(vals)) * float(rng.choice([1.0, -1.0, 0.5, 1 / 3])) for n in ("c", "a")}
        cols["a"] = np.float64(cols["a"])
        cols["b"] = np.array([rng.standard_normal() * 10.0 ** rng.integers(-45, 38)])
        named = {"x": bool(rng.integers(2)), "has_m": np.array([bool(rng.integers(2))]), "active": True}
        want = rec.pack(1, cols, rec.flags(1, named), {})[0]
        assert np.array_equal(rec.pack_one(cols, named), want), cols
    named = {"y": True, "has_m": False}
    assert np.array_equal(rec.pack_one({}, named), rec.pack(1, {}, rec.flags(1, named), {})[0])  # (flags alone)
    assert rec.pack_one({"a": 1, "b": 2.0}, {}) is None  # (an int: pack's cast)
    assert rec.pack_one({"a": 3.5e38}, {}) is None  # (past float32: pack gives inf)
    assert rec.pack_one({"k": 1.0}, {}) is None  # (a u32 word)
    assert rec.pack_one({"a": np.array([1.0, 2.0])}, {}) is None
