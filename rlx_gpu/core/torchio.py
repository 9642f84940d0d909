"""torch tensors as NumPy, without importing torch (it is looked up in ``sys.modules``: a caller who passes torch
tensors has imported it).

- :func:`numpy_view`: a zero-copy NumPy view of a CPU tensor, contiguous or not (a transposed leaf, a slice,
  ``channels_last``: NumPy takes the strides as they are); bfloat16 as ``ml_dtypes.bfloat16``; complex64 as its
  ``view_as_real`` (float32, a trailing axis of 2), as torch.optim's own steps see complex parameters.
- :func:`plain_hyper`: hyperparameters given as tensors (``lr=torch.tensor(1e-3)``) as floats, with torch's checks.
- :func:`to_array` / :func:`to_tensor`: lossless conversions of any state array (every dtype, bfloat16 by its bits).
"""
from __future__ import annotations

import sys

import numpy as np

_FLOATS = ("torch.float32", "torch.float16", "torch.bfloat16", "torch.complex64")


def _torch():
    return sys.modules.get("torch")


def is_tensor(x) -> bool:
    t = _torch()
    return t is not None and isinstance(x, t.Tensor)


def is_module(x) -> bool:
    """Whether ``x`` is a ``torch.nn.Module`` (passed where its ``parameters()`` were meant)."""
    t = _torch()
    return t is not None and hasattr(t, "nn") and isinstance(x, t.nn.Module)


def numpy_view(owner: str, name: str, t, what: str = "tensor"):
    """A zero-copy NumPy view of CPU tensor ``t`` (any strides; bfloat16 as ``ml_dtypes.bfloat16``, complex64 as
    float32 pairs); TypeError naming it otherwise."""
    if t.layout != _torch().strided:
        raise TypeError(f"{owner}: {what} {name!r} is a {t.layout} tensor; rlx_gpu takes dense (strided) tensors")
    if t.device.type != "cpu":
        raise TypeError(f"{owner}: {what} {name!r} is on {t.device}; rlx_gpu takes CPU torch tensors (it keeps its "
                        "own copy on its device and writes the result back)")
    if str(t.dtype) not in _FLOATS:
        raise TypeError(f"{owner}: {what} {name!r} has dtype {t.dtype}, expected torch.float32, float16 or bfloat16")
    t = t.detach()
    if t.is_conj() or t.is_neg():
        raise TypeError(f"{owner}: {what} {name!r} is a lazy conjugate/negative view; pass tensor.resolve_conj()")
    if t.dtype == _torch().complex64:
        return _torch().view_as_real(t).numpy()
    if t.dtype == _torch().bfloat16:
        import ml_dtypes
        return t.view(_torch().int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def _one(owner: str, what: str, v):
    if v.numel() != 1:
        raise ValueError(f"Tensor {what} must be 1-element")
    return float(v.detach().reshape(()).item())


def plain_hyper(owner: str, hyper: dict) -> dict:
    """``hyper`` with 1-element tensors as floats (torch's messages for the others: "Tensor lr must be
    1-element"), and a pair (betas) holding one tensor and one float refused as torch refuses it."""
    out = {}
    for k, v in hyper.items():
        if type(v) is float:  # (the common case, without the tensor checks)
            out[k] = v
            continue
        if is_tensor(v):
            v = _one(owner, k, v)
        elif isinstance(v, (tuple, list)) and any(is_tensor(x) for x in v):
            if k == "betas" and not all(is_tensor(x) for x in v):
                raise ValueError("betas must be either both floats or both Tensors")
            v = tuple(_one(owner, f"{k}[{i}]", x) if is_tensor(x) else x for i, x in enumerate(v))
        out[k] = v
    return out


def plain(v):
    """A group value as the engine keeps it: tensors as floats, tuples of them as tuples, NumPy scalars as
    Python numbers (what ``torch.load(weights_only=True)`` reads back)."""
    if is_tensor(v):
        return float(v.detach().reshape(-1)[0].item()) if v.numel() else v
    if isinstance(v, (tuple, list)):
        return type(v)(plain(x) for x in v)
    if isinstance(v, np.generic):
        return v.item()
    return v


def to_tensor(v):
    """A NumPy array (or number) as a torch tensor of the same dtype and bits (bfloat16 through its int16 bits)."""
    torch = _torch()
    a = np.asarray(v)
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(np.array(a, copy=True, order="C"))


def to_array(owner: str, k: str, v):
    """A torch tensor (or number, or array) as a NumPy array of the same dtype and bits; complex as float32
    pairs."""
    if not is_tensor(v):
        return np.array(v)
    v = v.detach().cpu().contiguous()
    torch = _torch()
    if v.dtype == torch.bfloat16:
        import ml_dtypes
        return v.view(torch.int16).numpy().view(ml_dtypes.bfloat16).copy()
    if v.is_complex():
        return torch.view_as_real(v.resolve_conj()).numpy().copy()
    return v.numpy().copy()
