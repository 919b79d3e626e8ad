"""RQ jobs and the handler registry. ``jobs`` imports ``webhooks``, never the reverse."""

from jobs.handlers import HandlerEvent, on

__all__ = ["HandlerEvent", "on"]
