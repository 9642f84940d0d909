"""The bench's progress: one line per finished row with the time so far and an estimate of the time left (in a log
as on a terminal), and on a terminal a bar that names the row being timed."""
from __future__ import annotations

import sys
import time

# A row costs about its parameter count plus this many (pipelines, warm-up, the twin): the weights of the estimate.
ROW_OVERHEAD = 1_000_000


def clock(seconds: float) -> str:
    """``1:05`` (minutes:seconds) or ``1:02:05``."""
    s = int(round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


class Progress:
    """``with Progress(plans) as pr: ... line = pr.done(plan, summary)`` for each row in turn."""

    def __init__(self, plans: list, quiet: bool = False, stream=None):
        self.plans, self.k, self.t0 = list(plans), 0, time.perf_counter()
        self.weights = [p.numel + ROW_OVERHEAD for p in self.plans]
        self.stream = sys.stderr if stream is None else stream
        self.bar = None
        if not quiet and self.stream.isatty() and self.plans:
            from tqdm import tqdm
            self.bar = tqdm(total=len(self.plans), unit="row", file=self.stream, dynamic_ncols=True, leave=False)
            self._describe()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.close()

    def _describe(self):
        if self.bar is not None and self.k < len(self.plans):
            p = self.plans[self.k]
            self.bar.set_description(f"{p.optimizer} {p.precision} {p.param_set}")

    def eta(self) -> float | None:
        """Seconds left, from the time per weight of the rows done so far (None before the first)."""
        done = sum(self.weights[:self.k])
        if not done:
            return None
        return (time.perf_counter() - self.t0) * sum(self.weights[self.k:]) / done

    def done(self, plan, summary: str) -> str:
        """Count ``plan`` as finished; the line that says so (its number, what it ran, ``summary``, the times)."""
        self.k += 1
        if self.bar is not None:
            self.bar.update(1)
            self._describe()
        left = self.eta()
        return (f"[{self.k}/{len(self.plans)}] {plan.describe()}: {summary} "
                f"[{clock(time.perf_counter() - self.t0)} so far"
                + (f", about {clock(left)} left]" if self.k < len(self.plans) else ", done]"))
