"""Hostile characters a sender puts in a logged value never reach a log line raw, in either format."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
from flask import Flask

from tests.conftest import stripe_event, stripe_headers
from webhooks.service.process_setup import configure_logging

# C0, DEL, C1 (NEL, CSI), the Unicode line and paragraph separators, a bidi override.
HOSTILE = "a\nb\rc\x1b[31md\x7fe\x85f\x9b2Jg\u2028h\u2029i\u202ej"
RAW = [chr(c) for c in (*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029, 0x202E)]


@pytest.fixture
def logs() -> Iterator[dict[str, io.StringIO]]:
    """A stream per format; the root logger's handlers are put back afterwards."""
    root = logging.getLogger()
    kept, level = root.handlers[:], root.level
    streams = {"json": io.StringIO(), "text": io.StringIO()}
    handlers = []
    for fmt, stream in streams.items():
        configure_logging("INFO", fmt, stream)
        handlers.extend(root.handlers)
    root.handlers[:] = handlers
    yield streams
    root.handlers[:] = kept
    root.setLevel(level)


def assert_clean(
    streams: dict[str, io.StringIO], lines: int, text_lines: int | None = None
) -> tuple[list[dict[str, object]], list[str]]:
    """The JSON stream holds ``lines`` lines (one a record), the text stream ``text_lines``
    (a traceback keeps its lines), none with a raw unprintable character."""
    out: dict[str, list[str]] = {}
    for fmt, stream in streams.items():
        text = stream.getvalue()
        out[fmt] = text.split("\n")[:-1]
        assert len(out[fmt]) == (lines if fmt == "json" or text_lines is None else text_lines), (fmt, text)
        assert not [c for c in RAW if c in "".join(out[fmt])], (fmt, text)
    return [json.loads(line) for line in out["json"]], out["text"]


def test_a_signed_event_id_with_control_characters_is_logged_escaped(app: Flask, logs: dict[str, io.StringIO]) -> None:
    event_id = f"evt_{HOSTILE}"
    body = stripe_event(event_id)
    assert app.test_client().post("/webhooks/stripe", data=body, headers=stripe_headers(body)).status_code == 200
    records, text = assert_clean(logs, 1)
    assert records[0]["event_ids"] == [event_id]  # the JSON still decodes to the exact id
    # The text line stays readable: the characters appear as their escapes.
    escaped = r"evt_a\nb\rc\u001b[31md\u007fe\u0085f\u009b2Jg\u2028h\u2029i\u202ej"
    assert f'event_ids=["{escaped}"]' in text[0]  # a field's value stays JSON in text too


def test_messages_fields_and_tracebacks_are_escaped(logs: dict[str, io.StringIO]) -> None:
    log = logging.getLogger("webhooks.test")
    log.warning("header %s", HOSTILE, extra={"fields": {"name": HOSTILE}})
    try:
        try:
            raise KeyError(HOSTILE)
        except KeyError as exc:
            raise ValueError(HOSTILE) from exc
    except ValueError:
        log.exception("failed on %r", "x")
    # Text: the warning; the error; two tracebacks of three lines each, and between them the
    # chain's sentence with a blank line either side.
    records, text = assert_clean(logs, 2, 1 + 1 + 3 + 3 + 3 + 2)
    assert records[0]["message"] == f"header {HOSTILE}" and records[0]["name"] == HOSTILE
    assert HOSTILE in str(records[1]["traceback"])
    assert text[0].endswith(
        r"header a\nb\rc\x1b[31md\x7fe\x85f\x9b2Jg\u2028h\u2029i\u202ej "
        r'name="a\nb\rc\u001b[31md\u007fe\u0085f\u009b2Jg\u2028h\u2029i\u202ej"'
    )
    assert text[-1] == r"ValueError: a\nb\rc\x1b[31md\x7fe\x85f\x9b2Jg\u2028h\u2029i\u202ej"
