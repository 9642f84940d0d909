"""A bounded mapping for caches that would otherwise grow with every distinct key (the per-device shader modules and
pipelines: a program that compiles many distinct sources must not grow without bound)."""
from __future__ import annotations

from collections import OrderedDict

__all__ = ["LRU"]


class LRU(OrderedDict):
    """A dict of at most ``cap`` entries: :meth:`get` marks an entry as recently used, and an insertion past ``cap``
    drops the least recently used one. Not locked: callers that share one hold their own lock."""

    def __init__(self, cap: int):
        super().__init__()
        self.cap = int(cap)

    def get(self, key, default=None):
        if key in self:
            self.move_to_end(key)
            return self[key]
        return default

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        self.move_to_end(key)
        while len(self) > self.cap:
            self.popitem(last=False)
