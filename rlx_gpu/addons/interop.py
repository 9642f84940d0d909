"""State dicts between rlx_gpu and torch.optim, so that a run can switch optimizers mid-training and continue.

rlx_gpu keys state by tensor name and lists names in ``param_groups[i]["params"]``; torch keys both by the
parameter's index (counted across groups in order). Values: NumPy arrays <-> torch tensors of the same dtype and
bits (bfloat16 both ways, uint8 codes stay uint8), ``step`` an int <-> a float32 0-d tensor (torch's). Hyperparameters pass through; torch's implementation switches
(``foreach``, ``fused``, ``capturable``, ``differentiable``, ``param_names``) are dropped on the way in and, with
``like=``, taken from a torch optimizer on the way out (otherwise torch fills its defaults when it loads).

    torch_opt.load_state_dict(rlx_gpu.to_torch_state_dict(opt, like=torch_opt))
    opt.load_state_dict(rlx_gpu.from_torch_state_dict(torch_opt.state_dict(), opt))

Given the optimizer rather than its state dict, the conversions also write and check the keys torch's class of
the same algorithm needs (NAdamW: ``decoupled_weight_decay=True``; a torch NAdam state with False is refused).
torch's SGD counts no steps: its states load with ``step`` 1 where they hold a buffer, else 0.

torch is imported only by :func:`to_torch_state_dict` (which makes torch tensors).
"""
from __future__ import annotations

from ..core.torchcontract import native_groups
from ..core.torchstate import check_fixed_keys, state_from_torch, state_to_torch

TORCH_ONLY = ("foreach", "fused", "capturable", "differentiable", "param_names")


def _names_of(sd) -> list:
    return [n for g in sd["param_groups"] for n in g["params"]]


def _spec_of(opt):
    """An rlx_gpu optimizer's spec (GPU class: its twin class; twin: its own class)."""
    return getattr(type(opt), "spec", None) or type(opt)


def _torch_keys(opt) -> dict:
    """The fixed torch group keys of an rlx_gpu optimizer."""
    return dict(getattr(_spec_of(opt), "torch_group_keys", {}))


def to_torch_state_dict(sd, like=None) -> dict:
    """An rlx_gpu state dict (GPU class or twin), or the optimizer itself, as torch.optim's: state and params keyed
    by index. ``like``: a torch optimizer whose groups supply torch's own keys (``foreach``, ...) that rlx_gpu's
    groups do not hold. Given the optimizer, the keys torch's class needs (NAdamW's ``decoupled_weight_decay``)
    are written too."""
    import torch  # noqa: F401  (the tensors made here)
    fixed = {}
    if not isinstance(sd, dict):
        fixed, sd = _torch_keys(sd), sd.numpy_state_dict(dequantize=True)  # (torch's states: float32 moments)
    index = {n: i for i, n in enumerate(_names_of(sd))}
    state = {index[n]: state_to_torch(st) for n, st in sd["state"].items()}
    groups = []
    for gi, g in enumerate(sd["param_groups"]):
        out = {k: v for k, v in g.items() if k != "params"}
        out.update(fixed)
        if like is not None:
            for k, v in like.param_groups[gi].items():
                if k not in out and k != "params":
                    out[k] = v
        out["params"] = [index[n] for n in g["params"]]
        groups.append(out)
    return {"state": state, "param_groups": groups}


def from_torch_state_dict(sd: dict, names) -> dict:
    """A torch.optim state dict as rlx_gpu's. ``names``: the tensor names in torch's parameter order (e.g.
    ``[n for n, _ in model.named_parameters()]``), or an rlx_gpu optimizer (its names, in order; its groups' keys
    decide which of torch's keys are kept)."""
    keep = None
    if not isinstance(names, (list, tuple)):
        keep = set(names.defaults) | {"initial_lr", "max_lr", "min_lr", "base_momentum", "max_momentum"}
        check_fixed_keys("from_torch_state_dict", sd["param_groups"], _spec_of(names), type(names).__name__)
        names = [n for g in native_groups(names) for n in g["params"]]
    order = [i for g in sd["param_groups"] for i in g["params"]]
    if len(order) != len(names):
        raise ValueError(f"from_torch_state_dict: the state dict has {len(order)} parameters, {len(names)} names "
                         "were given")
    name = dict(zip(order, names))

    state = {}
    for i, st in sd["state"].items():
        if i not in name:
            continue  # (what a hook keeps in torch's state under a key of its own)
        state[name[i]] = state_from_torch("from_torch_state_dict", st)
        state[name[i]].setdefault("step", 1 if st else 0)  # (torch's SGD counts no steps)
    groups = []
    for g in sd["param_groups"]:
        out = {k: v for k, v in g.items() if k != "params" and k not in TORCH_ONLY and (keep is None or k in keep)}
        out["params"] = [name[i] for i in g["params"]]
        groups.append(out)
    return {"state": state, "param_groups": groups}
