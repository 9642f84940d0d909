"""Gradient-norm reductions on the device: the clip folded into a step, the stand-alone clip, the inf/NaN check.

``shaders/clip.wgsl`` over every bucket's grads (a module per grad dtype): per-block partial sums over the block
tables (when only some tensors count), or whole chunks with a fixed grid (when every tensor counts: padding is
zero), then one workgroup combines every slot into the global record (the clip factor, the total norm, or the
non-finite flag). No float atomics; nothing is read back.
"""
from __future__ import annotations

import numpy as np

from ..core.numerics import NORM_KINDS, check_max_norm, norm_kind
from ..core.sync import locked
from ..runtime.kernels import get_kernel
from .codegen import engine_module


class ReduceMixin:
    """Clipping and the inf/NaN check of the GPU optimizers."""

    CLIP_SHAPE = (256, 2)  # workgroup size, vec4s per thread of the reduction over the block table (same block size)
    CLIP_BPW = 4           # blocks per workgroup in that reduction
    CLIP_FLAT_WGS = 1024   # workgroups per chunk of the flat reduction (every tensor counted); PERF_NOTES.md 19
    CLIP_FLAT_U = 8        # vec4 loads per thread per round of the flat reduction

    def _init_reductions(self):
        self._norm_taken = False  # whether the last step (or stand-alone clip) computed a gradient norm
        self._clipk: dict = {}
        self._clip_scratch = None

    def _clip_kernels(self, bucket, check: bool, norm: bool = True):
        """clip.wgsl's kernels for this bucket's grad dtype: the inf/NaN flag with ``check``, the norm and the clip
        factor with ``norm`` (a checked, clipped step takes both in one read of the grads)."""
        wg, ept = self.CLIP_SHAPE if self.CLIP_SHAPE[0] * self.CLIP_SHAPE[1] == self.WG * self.EPT \
            else (self.WG, self.EPT)  # the same block size as the optimizer's block tables
        key = (bucket.sig.grad.name, check, norm)
        if key not in self._clipk:
            code = engine_module("clip.wgsl", self.record, bucket.sig.grad, self.device.native_f16)
            self._clipk[key] = {e: get_kernel(self.device, f"clip.wgsl:{bucket.sig.grad.name}", code, e, WG=wg,
                                              EPT=ept, BPW=self.CLIP_BPW, U=self.CLIP_FLAT_U, CHECK=check, NORM=norm)
                                for e in ("partial", "flat", "total", "scale")}
        if self._clip_scratch is None:
            # one (partial, flag) slot of 8 bytes per block
            self._clip_scratch = self.device.buffer(8 * max(1, self._total_blocks), f"{type(self).__name__}.clip")
            # the flat pass writes one slot per workgroup into its chunk's region (aligned for the binding), in a
            # buffer of its own: the total combines every slot, so neither pass may see the other's old values
            al = max(1, self.device.alignment // 8)
            self._flat = []  # (bucket, chunk, workgroups, first slot)
            off = 0
            for b in self.buckets:
                for c, n in enumerate(b.layout.chunk_elems):
                    w = min(self.CLIP_FLAT_WGS, -(-n // (4 * wg * self.CLIP_FLAT_U)))
                    self._flat.append((b, c, w, off))
                    off += -(-w // al) * al
            self._flat_scratch = self.device.buffer(8 * max(1, off), f"{type(self).__name__}.clip_flat")
        return self._clipk[key]

    def _clip_binds(self, check: bool, norm: bool, flat: bool) -> tuple[list, object]:
        """(per-chunk (kernels, bind group, groups) of the partial or flat pass, (kernel, bind group) of the total)."""
        key = ("clip", check, norm, flat)
        if key not in self._binds:
            self._clip_kernels(self.buckets[0], check, norm)  # (makes the scratch buffers)
            per = []
            if flat:
                for b, c, w, off in self._flat:
                    k = self._clip_kernels(b, check, norm)
                    bind = k["flat"].bind({"hyper": self._hyper, "grad": b.grad.buffers[c],
                                           "scratch": (self._flat_scratch, 8 * off, 8 * w)})
                    per.append((k["flat"], bind, w))
                scratch = self._flat_scratch
            else:
                for b in self.buckets:
                    k = self._clip_kernels(b, check, norm)
                    for c, blk in enumerate(b.layout.blocks):
                        bind = k["partial"].bind({"hyper": self._hyper, "blocks": b.blocks[c], "grad": b.grad.buffers[c],
                                                  "scratch": self._clip_scratch})
                        per.append((k["partial"], bind, -(-len(blk) // self.CLIP_BPW)))
                scratch = self._clip_scratch
            k = self._clip_kernels(self.buckets[0], check, norm)
            self._binds[key] = per, (k["total"], k["total"].bind({"hyper": self._hyper, "scratch": scratch}))
        return self._binds[key]

    def _encode_clip(self, enc, scale_grads: bool, flat: bool = False, check: bool = False, norm: bool = True):
        """Into the global record: with ``norm`` the total norm and the clip factor, with ``check`` the inf/NaN
        flag (both from one read of the grads). ``flat`` when every tensor counts: whole chunks are reduced without
        the block tables (padding is zero). ``scale_grads``: multiply the grads by the factor (stand-alone clip)."""
        per, (tk, tb) = self._clip_binds(check, norm, flat)
        for k, bind, groups in per:
            k.dispatch(enc, bind, groups)
        tk.dispatch(enc, tb, 1)
        if scale_grads:
            for b in self.buckets:
                k = self._clip_kernels(b, check, norm)["scale"]
                for c, blk in enumerate(b.layout.blocks):
                    key = ("clip-scale", id(b), c)
                    if key not in self._binds:
                        self._binds[key] = k.bind({"hyper": self._hyper, "blocks": b.blocks[c], "grad": b.grad.buffers[c]})
                    k.dispatch(enc, self._binds[key], len(blk))

    def _set_global(self, **values) -> None:
        g = self.record.pack_global(**values)
        self.device.queue.write_buffer(self._hyper, 4 * self.record.size * len(self._names), g)

    def _global_word(self, name: str, dtype) -> float:
        out = np.empty(1, dtype)
        off = 4 * (self.record.size * len(self._names) + self.record.global_word(name))
        self.device.read(self._hyper, off, 4, out=out)
        return out[0]

    @locked
    def clip_grads(self, max_norm, norm_type=2.0) -> float:
        """Clip the device gradient slots in place to a global norm of ``max_norm`` (torch's clip_grad_norm_:
        norm types 2, 1, inf or any p > 0); return the total norm. What :func:`rlx_gpu.clip_grad_norm` calls. Built
        from torch tensors: their ``.grad`` (the next step reads those)."""
        check_max_norm(max_norm)
        kind, p = norm_kind(norm_type)
        if self._torch:  # built from torch tensors: the grads to clip are their .grad
            return self._torch_clip(max_norm, norm_type)
        self._settle()
        self._set_global(grad_mul=1.0, inv_scale=1.0, max_norm=float(max_norm), norm_kind=kind, norm_p=p, count_all=1)
        enc = self.device.device.create_command_encoder()
        self._encode_clip(enc, scale_grads=True, flat=True)
        self.device.submit(enc)
        self._norm_taken = True
        return self.last_grad_norm()

    @locked
    def last_grad_norm(self) -> float | None:
        """The total gradient norm the last step's clip (``clip_grad_norm=``) or the last :meth:`clip_grads`
        computed on the device (reads 4 bytes back); NaN after a step skipped on its inf/NaN check; None when the
        last step clipped nothing (clipping off, a fresh or loaded optimizer)."""
        if not self._norm_taken:
            return None
        return float(self._global_word("total_norm", np.float32))

    def _scratch_bytes(self) -> int:
        if self._clip_scratch is None:
            return 0
        return self._clip_scratch.size + self._flat_scratch.size


assert (NORM_KINDS["l2"], NORM_KINDS["l1"], NORM_KINDS["inf"], NORM_KINDS["p"]) == (0, 1, 2, 3)  # clip.wgsl's
