"""The service's Prometheus metrics: requests by route, method and status, and a latency histogram (`Metrics`)."""

from __future__ import annotations

import threading


class Metrics:
    """Counters and a latency histogram, written in Prometheus' text format (version 0.0.4) by `text`."""

    BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: dict[tuple[str, str, int], int] = {}          # (route, method, status) -> count
        self.latency: dict[str, list[float]] = {}                    # route -> [count per bucket..., sum, count]

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        with self._lock:
            key = (route, method, status)
            self.requests[key] = self.requests.get(key, 0) + 1
            h = self.latency.setdefault(route, [0.0] * (len(self.BUCKETS) + 2))
            for i, le in enumerate(self.BUCKETS):
                if seconds <= le:
                    h[i] += 1
            h[-2] += seconds
            h[-1] += 1

    def text(self, *, scored: int, batches: int, failures: int, pending: int, ready: bool) -> str:
        with self._lock:
            requests = sorted(self.requests.items())
            latency = sorted((r, list(h)) for r, h in self.latency.items())
        out = ["# HELP clinicode_requests_total HTTP requests answered, by route, method and status.",
               "# TYPE clinicode_requests_total counter"]
        out += [f'clinicode_requests_total{{route="{r}",method="{m}",status="{s}"}} {n}'
                for (r, m, s), n in requests]
        out += ["# HELP clinicode_request_duration_seconds Time from a request's start to its answer, by route.",
                "# TYPE clinicode_request_duration_seconds histogram"]
        for r, h in latency:
            out += [f'clinicode_request_duration_seconds_bucket{{route="{r}",le="{le}"}} {int(h[i])}'
                    for i, le in enumerate(self.BUCKETS)]
            out += [f'clinicode_request_duration_seconds_bucket{{route="{r}",le="+Inf"}} {int(h[-1])}',
                    f'clinicode_request_duration_seconds_sum{{route="{r}"}} {h[-2]:.6f}',
                    f'clinicode_request_duration_seconds_count{{route="{r}"}} {int(h[-1])}']
        errors = sum(n for (_r, _m, s), n in requests if s >= 500)
        out += ["# HELP clinicode_notes_scored_total Notes scored by the model.",
                "# TYPE clinicode_notes_scored_total counter", f"clinicode_notes_scored_total {scored}",
                "# HELP clinicode_batches_total Forward batches run (notes of concurrent requests scored together).",
                "# TYPE clinicode_batches_total counter", f"clinicode_batches_total {batches}",
                "# HELP clinicode_errors_total Answers with a 5xx status (the server's fault or overload).",
                "# TYPE clinicode_errors_total counter", f"clinicode_errors_total {errors}",
                "# HELP clinicode_scoring_failures_total Batches whose scoring failed (a bug; answered with 500).",
                "# TYPE clinicode_scoring_failures_total counter", f"clinicode_scoring_failures_total {failures}",
                "# HELP clinicode_pending_requests Requests being read, tokenised or scored now.",
                "# TYPE clinicode_pending_requests gauge", f"clinicode_pending_requests {pending}",
                "# HELP clinicode_ready 1 when the model is loaded and the service takes requests.",
                "# TYPE clinicode_ready gauge", f"clinicode_ready {int(ready)}"]
        return "\n".join(out) + "\n"
