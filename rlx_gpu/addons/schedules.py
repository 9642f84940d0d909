"""Learning-rate schedules with torch.optim.lr_scheduler's constructor arguments and semantics.

``sched = StepLR(opt, step_size=30)`` then ``sched.step()`` after each ``opt.step()``; ``get_last_lr()``,
``state_dict()``, ``load_state_dict()``. They write ``opt.param_groups[i]["lr"]`` (and ``initial_lr`` as torch
does), so they drive the GPU optimizers and the NumPy twins alike, and changing the LR never recompiles
anything: the new value reaches the kernels through the scalar buffer at the next step. The recurrences are
torch's own (its chainable forms), so the values agree with torch's schedulers to the last bit.
"""
from __future__ import annotations

import math
from bisect import bisect_right
from collections import Counter

from ..core.numerics import check_numbers

__all__ = ["LRScheduler", "LambdaLR", "StepLR", "MultiStepLR", "ExponentialLR", "LinearLR", "CosineAnnealingLR",
           "OneCycleLR", "SequentialLR", "warmup_cosine"]


def _per_group(name, opt, value):
    if isinstance(value, (list, tuple)):
        if len(value) != len(opt.param_groups):
            raise ValueError(f"{name} must have the same length as optimizer.param_groups. {name} has "
                             f"{len(value)} values, param_groups has {len(opt.param_groups)}.")
        return list(value)
    return [value] * len(opt.param_groups)


class LRScheduler:
    """Base class: keeps ``last_epoch`` and writes each group's ``lr`` from :meth:`get_lr`."""

    def __init__(self, optimizer, last_epoch: int = -1):
        if not hasattr(optimizer, "param_groups"):
            raise TypeError(f"{type(optimizer).__name__} is not an optimizer (it has no param_groups)")
        self.optimizer = optimizer
        if last_epoch == -1:
            for g in optimizer.param_groups:
                g.setdefault("initial_lr", g["lr"])
        else:
            for i, g in enumerate(optimizer.param_groups):
                if "initial_lr" not in g:
                    raise KeyError(f"param 'initial_lr' is not specified in param_groups[{i}] when resuming "
                                   "a scheduler with last_epoch >= 0")
        self.base_lrs = [g["initial_lr"] for g in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._initial_step()

    def _initial_step(self):
        self._step_count, self._is_initial = 0, True
        try:
            self.step()
        finally:
            self._is_initial = False

    def get_lr(self) -> list:
        raise NotImplementedError

    def get_last_lr(self) -> list:
        """The learning rates the last :meth:`step` set, one per param group."""
        return list(self._last_lr)

    def step(self) -> None:
        """Advance one step (call after the optimizer's ``step``)."""
        self._step_count += 1
        self.last_epoch += 1
        self._set(self.get_lr())

    def _set(self, values):
        for g, lr in zip(self.optimizer.param_groups, values):
            g["lr"] = lr
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def _group_lrs(self):
        return [g["lr"] for g in self.optimizer.param_groups]

    def state_dict(self) -> dict:
        """Everything but the optimizer (and callables, which cannot be saved)."""
        return {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "lr_lambdas")}

    def load_state_dict(self, state: dict) -> None:
        self.__dict__.update(state)


class LambdaLR(LRScheduler):
    """lr = initial_lr * lr_lambda(epoch); one function or one per group."""

    def __init__(self, optimizer, lr_lambda, last_epoch: int = -1):
        self.lr_lambdas = _per_group("lr_lambda", optimizer, lr_lambda)
        if not all(callable(f) for f in self.lr_lambdas):
            raise TypeError(f"LambdaLR: lr_lambda must be a function of the epoch (or a list of them), got "
                            f"{lr_lambda!r}")
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        return [base * f(self.last_epoch) for f, base in zip(self.lr_lambdas, self.base_lrs)]


class StepLR(LRScheduler):
    """Multiply the lr by ``gamma`` every ``step_size`` steps."""

    def __init__(self, optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1):
        self.step_size, self.gamma = check_numbers("StepLR", ("step_size",), step_size=step_size, gamma=gamma)
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return self._group_lrs()
        return [lr * self.gamma for lr in self._group_lrs()]


class MultiStepLR(LRScheduler):
    """Multiply the lr by ``gamma`` at each milestone (by gamma^n at a milestone listed n times)."""

    def __init__(self, optimizer, milestones, gamma: float = 0.1, last_epoch: int = -1):
        self.milestones, self.gamma = Counter(milestones), check_numbers("MultiStepLR", gamma=gamma)[0]
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch not in self.milestones:
            return self._group_lrs()
        return [lr * self.gamma ** self.milestones[self.last_epoch] for lr in self._group_lrs()]


class ExponentialLR(LRScheduler):
    """Multiply the lr by ``gamma`` every step."""

    def __init__(self, optimizer, gamma: float, last_epoch: int = -1):
        self.gamma = check_numbers("ExponentialLR", gamma=gamma)[0]
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self._is_initial:
            return self._group_lrs()
        return [lr * self.gamma for lr in self._group_lrs()]


class LinearLR(LRScheduler):
    """Scale the lr linearly from ``start_factor`` to ``end_factor`` over ``total_iters`` steps."""

    def __init__(self, optimizer, start_factor: float = 1.0 / 3, end_factor: float = 1.0, total_iters: int = 5,
                 last_epoch: int = -1):
        if start_factor > 1.0 or start_factor <= 0:
            raise ValueError("Starting multiplicative factor expected to be greater than 0 and less or equal to 1.")
        if end_factor > 1.0 or end_factor < 0:
            raise ValueError("Ending multiplicative factor expected to be between 0 and 1.")
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch == 0:
            return [lr * self.start_factor for lr in self._group_lrs()]
        if self._is_initial or self.last_epoch > self.total_iters:
            return self._group_lrs()
        d = self.end_factor - self.start_factor
        return [lr * (1.0 + d / (self.total_iters * self.start_factor + (self.last_epoch - 1) * d))
                for lr in self._group_lrs()]


class CosineAnnealingLR(LRScheduler):
    """Cosine annealing from the initial lr to ``eta_min`` over ``T_max`` steps (torch's chainable form)."""

    def __init__(self, optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):
        self.T_max, self.eta_min = check_numbers("CosineAnnealingLR", ("T_max",), T_max=T_max, eta_min=eta_min)
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        e, T, lo = self.last_epoch, self.T_max, self.eta_min
        if self._is_initial:
            return self._group_lrs()
        if self._step_count == 1 and e > 0:
            return [lo + (base - lo) * (1 + math.cos(e * math.pi / T)) / 2 for base in self.base_lrs]
        if (e - 1 - T) % (2 * T) == 0:
            return [lr + (base - lo) * (1 - math.cos(math.pi / T)) / 2
                    for base, lr in zip(self.base_lrs, self._group_lrs())]
        return [(1 + math.cos(math.pi * e / T)) / (1 + math.cos(math.pi * (e - 1) / T)) * (lr - lo) + lo
                for lr in self._group_lrs()]


class OneCycleLR(LRScheduler):
    """The 1cycle policy (Smith & Topin 2018): warm up to ``max_lr``, anneal to ``max_lr/div_factor/final_div_factor``;
    with ``cycle_momentum`` the momentum (or beta1) cycles the other way."""

    def __init__(self, optimizer, max_lr, total_steps=None, epochs=None, steps_per_epoch=None, pct_start=0.3,
                 anneal_strategy="cos", cycle_momentum=True, base_momentum=0.85, max_momentum=0.95,
                 div_factor=25.0, final_div_factor=1e4, three_phase=False, last_epoch=-1):
        if total_steps is not None:
            if not isinstance(total_steps, int) or total_steps <= 0:
                raise ValueError(f"Expected positive integer total_steps, but got {total_steps}")
            self.total_steps = total_steps
        elif epochs is not None and steps_per_epoch is not None:
            self.total_steps = epochs * steps_per_epoch
        else:
            raise ValueError("You must define either total_steps OR (epochs AND steps_per_epoch)")
        if not isinstance(pct_start, float) or not 0 <= pct_start <= 1:
            raise ValueError(f"Expected float between 0 and 1 pct_start, but got {pct_start}")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"anneal_strategy must be one of 'cos' or 'linear', instead got {anneal_strategy}")
        n = self.total_steps
        first = (float(pct_start * n) - 1, "initial_lr", "max_lr", "max_momentum", "base_momentum")
        self._phases = [first, (float(2 * pct_start * n) - 2, "max_lr", "initial_lr", "base_momentum", "max_momentum"),
                        (n - 1, "initial_lr", "min_lr", "max_momentum", "max_momentum")] if three_phase else [
            first, (n - 1, "max_lr", "min_lr", "base_momentum", "max_momentum")]
        self.anneal_strategy = anneal_strategy
        if last_epoch == -1:
            for g, m in zip(optimizer.param_groups, _per_group("max_lr", optimizer, max_lr)):
                g["initial_lr"] = m / div_factor
                g["max_lr"] = m
                g["min_lr"] = g["initial_lr"] / final_div_factor
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
                raise ValueError("optimizer must support momentum or beta1 with `cycle_momentum` option enabled")
            self.use_beta1 = "betas" in optimizer.defaults
            if last_epoch == -1:
                for g, mx, b in zip(optimizer.param_groups, _per_group("max_momentum", optimizer, max_momentum),
                                    _per_group("base_momentum", optimizer, base_momentum)):
                    if self.use_beta1:
                        g["betas"] = (mx, *g["betas"][1:])
                    else:
                        g["momentum"] = mx
                    g["max_momentum"], g["base_momentum"] = mx, b
        super().__init__(optimizer, last_epoch)

    def _anneal(self, start, end, pct):
        if self.anneal_strategy == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def get_lr(self):
        step = self.last_epoch
        if step > self.total_steps:
            raise ValueError(f"Tried to step {step} times. The specified number of total steps is {self.total_steps}")
        lrs = []
        for g in self.optimizer.param_groups:
            start = 0.0
            for i, (end, lr0, lr1, m0, m1) in enumerate(self._phases):
                if step <= end or i == len(self._phases) - 1:
                    pct = (step - start) / (end - start)
                    lr = self._anneal(g[lr0], g[lr1], pct)
                    mom = self._anneal(g[m0], g[m1], pct) if self.cycle_momentum else None
                    break
                start = end
            lrs.append(lr)
            if self.cycle_momentum:
                if self.use_beta1:
                    g["betas"] = (mom, *g["betas"][1:])
                else:
                    g["momentum"] = mom
        return lrs


class SequentialLR(LRScheduler):
    """Run ``schedulers`` one after another, switching at ``milestones`` (torch.optim.lr_scheduler.SequentialLR)."""

    def __init__(self, optimizer, schedulers, milestones, last_epoch: int = -1):
        if len(schedulers) < 1:
            raise ValueError("SequentialLR expects at least one scheduler, but got no scheduler.")
        for i, s in enumerate(schedulers):
            if s.optimizer is not optimizer:
                raise ValueError(f"SequentialLR expects all schedulers to belong to the same optimizer, but "
                                 f"scheduler {i} does not")
        if len(milestones) != len(schedulers) - 1:
            raise ValueError("Sequential Schedulers expects number of schedulers provided to be one more than the "
                             f"number of milestone points, but got number of schedulers {len(schedulers)} and the "
                             f"number of milestones to be equal to {len(milestones)}")
        self._schedulers, self._milestones = list(schedulers), list(milestones)
        self.last_epoch = last_epoch + 1
        self.optimizer = optimizer
        for g in optimizer.param_groups:
            g["lr"] = g["initial_lr"]
        for s in self._schedulers:  # undo the step each scheduler took when it was made
            s.last_epoch -= 1
        self._schedulers[bisect_right(self._milestones, 0)]._initial_step()
        self._last_lr = self._schedulers[bisect_right(self._milestones, 0)].get_last_lr()

    def step(self) -> None:
        self.last_epoch += 1
        idx = bisect_right(self._milestones, self.last_epoch)
        s = self._schedulers[idx]
        if idx > 0 and self._milestones[idx - 1] == self.last_epoch:
            s.last_epoch = 0
            s._set(s.get_lr_at_start())
        else:
            s.step()
        self._last_lr = s.get_last_lr()

    def state_dict(self) -> dict:
        sd = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "_schedulers")}
        sd["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return sd

    def load_state_dict(self, state: dict) -> None:
        state = dict(state)
        subs = state.pop("_schedulers")
        self.__dict__.update(state)
        for s, st in zip(self._schedulers, subs):
            s.load_state_dict(st)


def _get_lr_at_start(self):
    """torch's ``_update_lr(0)``: the closed-form value at epoch 0 where one exists, else ``get_lr``."""
    if hasattr(self, "_closed_form"):
        return self._closed_form()
    self._is_initial = False
    return self.get_lr()


LRScheduler.get_lr_at_start = _get_lr_at_start
StepLR._closed_form = lambda self: [b * self.gamma ** (self.last_epoch // self.step_size) for b in self.base_lrs]
MultiStepLR._closed_form = lambda self: [
    b * self.gamma ** bisect_right(sorted(self.milestones.elements()), self.last_epoch) for b in self.base_lrs]
ExponentialLR._closed_form = lambda self: [b * self.gamma ** self.last_epoch for b in self.base_lrs]
LinearLR._closed_form = lambda self: [
    b * (self.start_factor + (self.end_factor - self.start_factor) * min(self.total_iters, self.last_epoch)
         / self.total_iters) for b in self.base_lrs]
CosineAnnealingLR._closed_form = lambda self: [
    self.eta_min + (b - self.eta_min) * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
    for b in self.base_lrs]


def warmup_cosine(optimizer, warmup_steps: int, total_steps: int, start_factor: float = 1e-3,
                  eta_min: float = 0.0) -> SequentialLR:
    """Linear warm-up from ``start_factor * lr`` to ``lr`` over ``warmup_steps``, then cosine annealing to
    ``eta_min`` over the remaining steps: ``SequentialLR(LinearLR, CosineAnnealingLR)``."""
    check_numbers("warmup_cosine", ("total_steps",), ("warmup_steps",), warmup_steps=warmup_steps,
                  total_steps=total_steps, start_factor=start_factor, eta_min=eta_min)  # (before LinearLR writes lr)
    warm = LinearLR(optimizer, start_factor=start_factor, end_factor=1.0, total_iters=warmup_steps)
    cos = CosineAnnealingLR(optimizer, T_max=max(1, total_steps - warmup_steps), eta_min=eta_min)
    return SequentialLR(optimizer, [warm, cos], milestones=[warmup_steps])
