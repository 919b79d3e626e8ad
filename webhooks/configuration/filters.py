"""A destination's ``filter`` (#42, docs/forwarding.md "Filters"): a JSON/TOML document over the
verified event, parsed and bounded at load (``parse``), evaluated when deliveries are created
(``Filter.matches``), with the first clause that refuses an event in words (``Filter.why_not``).

A document maps paths to conditions, all of which must hold; ``$and``, ``$or`` (lists of documents)
and ``$not`` (a document) combine them. A path is a request header by its lower-case name
(``headers.x-shop-domain``), one of the event's fields (``type``, ``endpoint``, ``object_type``,
``object_id``), or else a path into the event's own data as handlers see it (a Stripe event's
``data.object.amount``; for a batch kind the item that is the event, Adyen's ``amount.value``;
list items by index, ``lines.0.id``). A condition is a plain value (``$eq``) or a table of operators, all
of which must hold: ``$eq $ne $in $nin $gt $gte $lt $lte $exists $prefix``. Values compare by type:
a number never equals a string or a boolean; ``$gt`` and its kin compare two numbers or two strings
and are false otherwise. A missing path satisfies only ``$exists = false``, ``$ne`` and ``$nin``. A
header stored redacted (``[redacted]``, ``[verified signature]``) is missing to a filter.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from webhooks.errors import ConfigError

FIELDS = ("headers", "type", "endpoint", "object_type", "object_id")  # the event's; any other path is its data
OPERATORS = ("$eq", "$ne", "$in", "$nin", "$gt", "$gte", "$lt", "$lte", "$exists", "$prefix")
COMBINERS = ("$and", "$or", "$not")
MAX_DEPTH, MAX_CLAUSES, MAX_LIST, MAX_PATH, MAX_TEXT = 8, 50, 100, 200, 1000
MISSING: Any = object()
ORDER: dict[str, Callable[[Any, Any], bool]] = {
    "$gt": lambda a, b: bool(a > b),
    "$gte": lambda a, b: bool(a >= b),
    "$lt": lambda a, b: bool(a < b),
    "$lte": lambda a, b: bool(a <= b),
}
NOT_KEPT = ("[redacted]", "[verified signature]")  # header values stored instead of the credential

Test = Callable[[Mapping[str, Any]], str | None]  # the event's view → None (holds) or why not


@dataclass(frozen=True)
class Filter:
    """A parsed filter: ``source`` as written, ``test`` its compiled form."""

    source: Mapping[str, Any]
    test: Test = field(compare=False, repr=False)
    uses_headers: bool = field(default=False, compare=False)

    def matches(self, view: Mapping[str, Any]) -> bool:
        return self.test(view) is None

    def why_not(self, view: Mapping[str, Any]) -> str | None:
        """The first clause that refuses the event (None: it matches)."""
        return self.test(view)


def parse(where: str, document: Any) -> Filter | None:
    """The filter of ``document`` (None: none), or ``ConfigError`` naming ``where`` and the path."""
    if document is None or document == {}:
        return None
    paths: list[tuple[str, ...]] = []  # every clause's path, as parsed
    test = _document(where, document, 0, paths)
    return Filter(document, test, uses_headers=any(path[0] == "headers" for path in paths))


def view(
    data: Any,
    headers: Mapping[str, str],
    event_type: str,
    endpoint: str,
    object_type: str | None,
    object_id: str | None,
) -> dict[str, Any]:
    """What a filter sees of an event: its data as handlers see it and its request's headers."""
    kept = {k.lower(): v for k, v in headers.items() if v not in NOT_KEPT}
    seen = {"data": data, "headers": kept, "type": event_type, "endpoint": endpoint}
    if object_type is not None and object_id is not None:  # an event with no object: both missing
        seen.update(object_type=object_type, object_id=object_id)
    return seen


def _document(where: str, document: Any, depth: int, paths: list[tuple[str, ...]]) -> Test:
    if not isinstance(document, Mapping) or not document:
        raise ConfigError(f"{where}: filter: a document must be a non-empty table of paths and conditions")
    if depth > MAX_DEPTH:
        raise ConfigError(f"{where}: filter: nested more than {MAX_DEPTH} deep")
    tests: list[Test] = []
    for key, value in document.items():
        if key in COMBINERS:
            tests.append(_combiner(where, key, value, depth, paths))
        elif isinstance(key, str) and key.startswith("$"):
            raise ConfigError(f"{where}: filter: unknown operator {key!r} (use {', '.join(COMBINERS)} here)")
        else:
            tests.append(_clause(where, _path(where, key), value, paths))
    return _all(tests)


def _combiner(where: str, key: str, value: Any, depth: int, paths: list[tuple[str, ...]]) -> Test:
    if key == "$not":
        inner = _document(where, value, depth + 1, paths)
        return lambda v: "$not: the inner filter matches" if inner(v) is None else None
    if not isinstance(value, list) or not value or len(value) > MAX_LIST:
        raise ConfigError(f"{where}: filter: {key} takes a list of 1 to {MAX_LIST} documents")
    parts = [_document(where, item, depth + 1, paths) for item in value]
    if key == "$and":
        return _all(parts)

    def any_of(v: Mapping[str, Any]) -> str | None:
        refusals = []
        for part in parts:
            why = part(v)
            if why is None:
                return None
            refusals.append(why)
        return "$or: none holds (" + "; ".join(refusals) + ")"

    return any_of


def _all(tests: list[Test]) -> Test:
    def every(v: Mapping[str, Any]) -> str | None:
        for test in tests:
            why = test(v)
            if why is not None:
                return why
        return None

    return every


def _path(where: str, key: Any) -> tuple[str, ...]:
    if not isinstance(key, str) or not key or len(key) > MAX_PATH:
        raise ConfigError(f"{where}: filter: a path is a dotted name of at most {MAX_PATH} characters, not {key!r}")
    parts = tuple(key.split("."))
    if any(not p for p in parts):
        raise ConfigError(f"{where}: filter: path {key!r}: an empty part")
    if parts[0] not in FIELDS:
        return ("data", *parts)  # into the event's own data
    if parts[0] == "headers" and len(parts) != 2:
        raise ConfigError(f"{where}: filter: path {key!r}: a header is headers.<name>")
    if parts[0] == "headers":
        parts = ("headers", parts[1].lower())
    if parts[0] != "headers" and len(parts) != 1:
        raise ConfigError(f"{where}: filter: path {key!r}: {parts[0]} has no fields")
    return parts


def _clause(where: str, path: tuple[str, ...], condition: Any, paths: list[tuple[str, ...]]) -> Test:
    paths.append(path)
    if len(paths) > MAX_CLAUSES:
        raise ConfigError(f"{where}: filter: more than {MAX_CLAUSES} clauses")
    name = ".".join(path[1:] if path[0] == "data" else path)  # as written
    if (
        isinstance(condition, Mapping)
        and condition
        and all(isinstance(k, str) and k.startswith("$") for k in condition)
    ):
        checks = [_operator(where, name, op, operand) for op, operand in condition.items()]
    else:
        checks = [_operator(where, name, "$eq", condition)]

    def clause(v: Mapping[str, Any]) -> str | None:
        found = _lookup(v, path)
        for op, operand, check in checks:
            if not check(found):
                shown = "missing" if found is MISSING else _short(found)
                return f"{name} {op} {_short(operand)}: {shown}"
        return None

    return clause


def _operator(where: str, name: str, op: str, operand: Any) -> tuple[str, Any, Callable[[Any], bool]]:
    if op not in OPERATORS:
        raise ConfigError(f"{where}: filter: {name}: unknown operator {op!r} (one of {', '.join(OPERATORS)})")
    _bounded(where, name, operand)
    if op in ("$in", "$nin"):
        if not isinstance(operand, list) or len(operand) > MAX_LIST:
            raise ConfigError(f"{where}: filter: {name}: {op} takes a list of at most {MAX_LIST} values")
        if op == "$in":
            return op, operand, lambda x: x is not MISSING and any(_same(x, o) for o in operand)
        return op, operand, lambda x: x is MISSING or not any(_same(x, o) for o in operand)
    if op == "$exists":
        if not isinstance(operand, bool):
            raise ConfigError(f"{where}: filter: {name}: $exists takes true or false")
        return op, operand, lambda x: (x is not MISSING) == operand
    if op == "$prefix":
        if not isinstance(operand, str):
            raise ConfigError(f"{where}: filter: {name}: $prefix takes a string")
        return op, operand, lambda x: isinstance(x, str) and x.startswith(operand)
    if op in ("$gt", "$gte", "$lt", "$lte"):
        if not (_number(operand) or isinstance(operand, str)):
            raise ConfigError(f"{where}: filter: {name}: {op} takes a number or a string")
        compare: Callable[[Any, Any], bool] = ORDER[op]
        return op, operand, lambda x: _comparable(x, operand) and compare(x, operand)
    if op == "$ne":
        return op, operand, lambda x: x is MISSING or not _same(x, operand)
    return op, operand, lambda x: x is not MISSING and _same(x, operand)


def _bounded(where: str, name: str, operand: Any) -> None:
    values = operand if isinstance(operand, list) else [operand]
    for value in values:
        if isinstance(value, str) and len(value) > MAX_TEXT:
            raise ConfigError(f"{where}: filter: {name}: a value longer than {MAX_TEXT} characters")
        if isinstance(value, (Mapping, list)):
            raise ConfigError(f"{where}: filter: {name}: compare with a string, number, boolean or null")


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _comparable(a: Any, b: Any) -> bool:
    return (_number(a) and _number(b)) or (isinstance(a, str) and isinstance(b, str))


def _same(a: Any, b: Any) -> bool:
    if _number(a) and _number(b):
        return bool(a == b)
    return type(a) is type(b) and bool(a == b)


def _lookup(v: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    found: Any = v.get(path[0], MISSING)
    for part in path[1:]:
        if isinstance(found, Mapping):
            found = found.get(part, MISSING)
        elif isinstance(found, list) and part.isdigit() and int(part) < len(found):
            found = found[int(part)]
        else:
            return MISSING
        if found is MISSING:
            return MISSING
    return found


def _short(value: Any) -> str:
    text = repr(value) if not isinstance(value, str) else f'"{value}"'
    return text if len(text) <= 60 else text[:57] + "..."
