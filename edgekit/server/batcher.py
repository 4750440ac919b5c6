"""Dynamic batching: requests wait on one shrinking time budget, run as one batch, get their slice.

A forming batch waits (within ``max_queue_delay_us``) only while more requests for the model
are known to be on their way: received or being decoded by the server (``Arrival``). When none
is, it runs at once, so a lone request does not pay the window and a full queue goes
without delay; under load the queue fills while the previous batch runs.

One worker thread per model runs the batches (LiteRT interpreters are not thread-safe), off
the event loop. The queue is bounded: a full queue refuses new work (the server answers 503)
instead of growing without limit. When a batch of several requests fails, each request is run
alone, so only the one that fails gets the error; the loop keeps serving the next batch.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np


class Overloaded(Exception):
    """The model's queue is full."""


@dataclass
class _Item:
    x: list[np.ndarray]  # one array per model input, same batch size
    future: asyncio.Future
    enqueued: float

    @property
    def size(self) -> int:
        return len(self.x[0])


class Arrival:
    """A request for the model is being received or decoded: batches forming meanwhile may wait
    for it. Closed when it is submitted, or when it fails before (then the batcher stops waiting)."""

    def __init__(self, batcher: DynamicBatcher) -> None:
        self._batcher: DynamicBatcher | None = batcher
        batcher.on_the_way += 1

    def close(self) -> None:
        batcher, self._batcher = self._batcher, None
        if batcher is not None:
            batcher.on_the_way -= 1
            batcher.nudge()

    def __enter__(self) -> Arrival:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


BatchObserver = Callable[[int, int, float, float], None]  # requests, batch size, queue s, compute s


class DynamicBatcher:
    def __init__(
        self,
        run: Callable[[list[np.ndarray]], list[np.ndarray]],
        max_batch_size: int = 8,
        max_queue_delay_us: int = 500,
        max_queue_size: int = 256,
        observer: BatchObserver | None = None,
        name: str = "model",
    ) -> None:
        self.run = run
        self.max_batch_size = max(1, max_batch_size)
        self.max_delay = max(0, max_queue_delay_us) / 1e6
        self.queue: asyncio.Queue[_Item | None] = asyncio.Queue(maxsize=max_queue_size)
        self.observer = observer
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"edgekit-{name}")
        self.in_flight = 0
        self.on_the_way = 0  # open Arrivals: requests received, not yet submitted
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop())

    def arrival(self) -> Arrival:
        return Arrival(self)

    def nudge(self) -> None:
        """Wake a batch waiting for requests on their way once none is left to wait for."""
        if not self.on_the_way and self.queue.empty():
            try:
                self.queue.put_nowait(None)  # a wake-up, skipped by the loop
            except asyncio.QueueFull:
                pass

    async def submit(self, x: list[np.ndarray], arrival: Arrival | None = None) -> list[np.ndarray]:
        """One request's inputs (one array per model input) -> its outputs (one array per output)."""
        future: asyncio.Future = asyncio.get_running_loop().create_future()
        if arrival is not None and arrival._batcher is self:
            arrival._batcher = None  # it arrives now: counted off without a wake-up
            self.on_the_way -= 1
        try:
            self.queue.put_nowait(_Item(list(x), future, time.perf_counter()))
        except asyncio.QueueFull:
            raise Overloaded(f"queue full ({self.queue.maxsize} requests waiting)") from None
        self.in_flight += 1
        try:
            return await future
        finally:
            self.in_flight -= 1

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            first = await self.queue.get()
            if first is None:
                continue
            items = [first]
            size = first.size
            deadline = time.perf_counter() + self.max_delay
            while size < self.max_batch_size:
                if not self.on_the_way and self.queue.empty():
                    break  # nothing else is coming: waiting would only add latency
                remaining = deadline - time.perf_counter()
                try:
                    item = self.queue.get_nowait() if remaining <= 0 else await asyncio.wait_for(self.queue.get(), remaining)
                except (asyncio.TimeoutError, asyncio.QueueEmpty):
                    break
                if item is None:
                    continue
                if size + item.size > self.max_batch_size:
                    await self._execute(loop, items)  # the newcomer starts the next batch
                    items, size = [item], item.size
                    deadline = time.perf_counter() + self.max_delay
                    continue
                items.append(item)
                size += item.size
            await self._execute(loop, items)

    async def _execute(self, loop: asyncio.AbstractEventLoop, items: list[_Item]) -> None:
        items = [i for i in items if not i.future.cancelled()]
        if not items:
            return
        started = time.perf_counter()
        queued = started - min(i.enqueued for i in items)
        try:
            batch = items[0].x if len(items) == 1 else [np.concatenate(parts) for parts in zip(*(i.x for i in items))]
            outputs = await loop.run_in_executor(self.executor, self.run, batch)
        except Exception as exc:
            if len(items) == 1:
                if not items[0].future.done():
                    items[0].future.set_exception(exc)
            else:  # find the request that fails: each alone, so the others still get their answer
                for item in items:
                    await self._execute_alone(loop, item)
            return
        finally:
            if self.observer is not None:
                self.observer(len(items), sum(i.size for i in items), queued, time.perf_counter() - started)
        offset = 0
        for item in items:
            n = item.size
            if not item.future.done():
                item.future.set_result([out[offset : offset + n] for out in outputs])
            offset += n

    async def _execute_alone(self, loop: asyncio.AbstractEventLoop, item: _Item) -> None:
        try:
            result = await loop.run_in_executor(self.executor, self.run, item.x)
        except Exception as exc:  # noqa: BLE001 - this request's own failure, answered to it alone
            if not item.future.done():
                item.future.set_exception(exc)
            return
        if not item.future.done():
            item.future.set_result(result)

    async def drain(self, timeout: float = 30.0) -> None:
        """Wait until queued and running requests are answered (graceful shutdown)."""
        deadline = time.perf_counter() + timeout
        while (self.in_flight or not self.queue.empty()) and time.perf_counter() < deadline:
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        self.executor.shutdown(wait=True)
