"""Decoding a landing line into typed values (the contract's field rules)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation

from dayclose.sources import Source

NULL = "\\N"
# Decoded amounts must fit decimal(18, 2); business limits ("absurd amount") are dbt's.
MAX_DECIMAL = Decimal("1e15")


# -- decoding ------------------------------------------------------------------------------
_CANONICAL_DECIMAL = re.compile(r"-?[0-9]{1,15}(\.[0-9]{1,2})?")


def _timestamp(value: object) -> str:
    # fast path for the common canonical form 'YYYY-MM-DDTHH:MM:SS[.ffffff]Z'
    if isinstance(value, str) and value[-1:] == "Z" and len(value) in (20, 24, 27) and value[10] == "T":
        try:
            datetime.fromisoformat(value[:-1])  # validates the calendar and clock
            return value[:10] + " " + value[11:-1]
        except ValueError:
            raise ValueError(f"unparsable timestamp {value!r}") from None
    if not isinstance(value, str):
        raise ValueError(f"not an RFC 3339 string: {value!r}")
    text = value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"unparsable timestamp {value!r}") from None
    if "T" not in text.upper() or parsed.tzinfo is None:
        raise ValueError(f"not an RFC 3339 timestamp with a time zone: {value!r}")
    return parsed.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


def _decimal(value: object) -> str:
    if isinstance(value, str) and _CANONICAL_DECIMAL.fullmatch(value):
        return value
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"not a decimal number: {value!r}")
    try:
        number = Decimal(str(value).strip())
    except InvalidOperation:
        raise ValueError(f"not a decimal number: {value!r}") from None
    if not number.is_finite() or abs(number) >= MAX_DECIMAL:
        raise ValueError(f"out of range: {value!r}")
    if number != number.quantize(Decimal("0.01")):
        raise ValueError(f"more than 2 decimal places: {value!r}")
    return str(number)


def _integer(value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"not an integer: {value!r}")
    if not -(2**63) <= value < 2**63:
        raise ValueError(f"out of range: {value!r}")
    return str(value)


def _number(value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"not a number: {value!r}")
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"not a finite number: {value!r}")
    return repr(float(value))


def _text(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"not a non-empty string: {value!r}")
    return value


DECODERS: dict[str, Callable[[object], str]] = {
    "text": _text,
    "timestamp": _timestamp,
    "decimal": _decimal,
    "integer": _integer,
    "number": _number,
}


def decode_line(spec: Source, text: str) -> tuple[list[str], str | None]:
    """Typed values (as load text, NULL as \\N) and the decode error, if any."""
    nulls = [NULL] * len(spec.fields)
    if not text.strip():
        return nulls, "empty line"
    try:
        obj = json.loads(text)
    except ValueError as exc:
        return nulls, f"invalid JSON: {getattr(exc, 'msg', exc)}"
    if not isinstance(obj, dict):
        return nulls, "not a JSON object"
    values: list[str] = []
    errors: list[str] = []
    for f in spec.fields:
        raw = obj.get(f.name)
        if raw is None:
            errors.append(f"missing field {f.name}")
            values.append(NULL)
            continue
        try:
            values.append(DECODERS[f.kind](raw))
        except ValueError as exc:
            errors.append(f"{f.name}: {exc}")
            values.append(NULL)
    return values, ("; ".join(errors) if errors else None)
