"""``rlx_gpu.compression``: the public path of :mod:`rlx_gpu.addons.distributed.compression` (this name is that
module)."""
import sys

from .addons.distributed import compression as _module

sys.modules[__name__] = _module
