"""The micro-batching worker: one thread scoring the prepared notes of concurrent requests together (`Batcher`)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterator

from clinicode.predict import Predictor, Prepared

log = logging.getLogger("clinicode.serve")


@dataclass
class _Job:
    key: tuple[Any, ...]
    prepared: Prepared
    future: concurrent.futures.Future


class ShuttingDown(Exception):
    """A job the worker will not score: the server is stopping and its grace period is over."""


class Batcher:
    """One worker thread scoring the prepared notes of concurrent requests together.

    Jobs with the same options (top_k, threshold, explain) are merged into one `Predictor.finish` call of up to
    `max_notes` notes: those already queued when the worker takes a job, and those of requests still being
    tokenised (`arriving`), for which it waits at most `wait_ms`. With nothing else on its way it scores at once,
    so a lone client pays no wait.
    """

    def __init__(self, predictor: Predictor, *, max_notes: int, wait_ms: float) -> None:
        self.predictor = predictor
        self.max_notes, self.wait_s = max_notes, wait_ms / 1000.0
        self.queue: queue.Queue[_Job | None] = queue.Queue()
        self.batches = 0       # finish calls so far (tests and /health read them)
        self.scored = 0        # notes scored so far
        self.failures = 0      # batches whose scoring failed (a bug)
        self._refusing = False  # set by `refuse_waiting`: jobs not yet scored are answered ShuttingDown
        self._arriving = 0     # requests between `arriving()` and their submit
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="clinicode-batcher", daemon=True)
        self._thread.start()

    def alive(self) -> bool:
        return self._thread.is_alive()

    @contextlib.contextmanager
    def arriving(self) -> Iterator[None]:
        """Mark a request whose notes are being tokenised: the worker may wait for its job (up to wait_ms)."""
        with self._lock:
            self._arriving += 1
        try:
            yield
        finally:
            with self._lock:
                self._arriving -= 1

    def submit(self, prepared: Prepared, *, top_k: int | None, threshold: float | None,
               explain: int) -> concurrent.futures.Future:
        fut: concurrent.futures.Future = concurrent.futures.Future()
        if self._refusing:
            fut.set_exception(ShuttingDown())
        else:
            self.queue.put(_Job((top_k, threshold, explain), prepared, fut))
        return fut

    def refuse_waiting(self) -> None:
        """From now on, answer every job not yet being scored with ShuttingDown (the end of a graceful stop's grace
        period); the batch being scored finishes."""
        self._refusing = True
        while True:
            try:
                job = self.queue.get_nowait()
            except queue.Empty:
                return
            if job is None:
                self.queue.put(None)  # keep the stop signal for the worker
                return
            if job.future.set_running_or_notify_cancel():
                job.future.set_exception(ShuttingDown())

    def stop(self) -> None:
        self.queue.put(None)
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        while True:
            job = self.queue.get()
            if job is None:
                return
            jobs, n, stop = [job], len(job.prepared.ids), False
            deadline = time.monotonic() + self.wait_s
            while n < self.max_notes:
                try:
                    nxt = self.queue.get_nowait()
                except queue.Empty:
                    remaining = deadline - time.monotonic()
                    if self._arriving == 0 or remaining <= 0:  # nothing on its way, or waited long enough
                        break
                    try:
                        nxt = self.queue.get(timeout=min(remaining, 0.001))
                    except queue.Empty:
                        continue
                if nxt is None:
                    stop = True
                    break
                jobs.append(nxt)
                n += len(nxt.prepared.ids)
            try:
                self._score(jobs)
            except Exception as err:  # never let one batch end the worker: later requests would wait forever
                log.error("scoring worker: %s (note text is not logged)", type(err).__name__)
            if stop:
                return

    def _score(self, jobs: list[_Job]) -> None:
        groups: dict[tuple[Any, ...], list[_Job]] = {}
        for j in jobs:
            if j.future.set_running_or_notify_cancel():  # False: its client went away; nothing to score
                if self._refusing:
                    j.future.set_exception(ShuttingDown())
                else:
                    groups.setdefault(j.key, []).append(j)
        for (top_k, threshold, explain), group in groups.items():
            try:
                merged = _merge([j.prepared for j in group])
                records = [p.to_dict() for p in self.predictor.finish(merged, top_k=top_k, threshold=threshold,
                                                                      explain=explain, attention=False)]
            except Exception as err:  # a bug, not bad input: every waiting request gets a 500, the worker lives on
                self.failures += 1
                log.error("scoring failed: %s (note text is not logged)", type(err).__name__)
                for j in group:
                    j.future.set_exception(RuntimeError("scoring failed"))
                continue
            self.batches += 1
            self.scored += len(records)
            start = 0
            for j in group:
                end = start + len(j.prepared.ids)
                j.future.set_result(records[start:end])
                start = end


def _merge(parts: list[Prepared]) -> Prepared:
    """One Prepared holding the notes of several, in order (their encodings are already computed)."""
    if len(parts) == 1:
        return parts[0]
    ids: list[str] = []
    errors: dict[int, str] = {}
    good: list[int] = []
    texts: list[str] = []
    encs: list[Any] = []
    for p in parts:
        off = len(ids)
        ids += p.ids
        errors.update({off + i: e for i, e in p.errors.items()})
        good += [off + i for i in p.good]
        texts += p.texts
        encs += p.encs or []
    return Prepared(ids, errors, good, texts, encs if good and any(p.encs is not None for p in parts) else None)
