"""``rlx_gpu.interop``: the public path of :mod:`rlx_gpu.addons.interop` (this name is that module)."""
import sys

from .addons import interop as _module

sys.modules[__name__] = _module
