"""What both constructors (the GPU classes' in ``rlx_gpu.engine``, the twins' in ``rlx_gpu.reference``) do with their
arguments, written once: the hyperparameters and shared options split and checked (torch's ValueErrors before
params are looked at), the param groups parsed, and the shared options every optimizer keeps as attributes."""
from __future__ import annotations

from . import options as shared
from .groups import parse_params, resolve_lr_scale
from .quant import check_state_bits

__all__ = ["unpack", "shared_options"]


def unpack(owner: str, spec, params, bind, args: tuple, kwargs: dict, gpu: bool) -> tuple[dict, list, dict, dict]:
    """(defaults with the given hyperparameters, param groups, {name: array}, the shared options) from a
    constructor's arguments; ``spec`` is the twin class (its defaults, option defaults, validation), ``bind`` the
    object's torch binding (``TorchParams._bind_torch``)."""
    hyper, opts = shared.split(owner, spec.defaults, args, kwargs, gpu=gpu, overrides=spec.option_defaults,
                               fixed=spec.torch_group_keys)
    check_state_bits(owner, spec.quantizable, opts)
    defaults = {**spec.defaults, **hyper}
    spec.validate(dict(defaults))  # (bad hyperparameters are ValueErrors before params are looked at)
    groups, arrays = parse_params(owner, bind(owner, params), defaults)
    return defaults, groups, arrays, opts


def shared_options(owner: str, opts: dict, names: list) -> tuple[dict, object, bool, dict]:
    """(lr_scale per tensor, clip_grad_norm, skip_nonfinite, the precision options): the shared options taken out
    of ``opts`` (what :func:`unpack` returned, less the GPU's ``device``)."""
    lr_scale = resolve_lr_scale(owner, opts.pop("lr_scale"), names)
    clip, skip = opts.pop("clip_grad_norm"), opts.pop("skip_nonfinite")
    return lr_scale, clip, skip, dict(opts)
