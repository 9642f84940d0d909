"""The options every optimizer shares, declared once: name, default, meaning, validation.

An optimizer class declares only its hyperparameters (its twin's ``defaults``); its constructor signature,
argument parsing and the "Options" part of its docstring come from here, for the GPU classes and the twins alike:

    AdamW(params, lr=0.001, betas=(0.9, 0.999), eps=1e-08, weight_decay=0.01, amsgrad=False, maximize=False, *,
          lr_scale=None, clip_grad_norm=None, skip_nonfinite=False, master_weights=False, stochastic_rounding=False,
          rounding_seed=0, state_dtype='float32', state_bits=None, min_quantized_size=4096, grad_dtype=None,
          qat=None, device=None)
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from numbers import Integral

from .lowp import DTYPES, dtype_of
from .numerics import check_max_norm
from .torchio import plain_hyper


@dataclass(frozen=True)
class Option:
    name: str
    default: object
    doc: str
    gpu_only: bool = False
    torch_only: bool = False  # torch.optim's implementation switches: accepted, checked, not kept by the engine


OPTIONS = (
    Option("lr_scale", None, "per-tensor multiplier of the group lr: a dict name -> factor (missing names 1) or a "
           "callable name -> factor; applied in the kernels' scalars, saved in checkpoints (``set_lr_scale``)."),
    Option("clip_grad_norm", None, "global L2-norm clip folded into every step, with torch's clip_grad_norm_ "
           "semantics (``last_grad_norm()`` reads the norm); None: off."),
    Option("skip_nonfinite", False, "skip a step whose grads hold inf or NaN: params, state and step counts stay "
           "bit-identical (``last_step_skipped``)."),
    Option("master_weights", False, "keep a float32 copy of each 16-bit parameter (state ``master_param``): the "
           "update is applied to it and the parameter gets its round-to-nearest-even value."),
    Option("stochastic_rounding", False, "store each updated 16-bit parameter rounded stochastically (unbiased), "
           "instead of to nearest even; without master weights."),
    Option("rounding_seed", 0, "the seed of stochastic rounding's random bits, which are a hash of (seed, the "
           "tensor's step count, its name, the element's index): reproducible on any adapter."),
    Option("state_dtype", "float32", "dtype of the state buffers (moments): 'float32', 'bfloat16' or 'float16'; "
           "arithmetic stays float32, stores round to nearest even."),
    Option("state_bits", None, "block-quantized state buffers: None (off), 8 (bitsandbytes' dynamic maps, blocks of "
           "256) or 4 (torchao's 4-bit maps, blocks of 128), on Adam, AdamW, Lion, SGD and RMSprop "
           "(docs/guides/memory.md)."),
    Option("min_quantized_size", 4096, "tensors with fewer elements keep unquantized states under state_bits "
           "(bitsandbytes' rule)."),
    Option("grad_dtype", None, "dtype of the gradient slots: None (each parameter's dtype) or 'float32'."),
    Option("qat", None, "quantized copies written in each step (quantization-aware training): a dict name -> "
           "'int8' or 'int4', optionally followed by '/channel' and by '/values' or '/values-bf16' "
           "(docs/guides/qat.md); ``opt.qat[name]`` holds each copy.", gpu_only=True),
    Option("device", None, "adapter selector (see ``rlx_gpu.get_device``): a backend, 'cpu', 'gpu' or part of an "
           "adapter's name; default ``RLX_GPU_ADAPTER`` or the best adapter.", gpu_only=True),
    Option("foreach", None, "torch.optim's switch, accepted for pasted code: every step is one fused dispatch per "
           "chunk whatever it says (torch-built optimizers keep it in their groups).", torch_only=True),
    Option("fused", None, "torch.optim's switch, accepted: the step is always fused here; fused=True with "
           "foreach=True is torch's RuntimeError.", torch_only=True),
    Option("capturable", False, "torch.optim's switch, accepted: steps never wait for the host, captured or not.",
           torch_only=True),
    Option("differentiable", False, "torch.optim's switch: only False (the step runs on rlx_gpu's device, outside "
           "autograd); True is torch's RuntimeError for a fused optimizer.", torch_only=True),
)
#: The names of torch.optim's implementation switches (kept in a torch-built optimizer's groups, as torch keeps them).
TORCH_SWITCHES = tuple(o.name for o in OPTIONS if o.torch_only)
BY_NAME = {o.name: o for o in OPTIONS}


def names(gpu: bool) -> tuple:
    return tuple(o.name for o in OPTIONS if gpu or not o.gpu_only)


def signature(defaults: dict, gpu: bool, overrides: dict | None = None) -> inspect.Signature:
    """``(params, <hyperparameters with defaults>, *, <options>)``: the class's signature, as help() and IDEs show."""
    P = inspect.Parameter
    ps = [P("params", P.POSITIONAL_OR_KEYWORD)]
    ps += [P(k, P.POSITIONAL_OR_KEYWORD, default=v) for k, v in defaults.items()]
    ps += [P(o.name, P.KEYWORD_ONLY, default=(overrides or {}).get(o.name, o.default)) for o in OPTIONS
           if gpu or not o.gpu_only]
    return inspect.Signature(ps)


def doc(gpu: bool, overrides: dict | None = None) -> str:
    lines = ["", "Options (every optimizer):"]
    for o in OPTIONS:
        if gpu or not o.gpu_only:
            lines.append(f"    {o.name} (default {(overrides or {}).get(o.name, o.default)!r}): {o.doc}")
    return "\n".join(lines)


def split(owner: str, defaults: dict, args: tuple, kwargs: dict, gpu: bool,
          overrides: dict | None = None, fixed: dict | None = None) -> tuple[dict, dict]:
    """(hyperparameters, options) from a constructor's arguments after ``params``, as Python binds them: the
    hyperparameters plain (a 1-element tensor as its float, :func:`rlx_gpu.core.torchio.plain_hyper`), the options
    checked (torch's switches checked and dropped). ``overrides``: the class's own option defaults (LAMB's
    ``clip_grad_norm``); ``fixed``: torch's keys this class has one value of (NAdamW's
    ``decoupled_weight_decay=True``), accepted with that value."""
    keys = list(defaults)
    if len(args) > len(keys):
        raise TypeError(f"{owner}() takes at most {len(keys) + 1} positional arguments ({len(args) + 1} given)")
    hyper = dict(zip(keys, args))
    opts = {o: BY_NAME[o].default for o in names(gpu)}
    opts.update(overrides or {})
    for k, v in kwargs.items():
        if k in (fixed or {}):
            if v != fixed[k]:
                raise ValueError(f"{owner}: {k}={v!r} is not supported; {owner} is torch's optimizer with "
                                 f"{k}={fixed[k]!r}")
        elif k in defaults:
            if k in hyper:
                raise TypeError(f"{owner}() got multiple values for argument {k!r}")
            hyper[k] = v
        elif k in opts:
            opts[k] = v
        else:
            raise TypeError(f"{owner}() got an unexpected keyword argument {k!r}")
    check(owner, opts)
    check_switches(owner, {k: opts.pop(k) for k in TORCH_SWITCHES})
    return plain_hyper(owner, hyper), opts


def check_switches(owner: str, switches: dict) -> None:
    """torch's implementation switches: their types, and what torch refuses (messages as torch's)."""
    for k in ("foreach", "fused"):
        if switches.get(k) is not None and not isinstance(switches[k], bool):
            raise TypeError(f"{owner}: {k} must be None, True or False, got {switches[k]!r}")
    for k in ("capturable", "differentiable"):
        if not isinstance(switches.get(k, False), bool):
            raise TypeError(f"{owner}: {k} must be True or False, got {switches[k]!r}")
    if switches.get("fused") and switches.get("foreach"):
        raise RuntimeError("`fused` and `foreach` cannot be `True` together.")
    if switches.get("differentiable"):
        raise RuntimeError(f"{owner}: `fused` does not support `differentiable` (torch's message: rlx_gpu's step is "
                           "always fused, on its own device, outside autograd); pass differentiable=False")


def check(owner: str, opts: dict) -> None:
    """Types and values of the shared options (``lr_scale`` is checked against the tensor names elsewhere)."""
    if opts["clip_grad_norm"] is not None:
        check_max_norm(opts["clip_grad_norm"])
    for k in ("skip_nonfinite", "master_weights", "stochastic_rounding"):
        if not isinstance(opts[k], bool):
            raise TypeError(f"{owner}: {k} must be True or False, got {opts[k]!r}")
    if opts["master_weights"] and opts["stochastic_rounding"]:
        raise ValueError(f"{owner}: stochastic_rounding rounds parameters that have no float32 master copy; "
                         "use it without master_weights")
    seed = opts["rounding_seed"]
    if not isinstance(seed, Integral) or isinstance(seed, bool) or not 0 <= seed < 2 ** 64:
        raise ValueError(f"{owner}: rounding_seed must be an int in [0, 2**64), got {seed!r}")
    if dtype_of(opts["state_dtype"]) is None or not isinstance(opts["state_dtype"], str):
        raise ValueError(f"{owner}: state_dtype must be one of {sorted(DTYPES)}, got {opts['state_dtype']!r}")
    opts["state_dtype"] = dtype_of(opts["state_dtype"]).name
    g = opts["grad_dtype"]
    if g is not None and (not isinstance(g, str) or dtype_of(g) is None or dtype_of(g).name != "float32"):
        raise ValueError(f"{owner}: grad_dtype must be None (each parameter's dtype) or 'float32', got {g!r}")
    if g is not None:
        opts["grad_dtype"] = "float32"
