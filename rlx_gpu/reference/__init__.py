"""NumPy twins of every GPU optimizer: same constructor, ``step``, ``params``, ``param_groups``,
``state_dict`` and ``load_state_dict``, in float32 following torch.optim's order of operations.
They are the specification the GPU kernels are tested against.

Every module of this package is imported and its twins exported (a class with its own ``defaults``), with
:class:`Partition` and the base :class:`ReferenceOptimizer`: a new twin is a new module, with no list to extend here."""
import importlib as _importlib
import pkgutil as _pkgutil

from .base import ReferenceOptimizer
from .partition import Partition


def _twins() -> dict:
    """name -> class: the twins declared in this package's modules."""
    out = {}
    for m in sorted(_pkgutil.iter_modules(__path__), key=lambda m: m.name):
        mod = _importlib.import_module(f"{__name__}.{m.name}")
        out.update({n: c for n, c in vars(mod).items() if isinstance(c, type) and c.__module__ == mod.__name__
                    and issubclass(c, ReferenceOptimizer) and "defaults" in vars(c) and not n.startswith("_")})
    return dict(sorted(out.items()))


_found = _twins()
globals().update(_found)
__all__ = list(_found) + ["Partition", "ReferenceOptimizer"]
