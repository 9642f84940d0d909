"""``rlx_gpu.torch``: the public path of :mod:`rlx_gpu.addons.torch` (this name is that module)."""
import sys

from .addons import torch as _module

sys.modules[__name__] = _module
