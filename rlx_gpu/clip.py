"""``rlx_gpu.clip``: the public path of :mod:`rlx_gpu.addons.clip` (this name is that module)."""
import sys

from .addons import clip as _module

sys.modules[__name__] = _module
