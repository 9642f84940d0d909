"""The add-ons: what is built on the public engine API around an optimizer's step (clipping, loss scaling, LR
schedules, several optimizers in one step, torch's optimizer type and state-dict format, several GPUs).
``rlx_gpu.clip``, ``rlx_gpu.amp``, ``rlx_gpu.schedules``, ``rlx_gpu.interop``, ``rlx_gpu.torch``,
``rlx_gpu.distributed`` and ``rlx_gpu.compression`` are their public paths."""
