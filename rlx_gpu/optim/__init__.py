"""The GPU optimizers, each a declaration on the engine: its NumPy twin (``rlx_gpu.reference``), record fields
and their fill, passes, and a WGSL update function in ``shaders/``.

Every module of this package is imported and its declarations exported (a class with its own ``spec``): adding an
optimizer is adding its module, with no list to extend here (``tests/test_optimizer_db.py`` checks the exports
against the declarations in the source)."""
from ..core.declared import declared as _declared

_found = _declared(__name__, __path__, lambda c: "spec" in vars(c))
globals().update(_found)
__all__ = list(_found)
