"""PyTorch tensors as parameters, without importing torch: every optimizer (GPU class or twin) accepts what
torch.optim accepts, and with CPU torch tensors behaves as a torch optimizer does.

Accepted ``params``: ``model.parameters()`` (names "0", "1", ... as torch numbers them), ``model.named_parameters()``,
a dict name -> tensor, or param groups whose ``"params"`` are any of these (unnamed tensors are numbered across
groups, as torch does); float32, float16 or bfloat16 CPU tensors. torch is only looked up in ``sys.modules``: a
caller who passes torch tensors has imported it.

An optimizer built from torch tensors (:class:`TorchParams`): ``step()`` with no grads takes each tensor's ``.grad``
(None: no grad, as torch), and afterwards the tensors hold the updated values, written into their storage through
zero-copy NumPy views in one transfer; a tensor changed in torch since (its version counter or its storage moved)
is uploaded again first (with master weights, its master copy restarts from it, as for ``write_params``). An
edit through ``p.data`` in place bypasses torch's version counter and is not seen: edit ``p`` under
``torch.no_grad()``, or call ``opt.write_params``. Each step bumps the tensors' version counters, as torch's
in-place update does (autograd then refuses a graph built before the step). ``write_params`` and ``restore``
write into the tensors too. ``zero_grad()`` sets ``.grad`` to None (or zeroes it with ``set_to_none=False``);
``step(closure)`` calls the closure with grad enabled and returns its loss; clipping (``rlx_gpu.clip_grad_norm``,
``clip_grads``) clips the tensors' ``.grad``.
"""
from __future__ import annotations

import sys

_FLOATS = ("torch.float32", "torch.float16", "torch.bfloat16")


def _torch():
    return sys.modules.get("torch")


def is_tensor(x) -> bool:
    t = _torch()
    return t is not None and isinstance(x, t.Tensor)


def numpy_view(owner: str, name: str, t, what: str = "tensor"):
    """A zero-copy NumPy view of CPU tensor ``t`` (bfloat16 as ``ml_dtypes.bfloat16``); TypeError otherwise."""
    if t.device.type != "cpu":
        raise TypeError(f"{owner}: {what} {name!r} is on {t.device}; rlx_gpu takes CPU torch tensors (it keeps its "
                        "own copy on its device and writes the result back)")
    if str(t.dtype) not in _FLOATS:
        raise TypeError(f"{owner}: {what} {name!r} has dtype {t.dtype}, expected torch.float32, float16 or bfloat16")
    if not t.is_contiguous():
        raise TypeError(f"{owner}: {what} {name!r} is not contiguous; pass tensor.contiguous()")
    t = t.detach()
    if str(t.dtype) == "torch.bfloat16":
        import ml_dtypes
        return t.view(_torch().int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def _named(owner: str, items, counter: list) -> dict:
    """``items`` (a dict, a tensor, or an iterable of tensors or of (name, tensor) pairs) -> {name: tensor or array}
    (a tensor alone is one parameter, as torch takes ``{"params": tensor}``)."""
    if isinstance(items, dict):
        return dict(items)
    if is_tensor(items):
        items = [items]
    out = {}
    for x in items:
        if isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], str):
            name, t = x
        else:
            name, t = str(counter[0]), x
        counter[0] += 1
        if name in out:
            raise ValueError(f"{owner}: tensor {name!r} appears more than once in the params")
        out[name] = t
    return out


def from_torch(owner: str, params):
    """(params with torch tensors replaced by NumPy views and iterables by dicts, {name: tensor}); the second is
    empty when no torch tensor was passed (then a dict of arrays or a list of groups comes back as it was)."""
    if is_tensor(params):
        raise TypeError(f"{owner}: params must be an iterable of tensors (model.parameters()), a dict name -> "
                        f"tensor or a list of param groups, not a tensor; pass [tensor]")
    if isinstance(params, dict):
        if not any(is_tensor(v) for v in params.values()):
            return params, {}
        groups, single = [{"params": params}], True
    else:
        if not isinstance(params, (list, tuple)):
            params = list(params)  # model.parameters() / named_parameters(): generators
        if params and all(isinstance(g, dict) for g in params):
            if all(isinstance(g.get("params"), dict) and not any(is_tensor(v) for v in g["params"].values())
                   for g in params):
                return params, {}
            groups, single = [dict(g) for g in params], False
        else:
            groups, single = [{"params": params}], True
    counter, tensors = [0], {}
    for g in groups:
        if "params" not in g:
            raise TypeError(f"{owner}: a param group must be a dict with 'params'")
        named = _named(owner, g["params"], counter)
        for n, t in named.items():
            if is_tensor(t):
                if n in tensors:
                    raise ValueError(f"{owner}: tensor {n!r} appears more than once in the params")
                same = next((m for m, u in tensors.items() if u is t), None)
                if same is not None:
                    raise ValueError(f"{owner}: one tensor is passed twice, as {same!r} and {n!r}")
                tensors[n] = t
        g["params"] = {n: (numpy_view(owner, n, t) if is_tensor(t) else t) for n, t in named.items()}
    if tensors and len(tensors) != sum(len(g["params"]) for g in groups):
        bad = next(n for g in groups for n in g["params"] if n not in tensors)
        raise TypeError(f"{owner}: tensor {bad!r} is not a torch tensor among torch tensors; pass all params as torch "
                        "tensors or all as arrays")
    return (groups[0]["params"] if single else groups), tensors


class TorchParams:
    """What an optimizer built from torch tensors does around a step (mixed into the GPU classes and the twins,
    which provide ``read_params(out=)`` and ``_upload_params``: ``write_params`` without the write-back)."""

    _torch: dict = {}

    def _bind_torch(self, owner: str, params):
        params, self._torch = from_torch(owner, params)
        self._torch_views, self._torch_seen = {}, {}
        if self._torch:
            self._torch_mark()
        return params

    def _torch_mark(self) -> None:
        """Views of the tensors' storage now, and their version counters (what a later change is told by)."""
        for n, t in self._torch.items():
            self._torch_views[n] = numpy_view(type(self).__name__, n, t)
            self._torch_seen[n] = (t._version, t.data_ptr())

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
            from .sparse import RowSparse  # (a sparse .grad, nn.Embedding(sparse=True)'s, as a RowSparse)
            grads = {n: (RowSparse.from_torch(t.grad) if t.grad.is_sparse
                         else numpy_view(type(self).__name__, n, t.grad, "grad of"))
                     for n, t in self._torch.items() if t.grad is not None}
        changed = {n: t for n, t in self._torch.items() if (t._version, t.data_ptr()) != self._torch_seen[n]}
        if changed:
            views = {n: numpy_view(type(self).__name__, n, t) for n, t in changed.items()}
            self._upload_params(views)  # (checked first; the step's write-back notes the versions)
            self._torch_views.update(views)  # (the tensors' storage now: a new .data moves it)
        return loss, grads

    def _torch_epilogue(self, names=None) -> None:
        """The device's values into the tensors' storage (one transfer; all, or ``names``), their version counters
        bumped as an in-place update would, and noted."""
        if not self._torch:
            return
        names = list(self._torch) if names is None else list(names)
        self.read_params(out={n: self._torch_views[n] for n in names})
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
                    t.grad.detach_()
                    t.grad.zero_()
        return True
