"""The bench's rows: which (optimizer, precision, param set) run, on which tensors, and how each row's optimizer is
built and stepped. ``plan`` decides it all before any timing (``rlx-gpu bench --list`` prints it)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...core.lowp import DTYPES
from .shapes import OPTIMIZERS, PRECISIONS, SPARSE_EVERY, min_bytes, param_set, scale_shapes

# The matrix optimizers step a set's 2-D tensors other than the embeddings (a single:N set: one square matrix of
# about N elements), of the first --matrix-layers layers, each side divided by --matrix-div (and by their own "div");
# sets whose largest side is then above "max_side" are skipped (SOAP's host eigendecompositions and Kron's
# triangular factors grow as its cube).
MATRIX = {"muon": {}, "soap": {"max_side": 3072}, "kron": {"max_side": 3072},
          # the Cholesky, the triangular solve and the Cayley step are sequential in this first version
          "stiefel": {"div": 4, "max_side": 768}, "partition": {}}
EMBEDDINGS = ("wte", "wpe")
# SOAP refreshes its bases every precondition_frequency (10) steps: a timed window of 10 steps holds one refresh.
WINDOW = {"soap": 10}


@dataclass
class Plan:
    """One row to run: its tensors (scaled where the set does not fit), or why it is skipped."""
    optimizer: str
    precision: str
    param_set: str
    shapes: list
    numel0: int          # the set's own size, before any scaling
    scale: float | None  # the factor the set was scaled by (None: not scaled)
    why_scaled: str = ""
    skip: str | None = None

    @property
    def numel(self) -> int:
        return sum(int(np.prod(s)) for _, s in self.shapes)

    def describe(self) -> str:
        head = f"{self.optimizer} {self.precision} on {self.param_set}"
        if self.skip:
            return f"{head}: skipped: {self.skip}"
        n = len(self.shapes)
        return (f"{head}: {n} tensor{'s' if n != 1 else ''}, {self.numel:,} params"
                + (f" (scaled to {self.scale:.3g} of {self.numel0:,}: {self.why_scaled})" if self.scale else ""))


def _layer(name: str) -> int:
    """A GPT-2 tensor's layer (``h3.attn.c_attn.weight``: 3); -1 for the others."""
    head = name.split(".", 1)[0]
    return int(head[1:]) if head[:1] == "h" and head[1:].isdigit() else -1


def _matrices(oname: str, base: list, d: int, layers: int = 0) -> list:
    if layers:
        base = [(n, s) for n, s in base if _layer(n) < layers]
    if oname == "partition":  # every tensor, each dimension divided
        return [(n, tuple(max(2, x // d) for x in s)) for n, s in base]
    if len(base) == 1 and len(base[0][1]) == 1:  # single:N -> one square matrix
        side = int(np.sqrt(base[0][1][0]))
        base = [("w", (side, side))]
    out = [(n, (max(2, s[0] // d), max(2, s[1] // d))) for n, s in base if len(s) == 2 and n not in EMBEDDINGS]
    if oname == "stiefel":  # (n, p) with n >= p: orthonormal columns
        out = [(n, (max(s), min(s))) for n, s in out]
    return out


def _plan(oname, precision, sname, base, budget, div, layers) -> Plan:
    numel0 = sum(int(np.prod(s)) for _, s in base)
    plan = Plan(oname, precision, sname, base, numel0, None)
    if (oname in MATRIX or oname == "sparseadam") and precision != "fp32":
        plan.skip = f"{OPTIMIZERS[oname][0]} steps float32 params and states only"
        return plan
    if oname in MATRIX:
        if oname == "partition" and len(base) == 1:
            plan.skip = "Partition routes a model's matrices to Muon and the rest to AdamW: use a gpt2 set"
            return plan
        d = div * MATRIX[oname].get("div", 1)
        plan.shapes, full = _matrices(oname, base, d, layers), _matrices(oname, base, 1)
        plan.numel0 = sum(int(np.prod(s)) for _, s in full)
        side = max(max(s) for _, s in plan.shapes)
        if side > MATRIX[oname].get("max_side", side):
            plan.skip = (f"a side of {side} is above {MATRIX[oname]['max_side']}: {OPTIMIZERS[oname][0]}'s work per "
                         "matrix grows as the cube of its sides (pass a larger --matrix-div)")
        if plan.numel != plan.numel0:
            what = ("every tensor" if oname == "partition" else "one square matrix" if len(base) == 1
                    else "the hidden matrices")
            if layers and len(base) > 1:
                what += f" of the first {f'{layers} layers' if layers > 1 else 'layer'} (--matrix-layers)"
            plan.scale = plan.numel / plan.numel0
            own = MATRIX[oname].get("div", 1)
            plan.why_scaled = f"{what}, sides / {d} (--matrix-div {div}" + (f" x {oname}'s {own})" if own > 1 else ")")
        return plan
    need = min_bytes(oname, precision, base) * 1.1  # (the arenas hold about what a step moves)
    if oname == "sparseadam":
        need *= SPARSE_EVERY  # (the whole table lives on the device, with its two moments)
    if need > budget:
        plan.scale = budget / need
        plan.shapes = scale_shapes(base, plan.scale)
        plan.why_scaled = f"the adapter's memory budget is {budget / 1e9:.3g} GB (--memory-gb)"
    return plan


def plan(names, precisions, sets, budget: float, div: int, layers: int = 0) -> list:
    """Every row, in the order they run (set, then precision, then optimizer), skipped ones included."""
    return [_plan(o, p, s, param_set(s), budget, div, layers) for s in sets for p in precisions for o in names]


def start_params(oname, precision, shapes) -> dict:
    """The params a row starts from (the matrix optimizers: random, StiefelSGD's orthonormal)."""
    pd = DTYPES[PRECISIONS[precision][0]].np
    if oname not in MATRIX:
        return {n: np.full(s, 0.01, np.float32).astype(pd) for n, s in shapes}
    rng = np.random.default_rng(0)
    params = {}
    for n, s in shapes:
        x = rng.standard_normal(s)
        if oname == "stiefel":
            q, r = np.linalg.qr(x)
            x = q * np.sign(np.diag(r))
        params[n] = (x * (1 if oname == "stiefel" else 0.02)).astype(np.float32)
    return params


def grads(oname, precision, shapes) -> dict:
    """The grads every step of a row uses (SparseAdam: every SPARSE_EVERY-th row of each tensor)."""
    import rlx_gpu
    gd = DTYPES[PRECISIONS[precision][1]].np
    if oname == "sparseadam":
        return {n: rlx_gpu.RowSparse(np.arange(0, s[0], SPARSE_EVERY),
                                     np.full((-(-s[0] // SPARSE_EVERY), *s[1:]), 1e-3, np.float32)) for n, s in shapes}
    return {n: np.full(s, 1e-3, np.float32).astype(gd) for n, s in shapes}


def build(rlx_gpu, p: Plan, dev):
    """(params, constructor options, optimizer, the step to time, grads) for row ``p``, its grads on the device."""
    cls_name, kw, _, _ = OPTIMIZERS[p.optimizer]
    kw = dict(kw)
    scaler = rlx_gpu.GradScaler() if kw.pop("scaler", False) else None
    params, g = start_params(p.optimizer, p.precision, p.shapes), grads(p.optimizer, p.precision, p.shapes)
    pd, gd, sd, master = PRECISIONS[p.precision]
    if p.optimizer == "partition":
        opt = rlx_gpu.Partition(params, label=lambda n, s: "muon" if len(s) == 2 and n not in EMBEDDINGS else "adamw",
                                optimizers={"muon": (rlx_gpu.Muon, {"lr": 0.02}), "adamw": (rlx_gpu.AdamW, {"lr": 1e-3})},
                                device=dev)
    else:
        if p.optimizer not in MATRIX and p.optimizer != "sparseadam":
            kw.update(state_dtype=sd, master_weights=master, grad_dtype=None if gd == pd else gd)
        opt = getattr(rlx_gpu, cls_name)(params, lr=1e-3, **kw, device=dev)
    if p.optimizer == "sparseadam":
        on_device = opt.upload_sparse(g)

        def step():
            opt.step(on_device)
        return params, kw, opt, step, g
    for n, v in g.items():
        opt.grads[n].write(v)
    step = opt.step
    if scaler is not None:
        def step():
            scaler.step(opt)
            scaler.update()
    return params, kw, opt, step, g
