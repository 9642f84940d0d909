"""NumPy twins of every GPU optimizer: same constructor, ``step``, ``params``, ``param_groups``,
``state_dict`` and ``load_state_dict``, in float32 following torch.optim's order of operations.
They are the specification the GPU kernels are tested against.

Every module of this package is imported and its twins exported (a class with its own ``defaults``), with
:class:`Partition` and the base :class:`ReferenceOptimizer`: a new twin is a new module, with no list to extend here."""
from ..core.declared import declared as _declared
from .base import ReferenceOptimizer
from .partition import Partition

_found = _declared(__name__, __path__, lambda c: issubclass(c, ReferenceOptimizer) and "defaults" in vars(c))
globals().update(_found)
__all__ = list(_found) + ["Partition", "ReferenceOptimizer"]
