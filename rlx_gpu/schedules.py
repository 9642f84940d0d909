"""``rlx_gpu.schedules``: the public path of :mod:`rlx_gpu.addons.schedules` (this name is that module)."""
import sys

from .addons import schedules as _module

sys.modules[__name__] = _module
