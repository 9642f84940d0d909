"""PyTorch tensors as parameters: every optimizer (GPU class or twin) accepts what torch.optim accepts, with
torch's rules, and with CPU torch tensors behaves as a torch optimizer does.

Accepted ``params``: ``model.parameters()`` (names "0", "1", ... as torch numbers them in state dicts),
``model.named_parameters()``, a dict name -> tensor, or param groups whose ``"params"`` are any of these (unnamed
tensors are numbered across groups, as torch does); float32, float16, bfloat16 or complex64 (as its
``view_as_real``) CPU tensors, contiguous or not. torch's rules and messages: a bare tensor or a set is a
TypeError, a non-leaf tensor "can't optimize a non-leaf Tensor", a tensor twice in one group a warning (it is
stepped once), in two groups a ValueError, names given for some tensors only a ValueError.

An optimizer built from torch tensors (:class:`TorchParams`): ``step()`` with no grads takes each tensor's ``.grad``
(None: no grad, as torch; a sparse COO grad, any number of sparse dims, as a :class:`rlx_gpu.RowSparse`), and
afterwards the tensors hold the updated values, written into their storage through zero-copy NumPy views in one
transfer (a non-contiguous tensor through one copy); a tensor changed in torch since (its version counter or its
storage moved) is uploaded again first (with master weights, its master copy restarts from it, as for
``write_params``). An edit through ``p.data`` in place bypasses torch's version counter and is not seen: edit
``p`` under ``torch.no_grad()``, or call ``opt.write_params``. Each step bumps the tensors' version counters, as
torch's in-place update does. ``write_params`` and ``restore`` write into the tensors too. ``zero_grad()`` sets
``.grad`` to None (or zeroes it with ``set_to_none=False``); ``step(closure)`` calls the closure with grad enabled
and returns its loss; clipping (``rlx_gpu.clip_grad_norm``, ``clip_grads``) clips the tensors' ``.grad``.
"""
from __future__ import annotations

import warnings

import numpy as np

from .torchio import _torch, is_module, is_tensor, numpy_view

NONE_ITERABLE = ("params argument given to the optimizer should be an iterable of Tensors or dicts, but got "
                 "{}; pass [tensor] for one tensor, model.parameters() for a module's")


def _typename(x) -> str:
    t = type(x)
    return f"{t.__module__}.{t.__qualname__}" if t.__module__ != "builtins" else t.__qualname__


def materialize(owner: str, params):
    """(``params`` with iterators (``model.parameters()``) made lists, group dicts copied with their "params"
    made lists, whether any torch tensor is among them). A tensor, a module or a set is a TypeError here, with
    torch's words."""
    if is_tensor(params):
        raise TypeError(NONE_ITERABLE.format(_typename(params)))
    if is_module(params):
        raise TypeError(f"{owner}: params is a torch.nn.Module ({type(params).__name__}); pass model.parameters() "
                        "(or model.named_parameters())")
    if isinstance(params, dict):
        return params, any(is_tensor(v) for v in params.values())
    if isinstance(params, (set, frozenset)):
        raise TypeError("optimizer parameters need to be organized in ordered collections, but the ordering of "
                        "tensors in sets will change between runs. Please use a list instead.")
    if not isinstance(params, (list, tuple)):
        try:
            params = list(params)
        except TypeError:
            return params, False  # (parse_params says what it must be)
    out, found = [], False
    for x in params:
        if isinstance(x, dict) and "params" in x:
            g = x["params"]
            if not (is_tensor(g) or isinstance(g, (dict, list, tuple, set, frozenset))):
                g = list(g)
            if isinstance(g, (set, frozenset)):
                materialize(owner, g)
            x = dict(x, params=g)
            found = found or is_tensor(g) or any(is_tensor(v) for v in (g.values() if isinstance(g, dict) else
                                                                          ([g] if is_tensor(g) else g)))
        elif isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], str):
            found = found or is_tensor(x[1])
        else:
            found = found or is_tensor(x)
        out.append(x)
    return out, found


def _named(owner: str, items, counter: list, named_groups: list) -> dict:
    """One group's ``params`` -> {name: tensor or array}: a dict as it is, else tensors (numbered by ``counter``,
    which counts every entry as torch's state-dict indices do) or (name, tensor) pairs, all named or none."""
    if isinstance(items, dict):
        return dict(items)
    if is_tensor(items):
        items = [items]
    pairs = [isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], str) for x in items]
    if any(pairs) and not all(pairs):
        raise ValueError("all optimizer params should be with/without names. Some param names are missing")
    if items and named_groups and named_groups[0] != all(pairs):
        raise ValueError("all optimizer param groups should be with/without names. cannot add param group "
                         f"{'with' if all(pairs) else 'without'} names to the optimizer")
    if items:
        named_groups.append(all(pairs))
    out, seen = {}, set()
    for x in items:
        name, t = x if isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], str) else (str(counter[0]), x)
        counter[0] += 1
        if is_tensor(t) and id(t) in seen:
            continue  # (torch warns; the group steps it once)
        seen.add(id(t))
        if name in out:
            raise ValueError(f"{owner}: tensor {name!r} appears more than once in the params")
        out[name] = t
    if len(seen) < len(items):
        warnings.warn("optimizer contains a parameter group with duplicate parameters; in future, this will cause "
                      "an error; see github.com/pytorch/pytorch/issues/40967 for more information", stacklevel=4)
    return out


def check_tensor(owner: str, name: str, t) -> None:
    """What torch refuses in a parameter, with torch's words (and the tensor's name)."""
    if t.layout != _torch().strided:
        raise ValueError(f"{owner} requires dense parameter tensors ({name!r} is {t.layout})")
    if not (t.is_leaf or t.retains_grad):
        raise ValueError(f"can't optimize a non-leaf Tensor ({owner}: {name!r} was computed from other tensors; pass "
                         "the leaf, or tensor.detach().requires_grad_())")


def from_torch(owner: str, params):
    """(params with torch tensors replaced by NumPy views and iterables by dicts, {name: tensor}); the second is
    empty when no torch tensor was passed (then the params come back as they were, iterators made lists)."""
    params, found = materialize(owner, params)
    if not found:
        return params, {}
    if isinstance(params, dict):
        groups, single = [{"params": params}], True
    elif params and all(isinstance(g, dict) for g in params):
        groups, single = [dict(g) for g in params], False
    else:
        groups, single = [{"params": params}], True
    counter, tensors, named_groups = [0], {}, []
    for g in groups:
        if "params" not in g:
            raise TypeError(f"{owner}: a param group must be a dict with 'params'")
        named = _named(owner, g["params"], counter, named_groups)
        for n, t in named.items():
            if not is_tensor(t):
                raise TypeError(f"optimizer can only optimize Tensors, but one of the params is {_typename(t)} "
                                f"({owner}: {n!r}; pass all params as torch tensors or all as arrays)")
            if n in tensors:
                raise ValueError(f"{owner}: tensor {n!r} appears more than once in the params")
            if any(u is t for u in tensors.values()):
                raise ValueError(f"some parameters appear in more than one parameter group ({owner}: {n!r})")
            check_tensor(owner, n, t)
            tensors[n] = t
        g["params"] = {n: numpy_view(owner, n, t) for n, t in named.items()}
    return (groups[0]["params"] if single else groups), tensors


def torch_grad(owner: str, name: str, t):
    """A tensor's ``.grad`` as ``step`` takes it: a NumPy view, or a sparse COO grad as a RowSparse."""
    from .sparse import RowSparse
    g = t.grad
    if g.is_sparse:
        return RowSparse.from_torch(g)
    # (a non-contiguous grad made contiguous by torch, on all its threads: the upload needs one flat copy anyway)
    return numpy_view(owner, name, g if g.is_contiguous() else g.contiguous(), "grad of")


def dense_copy(dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[...] = src`` for a strided ``dst`` (a transposed or channels-last tensor's storage): by torch, both
    permuted so that ``dst`` is walked in memory order (torch's copy is threaded; NumPy's strided copyto is not)."""
    torch = _torch()
    if dst.dtype.kind not in "fc" or dst.dtype.itemsize not in (4, 8) or dst.ndim < 2:
        np.copyto(dst, src)  # (16-bit dtypes by NumPy: torch has no ml_dtypes.bfloat16)
        return
    d, s = torch.from_numpy(dst), torch.from_numpy(np.ascontiguousarray(src).reshape(dst.shape))
    perm = sorted(range(dst.ndim), key=lambda i: -dst.strides[i])
    d.permute(perm).copy_(s.permute(perm))


class TorchParams:
    """What an optimizer built from torch tensors does around a step (mixed into the GPU classes and the twins,
    which provide ``read_params(out=)`` and ``_upload_params``: ``write_params`` without the write-back)."""

    _torch: dict = {}

    def _bind_torch(self, owner: str, params):
        params, self._torch = from_torch(owner, params)
        spec = getattr(self, "spec", None) or self
        if not spec.supports_complex and any(t.is_complex() for t in self._torch.values()):
            raise spec.complex_refusal(f"{owner} does not support complex parameters")
        self._torch_views, self._torch_seen = {}, {}
        if self._torch:
            self._torch_mark()
        return params

    def _torch_mark(self) -> None:
        """Views of the tensors' storage now, and their version counters (what a later change is told by)."""
        for n, t in self._torch.items():
            self._torch_views[n] = numpy_view(type(self).__name__, n, t)
            self._torch_seen[n] = (t._version, t.data_ptr())

    def torch_grads(self) -> dict:
        """Built from torch tensors: the grads ``step()`` would take now (each tensor's ``.grad``, a sparse one as a
        RowSparse; tensors changed in torch since are uploaded first); ``{}`` otherwise. For code that steps this
        optimizer among others through ``rlx_gpu.engine.StepGroup`` (Partition)."""
        return (self._torch_prologue(None, None)[1] or {}) if self._torch else {}

    def torch_write_back(self) -> None:
        """Built from torch tensors: the device's values into the tensors (what ``step()`` does after a step), for
        code that steps this optimizer through ``rlx_gpu.engine.StepGroup``; nothing otherwise."""
        self._torch_epilogue()

    def _torch_prologue(self, grads, closure):
        """(closure's loss, grads): runs the closure (grad enabled for torch), uploads tensors changed in torch,
        and with no grads given takes each tensor's ``.grad``."""
        if callable(grads) and closure is None:
            closure, grads = grads, None
        loss = None
        if closure is not None:
            if self._torch:
                with _torch().enable_grad():
                    loss = closure()
            else:
                loss = closure()
        if not self._torch:
            return loss, grads
        if grads is None:  # (first: a grad that cannot be used is an error before anything is uploaded)
            grads = {n: torch_grad(type(self).__name__, n, t) for n, t in self._torch.items() if t.grad is not None}
        changed = {n: t for n, t in self._torch.items() if (t._version, t.data_ptr()) != self._torch_seen[n]}
        if changed:
            views = {n: numpy_view(type(self).__name__, n, t) for n, t in changed.items()}
            self._upload_params(views)  # (checked first; the step's write-back notes the versions)
            self._torch_views.update(views)  # (the tensors' storage now: a new .data moves it)
        return loss, grads

    def _torch_epilogue(self, names=None) -> None:
        """The device's values into the tensors' storage (one transfer; all, or ``names``; a non-contiguous tensor
        through a copy), their version counters bumped as an in-place update would, and noted."""
        if not self._torch:
            return
        names = list(self._torch) if names is None else list(names)
        views = {n: self._torch_views[n] for n in names}
        direct = {n: v for n, v in views.items() if v.flags.c_contiguous}
        if direct:
            self.read_params(out=direct)
        strided = [n for n in names if n not in direct]
        for n, a in (self.read_params(strided) if strided else {}).items():
            dense_copy(views[n], a)
        bump = getattr(_torch().autograd.graph, "increment_version", None)
        for n in names:
            t = self._torch[n]
            if bump is not None:
                bump(t)
            self._torch_seen[n] = (t._version, t.data_ptr())

    def _torch_clip(self, max_norm, norm_type) -> float:
        """torch's clip_grad_norm_ on the tensors' ``.grad`` (in place, through NumPy views); the total norm."""
        from .numerics import host_clip_
        return host_clip_([numpy_view(type(self).__name__, n, t.grad, "grad of") for n, t in self._torch.items()
                           if t.grad is not None], max_norm, norm_type)

    def _torch_zero_grad(self, set_to_none: bool) -> bool:
        """torch's zero_grad on the tensors' ``.grad``; False when the optimizer was not built from tensors."""
        if not self._torch:
            return False
        for t in self._torch.values():
            if t.grad is not None:
                if set_to_none:
                    t.grad = None
                else:
                    if t.grad.grad_fn is not None:
                        t.grad.detach_()
                    else:
                        t.grad.requires_grad_(False)
                    t.grad.zero_()
        return True
