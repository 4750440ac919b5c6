"""Several server processes on one port (``--workers N``).

Each worker has its own event loop, GIL, batcher and model session. Request decoding (JSON
parsing holds the GIL) then runs in parallel with the other workers' decoding and inference,
which one process cannot do. The parent reserves the port, spawns the workers (fresh
interpreters: nothing inherited from a process that imported runtime libraries), each of which
listens on its own SO_REUSEPORT socket (the kernel spreads connections evenly; on one shared
socket the first worker to wake accepts a whole burst of keep-alive connections), says
"serving" once every worker is ready, starts a new worker when one dies, and on SIGTERM/SIGINT
passes the signal on and waits while every worker drains. A worker that fails to start (a bad
package, a missing backend) stops the server with that worker's error, reported once.

Metrics are summed over the workers with prometheus-client's multiprocess mode (one directory
of memory-mapped files, made here and removed at exit), so ``/metrics`` from any worker shows
the server's totals. The prediction cache is per worker.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import queue
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import replace
from multiprocessing.connection import wait
from typing import Any

from ..errors import EdgekitError
from ..logs import detail
from .process import Launch, bind_socket, serve_here, serving_line

log = logging.getLogger("edgekit.server")
RESTARTS_PER_MINUTE = 5  # more deaths than this in a minute: the server stops instead of looping


def serve_workers(launch: Launch, sock: Any) -> None:
    """Serve ``sock``'s address (bound with SO_REUSEPORT, not listening) from
    ``launch.options.workers`` processes until SIGTERM/SIGINT."""
    count = launch.options.workers
    if launch.threads is None:  # the device's threads shared out, so workers do not oversubscribe it
        from ..device.runtime import default_threads

        launch = replace(launch, threads=max(1, default_threads(launch.profile) // count))
    grpc_reserved = None
    if launch.options.grpc_port is not None:  # every worker binds this port too (gRPC sets SO_REUSEPORT)
        grpc_reserved = bind_socket(launch.options.grpc_host, launch.options.grpc_port, reuse_port=True, listen=False)
        launch = replace(launch, options=replace(launch.options, grpc_port=grpc_reserved.getsockname()[1]))
    metrics_dir = tempfile.mkdtemp(prefix="edgekit-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir  # read by prometheus-client when a worker imports it
    supervisor = _Supervisor(launch, sock)
    try:
        supervisor.run()
    finally:
        os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)
        shutil.rmtree(metrics_dir, ignore_errors=True)
        if grpc_reserved is not None:
            grpc_reserved.close()


class _Supervisor:
    def __init__(self, launch: Launch, sock: Any) -> None:
        self.launch = launch
        self.sock = sock
        self.context = multiprocessing.get_context("spawn")
        self.events: Any = self.context.Queue()
        self.workers: dict[int, Any] = {}
        self.stopping = False
        self.signals = 0
        self.deaths: list[float] = []

    def start(self, index: int) -> None:
        process = self.context.Process(target=_worker_main, name=f"edgekit-worker-{index}",
                                       args=(self.launch, self.sock.getsockname()[:2], index, self.events,
                                             os.environ.get("EDGEKIT_DEBUG") == "1", detail()))
        process.start()
        self.workers[index] = process

    def run(self) -> None:
        previous = {sig: signal.signal(sig, self.on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            for index in range(self.launch.options.workers):
                self.start(index)
            names, grpc_port = self.wait_until_ready()
            threads = self.launch.threads
            print(serving_line(names, self.sock, grpc_port,
                               f" by {len(self.workers)} workers x {threads} thread{'s' if threads != 1 else ''}"),
                  flush=True)
            self.supervise()
        except BaseException:
            self.stop_all()
            raise
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        self.stop_all()

    def on_signal(self, sig: int, frame: Any) -> None:
        self.stopping = True
        self.signals += 1
        forward = signal.SIGINT if self.signals > 1 and sig == signal.SIGINT else signal.SIGTERM
        for process in self.workers.values():  # a second Ctrl-C makes the workers stop waiting too
            if process.is_alive() and process.pid:
                os.kill(process.pid, forward)

    def wait_until_ready(self) -> tuple[list[str], int | None]:
        ready: set[int] = set()
        names: list[str] = []
        grpc_port = None
        while len(ready) < len(self.workers):
            if self.stopping:
                raise KeyboardInterrupt
            try:
                event = self.events.get(timeout=0.5)
            except queue.Empty:
                for index, process in self.workers.items():
                    if index not in ready and process.exitcode is not None:
                        raise EdgekitError(f"server worker {index} {_ended(process.exitcode)} while starting",
                                           hint="run with --debug for its traceback")
                continue
            if event[0] == "error":
                _, _, message, hint, exit_code = event
                failure = EdgekitError(message, hint)
                failure.exit_code = exit_code
                raise failure
            _, index, names, grpc_port = event
            ready.add(index)
        return names, grpc_port

    def supervise(self) -> None:
        """Until a signal: a worker that dies is replaced (a crash loop stops the server)."""
        while not self.stopping:
            sentinels = {process.sentinel: index for index, process in self.workers.items()}
            for sentinel in wait(list(sentinels), timeout=0.5):
                index = sentinels[sentinel]
                if self.stopping:
                    break
                self.workers[index].join(5)  # reaped, so its exit code is known
                how = _ended(self.workers[index].exitcode)
                now = time.monotonic()
                self.deaths = [t for t in self.deaths if now - t < 60] + [now]
                if len(self.deaths) > RESTARTS_PER_MINUTE:
                    raise EdgekitError(f"server workers died {len(self.deaths)} times in a minute (last: worker "
                                       f"{index} {how}); stopping",
                                       hint="run with --debug and look at the first worker's error")
                log.warning("server worker %d %s; starting a new one", index, how)
                self.start(index)
            self.drain_events()

    def drain_events(self) -> None:
        while True:
            try:
                event = self.events.get_nowait()
            except queue.Empty:
                return
            if event[0] == "error":
                log.error("a restarted server worker failed: %s", event[2])

    def stop_all(self) -> None:
        """SIGTERM to every worker still running (they drain), then wait for them; kill stragglers."""
        for process in self.workers.values():
            if process.is_alive() and process.pid and not self.stopping:
                os.kill(process.pid, signal.SIGTERM)
        self.stopping = True
        options = self.launch.options
        deadline = time.monotonic() + options.lameduck_s + options.drain_timeout_s + 10
        for process in self.workers.values():
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join()
        self.events.close()


def _ended(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            pass
    return f"exited with code {code}"


def _worker_main(launch: Launch, address: tuple[str, int], index: int, events: Any, debug: bool,
                 verbose: bool = False) -> None:
    """One worker: serve its own socket on ``address``; report readiness or the error that stopped it."""
    from ..logs import configure

    configure("DEBUG" if debug else "INFO" if verbose else "WARNING")  # as the command line that started it
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # until uvicorn installs its handlers: the parent forwards
    try:
        sock = bind_socket(address[0], address[1], reuse_port=True)
        serve_here(launch, sock, lambda names, grpc_port: events.put(("ready", index, names, grpc_port)))
    except EdgekitError as exc:
        events.put(("error", index, exc.message, exc.hint, exc.exit_code))
        sys.exit(exc.exit_code)
    except OSError as exc:
        from ..errors import storage_error

        found = storage_error(exc)
        if found is None:
            raise
        events.put(("error", index, found.message, found.hint, found.exit_code))
        sys.exit(found.exit_code)
