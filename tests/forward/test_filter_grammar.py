"""The filter grammar of #42 (``webhooks.configuration.filters``): every operator, the combiners,
missing paths, typed comparisons, redacted headers, and the load-time errors naming the path."""

from __future__ import annotations

from typing import Any

import pytest

from webhooks.configuration.filters import parse, view
from webhooks.errors import ConfigError

REFUND = view(
    {"data": {"object": {"amount": 7500, "currency": "eur", "tags": ["vip", "eu"], "paid": True}}},
    {"X-Shop-Domain": "shop-7.myshopify.com", "Authorization": "[redacted]"},
    "charge.refunded",
    "stripe",
    "charge",
    "ch_1",
)


def holds(document: dict[str, Any], seen: dict[str, Any] = REFUND) -> bool:
    found = parse("destination 'finance'", document)
    assert found is not None
    return found.matches(seen)


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        ({"data.object.amount": 7500}, True),
        ({"data.object.amount": "7500"}, False),  # typed: a string never equals a number
        ({"data.object.amount": {"$gte": 5000}}, True),
        ({"data.object.amount": {"$gt": 7500}}, False),
        ({"data.object.amount": {"$gte": 5000, "$lt": 10000}}, True),
        ({"data.object.amount": {"$lte": "9"}}, False),  # a number and a string never compare
        ({"data.object.currency": {"$in": ["eur", "gbp"]}}, True),
        ({"data.object.currency": {"$nin": ["eur", "gbp"]}}, False),
        ({"data.object.currency": {"$ne": "usd"}}, True),
        ({"data.object.paid": True}, True),
        ({"data.object.paid": 1}, False),  # a boolean is not a number
        ({"data.object.tags.0": "vip"}, True),
        ({"data.object.tags.5": {"$exists": False}}, True),
        ({"data.object.refund": {"$exists": True}}, False),
        ({"data.object.refund": {"$ne": 1}}, True),  # missing satisfies $ne, $nin, $exists false
        ({"data.object.refund": {"$nin": [1]}}, True),
        ({"data.object.refund": {"$gt": 0}}, False),
        ({"headers.x-shop-domain": {"$prefix": "shop-7."}}, True),
        ({"headers.X-Shop-Domain": "shop-7.myshopify.com"}, True),  # header names in any case
        ({"headers.authorization": {"$exists": True}}, False),  # stored redacted: missing to a filter
        ({"type": {"$prefix": "charge."}, "endpoint": "stripe"}, True),
        ({"object_type": "charge", "object_id": "ch_1"}, True),
        ({"$or": [{"type": "invoice.paid"}, {"data.object.amount": {"$gte": 5000}}]}, True),
        ({"$or": [{"type": "invoice.paid"}, {"data.object.amount": {"$gte": 9000}}]}, False),
        ({"$and": [{"type": "charge.refunded"}, {"$not": {"data.object.currency": "usd"}}]}, True),
        ({"$not": {"type": "charge.refunded"}}, False),
    ],
)
def test_operators(document: dict[str, Any], expected: bool) -> None:
    assert holds(document) is expected


def test_an_event_without_an_object_has_no_object_fields() -> None:
    seen = view({"id": 1}, {}, "ping", "github", None, None)
    assert holds({"object_id": {"$exists": False}}, seen)
    assert not holds({"object_type": {"$exists": True}}, seen)


def test_why_names_the_first_clause_that_refuses() -> None:
    found = parse("destination 'finance'", {"type": {"$prefix": "charge."}, "data.object.amount": {"$gte": 9000}})
    assert found is not None
    assert found.why_not(REFUND) == "data.object.amount $gte 9000: 7500"
    assert (
        found.why_not(view({}, {}, "charge.refunded", "stripe", None, None)) == "data.object.amount $gte 9000: missing"
    )


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"data..amount": 1}, "path 'data..amount': an empty part"),
        ({"data.amount": {"$gtee": 1}}, "data.amount: unknown operator '$gtee'"),
        ({"$xor": []}, "unknown operator '$xor'"),
        ({"data.amount": {"$in": 5}}, "data.amount: $in takes a list"),
        ({"data.amount": {"$gt": [1]}}, "data.amount: $gt takes a number or a string"),
        ({"data.amount": {"$eq": {"a": 1}}}, "data.amount: compare with a string, number, boolean or null"),
        ({"data.amount": {"$exists": "yes"}}, "$exists takes true or false"),
        ({"headers.a.b": 1}, "a header is headers.<name>"),
        ({"type.name": 1}, "type has no fields"),
        ({"$or": []}, "$or takes a list of 1 to 100 documents"),
        ({"data.a": {"$in": list(range(101))}}, "at most 100 values"),
        ({f"data.f{i}": i for i in range(51)}, "more than 50 clauses"),
        ({"data.x": "y" * 1001}, "longer than 1000 characters"),
    ],
)
def test_mistakes_are_refused_at_load_naming_the_destination_and_the_path(document: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=r"^destination 'finance': filter: ") as caught:
        parse("destination 'finance'", document)
    assert message in str(caught.value)


def test_nesting_is_bounded() -> None:
    document: dict[str, Any] = {"type": "x"}
    for _ in range(10):
        document = {"$not": document}
    with pytest.raises(ConfigError, match="nested more than 8 deep"):
        parse("destination 'finance'", document)
    assert parse("destination 'finance'", {}) is None and parse("destination 'finance'", None) is None


def test_a_filter_says_whether_it_reads_headers_from_its_paths() -> None:
    """The stored headers are read only for a filter that names one (anywhere in it)."""
    by_type = parse("destination 'finance'", {"type": "x", "data.headers.x": 1})
    nested = parse("destination 'finance'", {"$or": [{"type": "x"}, {"$not": {"headers.x-shop": "s1"}}]})
    assert by_type is not None and not by_type.uses_headers
    assert nested is not None and nested.uses_headers
