"""The runtime: adapters and devices, host transfers, layouts, typed arenas, WGSL sources and pipelines. It knows
nothing of optimizers; the engine (``rlx_gpu.engine``) builds on it."""
from .arena import Arena, DeviceTensor
from .device import Device, DeviceLostError, NoAdapterError, adapters, get_device
from .kernels import ComputePass, Kernel, get_kernel, grid, shipped_kernel
from .layout import Layout
from .implementation import set_implementation
from .program import Program

__all__ = ["Arena", "DeviceTensor", "Device", "DeviceLostError", "NoAdapterError", "adapters", "get_device",
           "ComputePass", "Kernel", "get_kernel", "grid", "shipped_kernel", "Layout", "Program",
           "set_implementation"]
