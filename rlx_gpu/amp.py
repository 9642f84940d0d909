"""``rlx_gpu.amp``: the public path of :mod:`rlx_gpu.addons.amp` (this name is that module)."""
import sys

from .addons import amp as _module

sys.modules[__name__] = _module
