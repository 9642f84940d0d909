"""``rlx_gpu.distributed``: the public path of :mod:`rlx_gpu.addons.distributed` (this name is that module)."""
import sys

from .addons import distributed as _module

sys.modules[__name__] = _module
