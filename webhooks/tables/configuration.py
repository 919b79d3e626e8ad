"""Runtime configuration's tables (#32): endpoints and destinations created through the admin API,
their secrets (encrypted, ``webhooks.configuration.keys``), the audit of every change, and the one-row version
counter every process watches. On ``webhooks.tables.events.Base``'s metadata (``webhooks.tables``).

No column holds a plaintext secret: ``config_items.options`` carries every option but the
credentials, which are ``config_secrets`` rows (a token bound to its row, and a fingerprint);
``config_changes`` shows secrets only as fingerprints.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, CheckConstraint, DateTime, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from webhooks.tables.events import Base, Json, Name, Timestamp

ITEM_KINDS = ("endpoint", "destination")
SIGNING = "signing"  # a secret's purpose: a signing secret (else the name of the credential option)
KIND_CHECK = "kind IN (" + ", ".join(f"'{k}'" for k in ITEM_KINDS) + ")"


class ConfigItem(Base):
    """One endpoint or destination made at runtime; its name is unique across both kinds."""

    __tablename__ = "config_items"

    name: Mapped[Name] = mapped_column(primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    label: Mapped[str | None] = mapped_column(Text)
    provider: Mapped[str | None] = mapped_column(String(100))  # an endpoint's kind; None for a destination
    options: Mapped[dict[str, Any]] = mapped_column(Json)  # the TOML table without its credentials
    created_at: Mapped[Timestamp]
    updated_at: Mapped[Timestamp]

    __table_args__ = (CheckConstraint(KIND_CHECK, name="kind"),)


class ConfigSecret(Base):
    """One secret of an item: a signing secret or a credential option, sealed by the keyring."""

    __tablename__ = "config_secrets"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)  # chosen before the seal: bound into it
    item_kind: Mapped[str] = mapped_column(String(16))
    item_name: Mapped[Name] = mapped_column(ForeignKey("config_items.name", ondelete="CASCADE"))
    purpose: Mapped[str] = mapped_column(String(100))
    ciphertext: Mapped[str] = mapped_column(Text)
    fingerprint: Mapped[str] = mapped_column(String(64))
    not_before: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[Timestamp]
    last_matched_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __table_args__ = (Index("ix_config_secrets_item", "item_name"),)


class ConfigChange(Base):
    """The audit: one row per change, written in the change's transaction."""

    __tablename__ = "config_changes"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    at: Mapped[Timestamp]
    who: Mapped[str] = mapped_column(Text)
    action: Mapped[str] = mapped_column(String(32))
    target: Mapped[str] = mapped_column(Text)
    before: Mapped[dict[str, Any] | None] = mapped_column(Json)
    after: Mapped[dict[str, Any] | None] = mapped_column(Json)


class ConfigVersion(Base):
    """The single row (id 1) every change bumps in its transaction: what processes compare."""

    __tablename__ = "config_version"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    version: Mapped[int] = mapped_column(BigInteger)

    __table_args__ = (CheckConstraint("id = 1", name="single_row"),)
