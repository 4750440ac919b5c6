"""Dynamic batching: requests wait on one shrinking time budget, run as one batch, get their slice.

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
        self.queue: asyncio.Queue[_Item] = asyncio.Queue(maxsize=max_queue_size)
        self.observer = observer
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"edgekit-{name}")
        self.in_flight = 0
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def submit(self, x: list[np.ndarray]) -> list[np.ndarray]:
        """One request's inputs (one array per model input) -> its outputs (one array per output)."""
        future: asyncio.Future = asyncio.get_running_loop().create_future()
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
            items = [first]
            size = first.size
            deadline = time.perf_counter() + self.max_delay
            while size < self.max_batch_size:
                remaining = deadline - time.perf_counter()
                try:
                    item = self.queue.get_nowait() if remaining <= 0 else await asyncio.wait_for(self.queue.get(), remaining)
                except (asyncio.TimeoutError, asyncio.QueueEmpty):
                    break
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
