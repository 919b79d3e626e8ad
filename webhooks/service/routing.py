"""The app's URL rules, with Werkzeug's URL builders made once per process instead of once per app.

Werkzeug compiles two Python functions for every rule it binds (``Rule._compile_builder``: an
``ast`` tree, ``compile``, ``exec``), about 0.3 ms each: the service's 77 rules made each
``create_app()`` spend two thirds of its time there (44 ms of 66 on this 2-core machine), in every
gunicorn worker, every ``webhooks`` command that builds an app, and each of the suite's two thousand
apps. A builder is a pure function of what the key below holds (the rule's parsed parts, its
defaults, whether unknown arguments are appended): it takes the rule itself as its first argument
and reads converters through it. So one process makes each distinct builder once and every rule
with the same key shares it (``tests/service/test_routing.py`` builds every route's URL both ways).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from werkzeug.routing import Rule

_builders: dict[tuple[Any, ...], Callable[..., tuple[str, str]]] = {}
_lock = threading.Lock()


class SharedBuilderRule(Rule):
    """A ``werkzeug.routing.Rule`` whose URL builders come from a per-process cache."""

    def _compile_builder(self, append_unknown: bool = True) -> Callable[..., tuple[str, str]]:
        key = (
            self.rule,
            tuple(self._trace),
            repr(sorted((self.defaults or {}).items())),
            tuple(sorted((name, type(conv)) for name, conv in self._converters.items())),
            append_unknown,
        )
        with _lock:
            found = _builders.get(key)
            if found is None:
                found = _builders[key] = super()._compile_builder(append_unknown)
            return found
