"""Running every queued job to its end in the calling thread: ``webhooks.testing``'s ``run()`` and
the suite's ``drain``.

A burst ends when the queue is empty, so nothing sends it one of RQ's worker commands (``rq:pubsub:<worker>``:
shutdown, kill-horse, stop-job): it listens for none. RQ's command thread made the end of each burst
wait for that thread's next wake-up (``PromptWorker.command_wait``, a second), which a test suite that
drains after each delivery paid hundreds of times.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from webhooks.worker.loop import PromptWorker

if TYPE_CHECKING:
    from webhooks.runtime import Runtime


class BurstWorker(PromptWorker):
    """``PromptWorker`` for ``work(burst=True)`` only: no command channel, no command thread."""

    def subscribe(self) -> None:
        self.pubsub_thread = None  # RQ's unsubscribe() then has nothing to stop


def run_queued(rt: Runtime) -> None:
    """Every job on ``rt``'s queues, run here, in order, until none is left."""
    BurstWorker(rt.queue.queues, connection=rt.queue.connection).work(burst=True)
