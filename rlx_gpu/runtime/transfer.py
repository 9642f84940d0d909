"""Host <-> device copies through persistent, double-buffered staging buffers.

wgpu's ``queue.read_buffer`` makes, maps and destroys a staging buffer per call, and ``queue.write_buffer``
copies through staging memory it allocates per call; both ran at 1-5 GB/s. Here each direction has two
staging buffers made once and reused: while the host copies one round out of (or into) one buffer, the GPU
copies the next round into (or out of) the other. Host-side copies are split over a few threads (NumPy
releases the GIL while copying), and many tensors travel in one round with one copy command each.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

ROUND = 32 << 20          # bytes per staging round (PERF_NOTES.md 12: 64 MiB staging slowed kernels on the H200)
SMALL = 256 << 10         # uploads below this go through queue.write_buffer (no wait at all)
_SLICE = 4 << 20          # host copies are split into slices of at least this many bytes
INLINE = 4 << 20          # a batch of host copies below this many bytes is copied on the calling thread


class Transfer:
    def __init__(self, device):
        self.dev = device
        n = min(16, os.cpu_count() or 1)
        self.pool = ThreadPoolExecutor(n, thread_name_prefix="rlx-gpu-copy") if n > 1 else None
        self.threads = n
        self._stage = {"down": [], "up": []}

    def reserve(self) -> None:
        """Make the four staging buffers now (two per direction)."""
        for kind in ("down", "up"):
            self._stage_buf(kind, 1)

    def _stage_buf(self, kind: str, i: int):
        bufs = self._stage[kind]
        while len(bufs) <= i:
            u = self.dev.wgpu.BufferUsage
            usage = (u.MAP_READ | u.COPY_DST) if kind == "down" else (u.MAP_WRITE | u.COPY_SRC)
            bufs.append(self.dev.device.create_buffer(size=ROUND, usage=usage, label=f"staging {kind} {len(bufs)}"))
        return bufs[i]

    def _copy(self, pairs):
        """Copy each (dst, src) uint8 pair; large ones are split over the thread pool (a small batch is copied
        here: handing it to the pool costs more than the copies, PERF_NOTES.md 51)."""
        if not self.pool or sum(d.nbytes for d, _ in pairs) < INLINE:
            for d, s in pairs:
                np.copyto(d, s)
            return
        jobs = []
        for dst, src in pairs:
            n = dst.nbytes
            k = min(self.threads, max(1, n // _SLICE))
            step = -(-n // k)
            jobs += [(dst[a:a + step], src[a:a + step]) for a in range(0, n, step)]
        list(self.pool.map(lambda j: np.copyto(j[0], j[1]), jobs))

    @staticmethod
    def _rounds(items):
        """Split (buffer, offset, host uint8 view) items into rounds of at most ROUND staging bytes:
        each round a list of (buffer, buffer offset, staging offset, host view)."""
        rounds, cur, used = [], [], 0
        for buf, off, host in items:
            done = 0
            while done < host.nbytes:
                n = min(host.nbytes - done, ROUND - used)
                cur.append((buf, off + done, used, host[done:done + n]))
                used += n
                done += n
                if used == ROUND:
                    rounds.append((cur, used))
                    cur, used = [], 0
        if cur:
            rounds.append((cur, used))
        return rounds

    def _direct(self, items, mode: str):
        """Items whose buffer the host can map (CPU adapters): one map per buffer, one memcpy per item.
        Returns the remaining items."""
        rest, by_buf = [], {}
        for it in items:
            buf = it[0]
            if buf.usage & self.dev.wgpu.BufferUsage.MAP_READ and it[2].nbytes:
                by_buf.setdefault(id(buf), (buf, []))[1].append(it)
            elif it[2].nbytes:
                rest.append(it)
        for buf, its in by_buf.values():
            lo = min(off for _, off, _ in its) // 8 * 8
            hi = -(-max(off + h.nbytes for _, off, h in its) // 4) * 4
            buf.map_sync(mode, lo, hi - lo)
            try:
                if mode == "READ":
                    view = np.frombuffer(buf.read_mapped(lo, hi - lo, copy=False), np.uint8)
                    self._copy([(h, view[off - lo:off - lo + h.nbytes]) for _, off, h in its])
                else:
                    view = np.frombuffer(buf._experimental_get_mapped_range(lo, hi - lo), np.uint8)
                    self._copy([(view[off - lo:off - lo + h.nbytes], h) for _, off, h in its])
            finally:
                buf.unmap()
        return rest

    def download(self, items) -> None:
        """Copy each (buffer, offset, out) with ``out`` a contiguous uint8 view (its size is the byte count).
        One transfer at a time per device (the staging buffers are shared): callers from several threads wait."""
        self.dev.ensure_alive()
        with self.dev.io_lock:
            try:
                self._download(items)
            except Exception as e:
                self.dev._failed(e)  # (a DeviceLostError if the device went meanwhile)
                raise

    def _download(self, items) -> None:
        rounds = self._rounds(self._direct(items, "READ") if self.dev.host_mappable else items)
        d = self.dev.device

        def enqueue(k):
            segs, _ = rounds[k]
            st = self._stage_buf("down", k % 2)
            enc = d.create_command_encoder()
            for buf, off, soff, host in segs:
                enc.copy_buffer_to_buffer(buf, off, st, soff, host.nbytes)
            self.dev.queue.submit([enc.finish()])

        if rounds:
            enqueue(0)
        for k, (segs, used) in enumerate(rounds):
            if k + 1 < len(rounds):
                enqueue(k + 1)  # the GPU fills the other buffer while we copy this one out
            st = self._stage_buf("down", k % 2)
            st.map_sync("READ", 0, used)
            try:
                view = np.frombuffer(st.read_mapped(0, used, copy=False), np.uint8)
                self._copy([(host, view[soff:soff + host.nbytes]) for _, _, soff, host in segs])
            finally:
                st.unmap()

    def upload(self, items) -> None:
        """Copy each (buffer, offset, data) with ``data`` a contiguous uint8 view into the buffers (one transfer at a
        time per device, as :meth:`download`)."""
        self.dev.ensure_alive()
        with self.dev.io_lock:
            try:
                self._upload(items)
            except Exception as e:
                self.dev._failed(e)
                raise

    def _upload(self, items) -> None:
        total = sum(h.nbytes for _, _, h in items)
        if self.dev.host_mappable and total >= SMALL:  # (below SMALL a write costs less than mapping, PERF_NOTES 51)
            items = self._direct(items, "WRITE")
            total = sum(h.nbytes for _, _, h in items)
        if total < SMALL:
            for buf, off, host in items:
                if host.nbytes:
                    self.dev.queue.write_buffer(buf, off, host)
            return
        d = self.dev.device
        for k, (segs, used) in enumerate(self._rounds(items)):
            st = self._stage_buf("up", k % 2)
            st.map_sync("WRITE", 0, used)  # waits for the copy that last used this buffer
            try:
                try:
                    view = np.frombuffer(st._experimental_get_mapped_range(0, used), np.uint8)
                    self._copy([(view[soff:soff + host.nbytes], host) for _, _, soff, host in segs])
                except AttributeError:  # a wgpu-py without the writable mapped range
                    for _, _, soff, host in segs:
                        st.write_mapped(host, soff)
            finally:
                st.unmap()
            enc = d.create_command_encoder()
            for buf, off, soff, host in segs:
                enc.copy_buffer_to_buffer(st, soff, buf, off, host.nbytes)
            self.dev.queue.submit([enc.finish()])
