"""A small payments ledger fed by Stripe and Adyen webhooks.

Run it with ``WEBHOOKS_HANDLERS=ledger.handlers`` from ``examples/`` (the working directory is on
the import path). Each entry is written through ``event.session``, so it commits with the event's
``processed`` mark or not at all, and it is keyed by the handler's idempotency key, so a retry, a
replay or a reconciled copy never books twice.

- Stripe ``charge.succeeded`` books a credit, ``charge.refunded`` a debit of the amount refunded
  so far (the re-fetched current state with ``refetch = true``; else the event's snapshot).
- Adyen payments book their folded totals: one entry per payment and kind (captured, refunded),
  corrected to the fold's current value, so the order notifications arrive in does not matter.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from webhooks import HandlerEvent, on

metadata = sa.MetaData()
entries = sa.Table(
    "ledger_entries",
    metadata,
    sa.Column("key", sa.String(100), primary_key=True),  # idempotency key, or a per-payment slot
    sa.Column("account", sa.String(255), nullable=False),
    sa.Column("kind", sa.String(32), nullable=False),
    sa.Column("amount", sa.BigInteger, nullable=False),  # minor units; debits negative
    sa.Column("currency", sa.String(3), nullable=False),
)


def create_tables(engine: sa.Engine) -> None:
    metadata.create_all(engine)


def book(event: HandlerEvent, key: str, account: str, kind: str, amount: int, currency: str) -> None:
    """Insert or correct one entry (an upsert that works the same on SQLite and PostgreSQL)."""
    updated = event.session.execute(entries.update().where(entries.c.key == key).values(amount=amount))
    if not updated.rowcount:
        event.session.execute(
            entries.insert().values(key=key, account=account, kind=kind, amount=amount, currency=currency.upper())
        )


@on("stripe", "charge.succeeded")
def stripe_charge(event: HandlerEvent, state: Any, idempotency_key: str) -> None:
    book(event, idempotency_key, state["id"], "captured", int(state["amount"]), state["currency"])


@on("stripe", "charge.refunded")
def stripe_refund(event: HandlerEvent, state: Any, idempotency_key: str) -> None:
    # The refunded total as it is now: one slot per charge, corrected on every refund event.
    book(
        event,
        f"stripe-refund:{state['id']}",
        state["id"],
        "refunded",
        -int(state["amount_refunded"]),
        state["currency"],
    )


@on("adyen", "AUTHORISATION", "CAPTURE", "REFUND")
def adyen_payment(event: HandlerEvent, state: Any, idempotency_key: str) -> None:
    if not event.is_latest:  # a newer fold is stored: its own event books it
        return
    payment, currency = state["pspReference"], state["currency"]
    book(event, f"adyen-captured:{payment}", payment, "captured", state["captured"], currency)
    book(event, f"adyen-refunded:{payment}", payment, "refunded", -state["refunded"], currency)


def balances(connection: sa.Connection) -> dict[str, int]:
    """Net amount per account."""
    query = sa.select(entries.c.account, sa.func.sum(entries.c.amount)).group_by(entries.c.account)
    return {account: int(total) for account, total in connection.execute(query)}
