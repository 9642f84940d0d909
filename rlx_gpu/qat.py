"""``rlx_gpu.qat``: the public path of :mod:`rlx_gpu.addons.qat` (this name is that module)."""
import sys

from .addons import qat as _module

sys.modules[__name__] = _module
