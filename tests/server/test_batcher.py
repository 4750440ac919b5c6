"""The batcher's dispatch rule: a batch waits (within the window) only for requests announced as
on their way; a lone request runs at once. Windows here are long (10 s) so that a wrong wait
shows as a timeout, never as a slightly slower answer."""

from __future__ import annotations

import asyncio

import numpy as np

from edgekit.server.batcher import DynamicBatcher

WINDOW_US = 10_000_000


def doubling(x: list[np.ndarray]) -> list[np.ndarray]:
    return [x[0] * 2]


def batcher_with_sizes(max_batch_size: int = 8) -> tuple[DynamicBatcher, list[int]]:
    sizes: list[int] = []
    batcher = DynamicBatcher(doubling, max_batch_size, WINDOW_US,
                             observer=lambda requests, items, queued, compute: sizes.append(items))
    return batcher, sizes


def one(value: float) -> list[np.ndarray]:
    return [np.full((1, 2), value, np.float32)]


def test_a_lone_request_does_not_wait_for_the_window():
    async def scenario():
        batcher, sizes = batcher_with_sizes()
        batcher.start()
        y = await asyncio.wait_for(batcher.submit(one(1.0)), 2)
        await batcher.stop()
        return y, sizes

    y, sizes = asyncio.run(scenario())
    assert np.array_equal(y[0], np.full((1, 2), 2.0)) and sizes == [1]


def test_a_batch_waits_for_a_request_on_its_way_and_runs_both_together():
    async def scenario():
        batcher, sizes = batcher_with_sizes()
        batcher.start()
        arrival = batcher.arrival()  # a second request is being received
        first = asyncio.ensure_future(batcher.submit(one(1.0)))
        await asyncio.sleep(0.2)
        held = not first.done()  # waiting for the announced one
        second = await asyncio.wait_for(batcher.submit(one(3.0), arrival), 2)
        y = await asyncio.wait_for(first, 2)
        await batcher.stop()
        return held, y, second, sizes, batcher.on_the_way

    held, y, second, sizes, on_the_way = asyncio.run(scenario())
    assert held and sizes == [2] and on_the_way == 0
    assert np.array_equal(y[0], np.full((1, 2), 2.0)) and np.array_equal(second[0], np.full((1, 2), 6.0))


def test_a_request_that_fails_before_arriving_releases_the_waiting_batch():
    async def scenario():
        batcher, sizes = batcher_with_sizes()
        batcher.start()
        with batcher.arrival():  # announced, then it fails to decode: never submitted
            first = asyncio.ensure_future(batcher.submit(one(1.0)))
            await asyncio.sleep(0.2)
            held = not first.done()
        y = await asyncio.wait_for(first, 2)  # released well before the 10 s window
        await batcher.stop()
        return held, y, sizes, batcher.on_the_way

    held, y, sizes, on_the_way = asyncio.run(scenario())
    assert held and sizes == [1] and on_the_way == 0 and np.array_equal(y[0], np.full((1, 2), 2.0))


def test_queued_requests_run_together_without_waiting():
    async def scenario():
        batcher, sizes = batcher_with_sizes(max_batch_size=4)
        answers = [asyncio.ensure_future(batcher.submit(one(float(v)))) for v in range(6)]
        await asyncio.sleep(0)  # all six queued before the loop starts
        batcher.start()
        done = await asyncio.wait_for(asyncio.gather(*answers), 2)
        await batcher.stop()
        return done, sizes

    done, sizes = asyncio.run(scenario())
    assert sizes == [4, 2]
    assert [float(y[0][0, 0]) for y in done] == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]  # each its own slice
