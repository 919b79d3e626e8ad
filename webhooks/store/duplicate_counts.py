"""The ``duplicates`` table's writes: how many times each stored event was delivered again,
added in one statement per flush (``webhooks.receiver.duplicates`` counts them in memory)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Connection, DateTime, bindparam, text

# Only an event that is stored gets a count: a tombstoned id, or a captured signature re-sent
# under an invented id (another event's replay key), counts nothing and adds no row.
COUNT_DUPLICATES = text(
    "INSERT INTO duplicates (endpoint, event_id, count, last_at)"
    " SELECT e.endpoint, e.event_id, CAST(:n AS BIGINT), :now FROM events e"
    " WHERE e.endpoint = :endpoint AND e.event_id = :event_id"
    " ON CONFLICT (endpoint, event_id) DO UPDATE SET count = duplicates.count + excluded.count,"
    " last_at = excluded.last_at"
).bindparams(bindparam("n", type_=BigInteger()), bindparam("now", type_=DateTime(timezone=True)))
# PostgreSQL: every count in one statement (an executemany of 2 000 keys held the flushing thread,
# and with it the GIL, long enough to be the p99 of duplicates at 16 connections), in key order.
COUNT_DUPLICATES_PG = text(
    "INSERT INTO duplicates (endpoint, event_id, count, last_at)"
    " SELECT e.endpoint, e.event_id, k.n, :now"
    " FROM unnest(CAST(:endpoints AS text[]), CAST(:event_ids AS text[]), CAST(:ns AS bigint[]))"
    " AS k(endpoint, event_id, n)"
    " JOIN events e ON e.endpoint = k.endpoint AND e.event_id = k.event_id"
    " ORDER BY e.endpoint, e.event_id"
    " ON CONFLICT (endpoint, event_id) DO UPDATE SET count = duplicates.count + excluded.count,"
    " last_at = excluded.last_at"
).bindparams(bindparam("now", type_=DateTime(timezone=True)))


def add(conn: Connection, counts: list[tuple[tuple[str, str], int]], now: datetime) -> None:
    """Add ``counts`` ((endpoint, event id) → deliveries again, in key order) to the stored events'."""
    if conn.dialect.name == "postgresql":
        conn.execute(
            COUNT_DUPLICATES_PG,
            {
                "endpoints": [p for (p, _), _ in counts],
                "event_ids": [e for (_, e), _ in counts],
                "ns": [n for _, n in counts],
                "now": now,
            },
        )
    else:
        conn.execute(COUNT_DUPLICATES, [{"endpoint": p, "event_id": e, "n": n, "now": now} for (p, e), n in counts])
