"""Several GPU optimizers stepped as one: one command buffer, one submission, one global clip and one inf/NaN
verdict over all of them (what :class:`rlx_gpu.Partition` is built on).

    group = StepGroup([muon, adamw])
    group.step({muon: grads_a, adamw: grads_b})    # None as grads: from that optimizer's device grad slots

A step checks every optimizer's grads first (nothing is recorded if any is wrong), then records each one's grad
uploads and its pass over the grads (its norm, its inf/NaN check), then one dispatch (``shaders/partition.wgsl``)
that makes the clip's norm global (the square root of the sum of the squared norms: every optimizer's grads are
clipped by the same factor) and the skip verdict global (an inf or NaN in any optimizer's grads skips every one),
then each one's update gated on it, and submits once.
"""
from __future__ import annotations

from ..core.numerics import check_device_loss_scale
from ..runtime.kernels import shipped_kernel
from ..runtime.params import Params, declare
from .optimizer import Optimizer

__all__ = ["StepGroup"]

MAX_MEMBERS = 4  # (the combine pass binds four record buffers)
# The combine pass's parameters (shaders/partition.wgsl reads them by name): the members, whether the clip's norm is
# made global and its maximum, the global record's words it reads and writes, and each member's global record base.
COMBINE = Params("CombineParams", "parts", "with_norm", "max_norm:f32", "grad_mul", "total_norm", "nonfinite",
                 "inv_scale", tail="base")
declare("partition.wgsl", COMBINE)


class StepGroup:
    """GPU optimizers (1 to 4, on one device) stepped in one submission. They share ``clip_grad_norm`` (None, or the
    global norm's maximum) and ``skip_nonfinite``, which are read from them at each step and must agree."""

    def __init__(self, optimizers):
        opts = list(optimizers)
        if not 1 <= len(opts) <= MAX_MEMBERS:
            raise ValueError(f"StepGroup: 1 to {MAX_MEMBERS} optimizers, got {len(opts)}")
        for o in opts:
            if not isinstance(o, Optimizer):
                raise TypeError(f"StepGroup: expected GPU optimizers (rlx_gpu.Optimizer), got {type(o).__name__}")
        if len({id(o) for o in opts}) != len(opts):
            raise ValueError("StepGroup: an optimizer appears more than once")
        dev = opts[0].device
        if any(o.device.device is not dev.device for o in opts):
            raise ValueError("StepGroup: every optimizer must be on one device, got "
                             f"{sorted({o.device.name for o in opts})}")
        self.optimizers, self.device = opts, dev
        self._combine = shipped_kernel(dev, "partition.wgsl", "combine")
        self._dummies = [dev.buffer(16, "StepGroup.no-member") for _ in range(MAX_MEMBERS)]
        self._prm = self._bind = None

    def _shared(self, members) -> tuple:
        """(clip_grad_norm, skip_nonfinite) of the members, which must agree."""
        got = {(o.clip_grad_norm, bool(o.skip_nonfinite)) for o in members}
        if len(got) != 1:
            raise ValueError("StepGroup: the optimizers must share clip_grad_norm and skip_nonfinite, got "
                             f"{sorted(got, key=repr)}")
        return got.pop()

    def step(self, grads: dict, *, loss_scale=None) -> list:
        """One step of the optimizers in ``grads`` (optimizer -> its grads as its ``step`` takes them, or None for
        its device grad slots; members left out are not stepped) in one submission; their Outcomes, in the
        group's order. ``loss_scale``: a device loss scale (rlx_gpu.GradScaler passes itself), for every member."""
        unknown = [o for o in grads if not any(o is m for m in self.optimizers)]
        if unknown:
            raise ValueError(f"StepGroup.step: {type(unknown[0]).__name__} is not a member of this group")
        members = [o for o in self.optimizers if o in grads]
        if not members:
            return []
        check_device_loss_scale("StepGroup", loss_scale)
        clip, skip = self._shared(members)
        check = skip or loss_scale is not None
        for o in members:
            o.lock.acquire()
        try:
            actives = [o._begin_checks(grads[o], check) for o in members]  # (everything checked first)
            enc = self.device.device.create_command_encoder()
            states = []
            for i, (o, active) in enumerate(zip(members, actives)):
                st = o._step_begin(enc, grads[o], active, check, loss_scale, pending=(i == 0))
                o._step_suspend(st)
                states.append(st)
            if len(members) > 1 and (check or clip is not None):
                self._record_combine(enc, members, clip)
            outs = [o._step_end(enc, st, submit=False) for o, st in zip(members, states)]
            members[0]._submit(enc)
            for o, st in zip(members, states):
                o._step_submitted(st)
            if loss_scale is not None:
                loss_scale.committed()
            for o in members:
                o._after_submit()
        finally:
            for o in members:
                o.lock.release()
        return outs

    def _record_combine(self, enc, members, clip) -> None:
        """The dispatch that makes the members' norms and inf/NaN flags global (into every member's record)."""
        rec = members[0].record
        key = (rec, clip, tuple(o.record.size * len(o._names) for o in members))
        if self._prm is None or self._prm[1] != key:  # (packed again only when the members or the clip change)
            prm = COMBINE.pack(parts=len(members), with_norm=int(clip is not None), max_norm=clip or 0.0,
                               **{w: rec.global_word(w) for w in ("grad_mul", "total_norm", "nonfinite", "inv_scale")},
                               base=list(key[2]))
            self._prm = (self.device.buffer(prm.nbytes, "StepGroup.prm", data=prm), key)
        hyp = [o._hyper for o in members] + self._dummies[len(members):]
        key = tuple(id(h) for h in hyp) + (id(self._prm[0]),)
        if self._bind is None or self._bind[0] != key:
            self._bind = (key, self._combine.bind({"h0": hyp[0], "h1": hyp[1], "h2": hyp[2], "h3": hyp[3],
                                                   "prm": self._prm[0]}))
        self._combine.dispatch(enc, self._bind[1], 1)

