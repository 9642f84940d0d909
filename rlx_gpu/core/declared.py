"""The declarations a package's modules hold: what ``rlx_gpu.optim`` and ``rlx_gpu.reference`` export (their
``__all__`` is derived from it, so adding an optimizer is adding its module)."""
from __future__ import annotations

import importlib
import pkgutil

__all__ = ["declared"]


def declared(package: str, path, keep) -> dict:
    """``name -> class`` for the public classes defined in the modules of ``package`` (its ``__path__``) for which
    ``keep(cls)`` holds, every module imported, by name."""
    out = {}
    for m in sorted(pkgutil.iter_modules(path), key=lambda m: m.name):
        mod = importlib.import_module(f"{package}.{m.name}")
        out.update({n: c for n, c in vars(mod).items() if isinstance(c, type) and c.__module__ == mod.__name__
                    and not n.startswith("_") and keep(c)})
    return dict(sorted(out.items()))
