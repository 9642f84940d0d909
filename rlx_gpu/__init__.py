"""rlx_gpu: deep-learning optimizers as WGSL compute shaders on any WebGPU adapter.

GPU optimizers: :class:`Adam`, :class:`AdamW`, :class:`SGD`, :class:`RMSprop`, :class:`Adagrad`,
:class:`LAMB`, :class:`NAdamW`, :class:`RAdam`, :class:`QHAdamW`, :class:`Lion`, :class:`SophiaH`, :class:`Mars`, :class:`Adafactor`. NumPy twins with the same API: :mod:`rlx_gpu.reference`.
"""
from . import reference, schedules
from .adafactor import Adafactor
from .adagrad import Adagrad
from .adam import Adam, AdamW
from .amp import GradScaler
from .arena import DeviceTensor
from .clip import clip_grad_norm, global_grad_clip_scale, l2_norm
from .device import Device, DeviceLostError, NoAdapterError, adapters, get_device
from .lamb import LAMB
from .lion import Lion
from .mars import Mars
from .nadam import NAdamW
from .optimizer import Optimizer
from .qhadam import QHAdamW
from .radam import RAdam
from .rmsprop import RMSprop
from .sgd import SGD
from .sophia import SophiaH

__version__ = "0.1.0"
__all__ = ["Adam", "AdamW", "SGD", "RMSprop", "Adagrad", "LAMB", "NAdamW", "RAdam", "QHAdamW", "Lion", "SophiaH", "Mars", "Adafactor",
           "Optimizer", "DeviceTensor", "clip_grad_norm", "global_grad_clip_scale", "l2_norm",
           "GradScaler", "Device", "DeviceLostError", "NoAdapterError",
           "adapters", "get_device", "reference"]
