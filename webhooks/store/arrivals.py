"""This process's word that new events were just committed: the event stream's readers
(``webhooks.admin.stream``) wait on it between their polls, so an event stored by this process
reaches a listener at once, and one stored by another process at the next poll (docs/listen.md).
A wake-up only: nothing is carried, nothing is lost if no one waits."""

from __future__ import annotations

import threading
import weakref

_waiting: weakref.WeakSet[threading.Event] = weakref.WeakSet()
_lock = threading.Lock()


def follow(event: threading.Event) -> None:
    """Set ``event`` on every arrival from now on (held weakly: its owner's end unfollows)."""
    with _lock:
        _waiting.add(event)


def unfollow(event: threading.Event) -> None:
    with _lock:
        _waiting.discard(event)


def arrived() -> None:
    """New events were committed (the receiver's batch writer, after its commit)."""
    if not _waiting:
        return  # the common case: no stream open in this process, nothing to do
    with _lock:
        waiting = list(_waiting)
    for event in waiting:
        event.set()
