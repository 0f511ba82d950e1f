"""The service's Prometheus metrics, on a registry of their own (one per app, so that several
apps, e.g. in tests, never collide in the process-wide default registry)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
WINDOW_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)


class ServeMetrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        # every metric on this app's registry
        counter, gauge, histogram = (
            partial(kind, registry=self.registry) for kind in (Counter, Gauge, Histogram)
        )
        self.requests = counter(
            "structqa_http_requests",
            "HTTP replies by route, method and status code",
            ["route", "method", "status"],
        )
        self.latency = histogram(
            "structqa_http_request_seconds",
            "Time from a request's arrival to its reply",
            ["route"],
            buckets=LATENCY_BUCKETS,
        )
        self.batch_windows = histogram(
            "structqa_batch_windows",
            "Windows scored by one batch (one or more forward passes)",
            buckets=WINDOW_BUCKETS,
        )
        self.batch_requests = histogram(
            "structqa_batch_requests",
            "Requests whose windows shared one batch",
            buckets=WINDOW_BUCKETS,
        )
        self.batch_passes = histogram(
            "structqa_batch_passes",
            "Forward passes of one batch (its windows cut into groups of similar length)",
            buckets=(1, 2, 3, 4, 6, 8, 16),
        )
        self.batch_seconds = histogram(
            "structqa_batch_seconds",
            "Time of one batch: its forward passes and their decoding",
            buckets=LATENCY_BUCKETS,
        )
        self.search_seconds = histogram(
            "structqa_search_seconds",
            "Time of one search of the index (POST /v1/search, /v1/ask), its wait for the "
            "index's thread included",
            buckets=LATENCY_BUCKETS,
        )
        self.queue_requests = gauge(
            "structqa_queue_requests",
            "Requests admitted and not yet answered (featurizing, waiting or being scored)",
        )
        self.queue_windows = gauge("structqa_queue_windows", "Windows waiting for a forward pass")
        self.model_load_seconds = gauge(
            "structqa_model_load_seconds",
            "Time to load the model at start: its checkpoint or export and, on a first start "
            "on a CPU where bf16 does not pay, making the int8 export it then answers with; "
            "opening the index (--index) is not counted",
        )
        self.warmup_seconds = gauge(
            "structqa_model_warmup_seconds", "Time of the first (warm-up) answer"
        )

    def observe_request(self, route: str, method: str, status: int, seconds: float) -> None:
        self.requests.labels(route, method, str(status)).inc()
        self.latency.labels(route).observe(seconds)

    def observe_batch(self, windows: int, requests: int, seconds: float, passes: int) -> None:
        self.batch_windows.observe(windows)
        self.batch_passes.observe(passes)
        self.batch_requests.observe(requests)
        self.batch_seconds.observe(seconds)

    def track_queue(self, requests: Callable[[], float], windows: Callable[[], float]) -> None:
        """Read the queue depths when scraped."""
        self.queue_requests.set_function(requests)
        self.queue_windows.set_function(windows)

    def render(self) -> bytes:
        return generate_latest(self.registry)
