"""The GPU optimizers, each a declaration on the engine: its NumPy twin (``rlx_gpu.reference``), record fields
and their fill, passes, and a WGSL update function in ``shaders/``.

Every module of this package is imported and its declarations exported (a class with its own ``spec``): adding an
optimizer is adding its module, with no list to extend here (``tests/test_layers.py`` checks the exports against the
declarations in the source)."""
import importlib as _importlib
import pkgutil as _pkgutil


def _declarations() -> dict:
    """name -> class: the optimizers declared in this package's modules, by name."""
    out = {}
    for m in sorted(_pkgutil.iter_modules(__path__), key=lambda m: m.name):
        mod = _importlib.import_module(f"{__name__}.{m.name}")
        out.update({n: c for n, c in vars(mod).items() if isinstance(c, type) and c.__module__ == mod.__name__
                    and "spec" in vars(c) and not n.startswith("_")})
    return dict(sorted(out.items()))


_found = _declarations()
globals().update(_found)
__all__ = list(_found)
