"""Prometheus metrics named like Triton's, so existing dashboards carry over.

Triton-compatible: ``nv_inference_request_success`` / ``_failure``, ``nv_inference_count``
(inferences, i.e. batch items) vs ``nv_inference_exec_count`` (executions: their ratio is
the average batch size), cumulative ``nv_inference_queue_duration_us`` and
``nv_inference_compute_infer_duration_us``, ``nv_cache_num_hits_per_model`` /
``nv_cache_num_misses_per_model``. Histograms (edgekit's): queue and compute seconds, batch size.

The Triton-named totals are exposed as monotonically increasing gauges: prometheus-client
would append ``_total`` to a Counter's name, and the point is that Triton's exact names (and
the ``rate()`` queries written against them) work unchanged.

With several server processes (``--workers``), prometheus-client's multiprocess mode keeps each
process's values in ``PROMETHEUS_MULTIPROC_DIR`` and ``exposition`` sums them (gauges in "sum"
mode: a worker that was replaced still counts).
"""

from __future__ import annotations

import os

from prometheus_client import CollectorRegistry, Gauge, Histogram, generate_latest

LABELS = ("model", "version")


def _triton_total(name: str, documentation: str, labels: tuple[str, ...], registry: CollectorRegistry) -> Gauge:
    """A total under Triton's exact metric name (only ever incremented)."""
    return Gauge(name, documentation, labels, registry=registry, multiprocess_mode="sum")


class ServerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.success = _triton_total("nv_inference_request_success", "Successful inference requests", LABELS, registry=r)
        self.failure = _triton_total("nv_inference_request_failure", "Failed inference requests", (*LABELS, "reason"), registry=r)
        self.inference_count = _triton_total("nv_inference_count", "Inferences performed (batch items)", LABELS, registry=r)
        self.exec_count = _triton_total("nv_inference_exec_count", "Model executions (batches)", LABELS, registry=r)
        self.queue_us = _triton_total("nv_inference_queue_duration_us", "Cumulative queue time, microseconds", LABELS, registry=r)
        self.compute_us = _triton_total("nv_inference_compute_infer_duration_us", "Cumulative compute time, microseconds",
                                  LABELS, registry=r)
        self.queue_hist = Histogram("edgekit_queue_duration_seconds", "Time requests wait before their batch runs",
                                    LABELS, registry=r, buckets=(1e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.5))
        self.compute_hist = Histogram("edgekit_compute_duration_seconds", "Batch execution time", LABELS, registry=r,
                                      buckets=(1e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.5, 1.0))
        self.batch_hist = Histogram("edgekit_batch_size", "Items per executed batch", LABELS, registry=r,
                                    buckets=(1, 2, 4, 8, 16, 32, 64, 128))
        self.cache_hits = _triton_total("nv_cache_num_hits_per_model", "Prediction cache hits", LABELS, registry=r)
        self.cache_misses = _triton_total("nv_cache_num_misses_per_model", "Prediction cache misses", LABELS,
                                          registry=r)

    def exposition(self) -> bytes:
        """The text format for /metrics: this process's registry, or every worker's summed."""
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            from prometheus_client import multiprocess

            registry = CollectorRegistry()
            multiprocess.MultiProcessCollector(registry)
            return generate_latest(registry)
        return generate_latest(self.registry)

    def observer(self, model: str, version: str = "1"):
        """What the batcher calls per executed batch; the model's series exist (at 0) from now on,
        as Triton exposes every loaded model's counters before its first request."""
        labels = {"model": model, "version": version}
        for total in (self.success, self.inference_count, self.exec_count, self.queue_us, self.compute_us,
                      self.cache_hits, self.cache_misses):
            total.labels(**labels)

        def observe(requests: int, items: int, queued_s: float, compute_s: float) -> None:
            self.inference_count.labels(**labels).inc(items)
            self.exec_count.labels(**labels).inc()
            self.queue_us.labels(**labels).inc(queued_s * 1e6)
            self.compute_us.labels(**labels).inc(compute_s * 1e6)
            self.queue_hist.labels(**labels).observe(queued_s)
            self.compute_hist.labels(**labels).observe(compute_s)
            self.batch_hist.labels(**labels).observe(items)

        return observe
