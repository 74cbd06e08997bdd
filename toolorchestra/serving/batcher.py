"""Concurrent requests as one lockstep batch of episodes: a micro-batching queue.

Requests are `Job`s (a started `Episode` and its generation settings) put on a bounded queue. One
worker thread per served model takes the first waiting job, collects more for up to `window_s`
(at most `max_batch`), and runs them with `Orchestrator.run_episodes` - one batched policy
generation per turn for all of them (jobs with different `max_tokens`/`temperature` run as
separate groups). No lock is held around a request: while a batch runs, new requests queue for the
next one. A full queue raises `QueueFull` (the server answers 429); a job whose client gave up is
`cancel`led: the loop stops advancing it at the next turn.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from toolorchestra.agent.loop import Episode

log = logging.getLogger(__name__)


class QueueFull(Exception):
    """The request queue is full: try again later."""


class Closed(Exception):
    """The batcher is shutting down."""


@dataclass
class Job:
    episode: Episode
    max_tokens: int
    temperature: float
    enqueued: float = field(default_factory=time.perf_counter)
    failed: BaseException | None = None
    finished: threading.Event = field(default_factory=threading.Event)
    on_finish: Callable[[Job], None] | None = None
    """Called from the worker thread once the episode ended (or failed, or was cancelled)."""

    def finish(self) -> None:
        self.finished.set()
        if self.on_finish is not None:
            self.on_finish(self)

    def cancel(self) -> None:
        if not self.episode.done:
            self.episode.trajectory.error = "cancelled: the client went away or the request timed out"
            self.episode.done = True


RunBatch = Callable[[list[Episode], int, float], None]
"""Runs started episodes in lockstep with these (max_tokens, temperature)."""


class Batcher:
    def __init__(self, run: RunBatch, *, max_batch: int, window_s: float, max_queue: int,
                 on_batch: Callable[[int, float], None] | None = None, name: str = "orchestra-batcher") -> None:
        self._run, self.max_batch, self.window_s = run, max_batch, window_s
        self._queue: queue.Queue[Job | None] = queue.Queue(maxsize=max_queue)
        self._on_batch = on_batch
        self._closed = False
        self.running = 0  # episodes in the batch now running
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    @property
    def depth(self) -> int:
        return self._queue.qsize()

    def submit(self, job: Job) -> None:
        if self._closed:
            raise Closed("the server is shutting down")
        try:
            self._queue.put_nowait(job)
        except queue.Full:
            raise QueueFull(f"{self._queue.maxsize} requests are already waiting") from None

    def close(self, timeout_s: float = 5.0) -> None:
        self._closed = True
        try:
            self._queue.put(None, timeout=timeout_s)
        except queue.Full:
            pass
        self._thread.join(timeout_s)

    def _collect(self, first: Job) -> tuple[list[Job], bool]:
        jobs, stop = [first], False
        deadline = time.perf_counter() + self.window_s
        while len(jobs) < self.max_batch:
            remaining = deadline - time.perf_counter()
            try:
                job = self._queue.get(timeout=remaining) if remaining > 0 else self._queue.get_nowait()
            except queue.Empty:
                break
            if job is None:
                stop = True
                break
            jobs.append(job)
        return jobs, stop

    def _work(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            jobs, stop = self._collect(first)
            live = [j for j in jobs if not j.episode.done]  # cancelled while waiting
            for job in jobs:
                if job.episode.done:
                    job.finish()
            by_settings = sorted(live, key=lambda j: (j.max_tokens, j.temperature))
            for (max_tokens, temperature), group in itertools.groupby(by_settings, key=lambda j: (j.max_tokens, j.temperature)):
                self._run_group(list(group), max_tokens, temperature)
            if stop:
                return

    def _run_group(self, jobs: list[Job], max_tokens: int, temperature: float) -> None:
        started = time.perf_counter()
        self.running = len(jobs)
        try:
            self._run([j.episode for j in jobs], max_tokens, temperature)
        except Exception as exc:  # a bug must fail these requests, not kill the worker
            log.exception("a batch of %d episodes failed", len(jobs))
            for job in jobs:
                job.failed = exc
        finally:
            self.running = 0
            for job in jobs:
                job.finish()
        if self._on_batch is not None:
            self._on_batch(len(jobs), time.perf_counter() - started)
