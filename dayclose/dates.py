"""Days and instants from the command line, the flows' parameters and the generators.

dayclose works in UTC: a day is a UTC calendar day, an instant a naive UTC datetime.
"""

from __future__ import annotations

from datetime import UTC, date, datetime

from dayclose.errors import DaycloseError


def parse_date(text: str, what: str = "date") -> date:
    """A day from 'YYYY-MM-DD'; anything else is a DaycloseError naming `what`."""
    try:
        return datetime.strptime(str(text).strip(), "%Y-%m-%d").date()
    except ValueError:
        raise DaycloseError(f"{what} {text!r} is not a date: expected YYYY-MM-DD, e.g. 2026-11-23") from None


def parse_as_of(text: str | None, what: str = "--as-of") -> datetime:
    """An as-of instant in UTC (naive), from ISO 8601 text (an offset is converted), or now."""
    if not text:
        return utc_now()
    try:
        value = datetime.fromisoformat(str(text).strip().replace("Z", "+00:00"))
    except ValueError:
        raise DaycloseError(
            f"{what} {text!r} is not an instant: expected YYYY-MM-DDTHH:MM in UTC, e.g. 2026-11-24T00:30"
        ) from None
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value


def utc_now() -> datetime:
    """Now, in UTC, to the second."""
    return datetime.now(UTC).replace(tzinfo=None, microsecond=0)
