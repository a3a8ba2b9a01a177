"""An independent reading of the landing contract, in Python, to check the SQL against.

It shares no code with macros/cross_db/landing_contract.sql: a hand-written tokenizer for flat JSON objects
(Python's json module accepts lone surrogates and gives no raw tokens), the calendar from
`datetime`, and the business rules from the seeds' CSV files. `judge` says what the
warehouse must make of one line: its dead-letter kind, or its typed values.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

SEEDS = Path(__file__).resolve().parent.parent / "seeds"
FIELDS = {
    "sales": {
        "event_id": "id",
        "shop_id": "id",
        "sold_at": "timestamp",
        "received_at": "timestamp",
        "amount": "decimal",
    },
    "units": {
        "line_id": "id",
        "plc_seq": "sequence",
        "sku": "id",
        "event_at": "timestamp",
        "received_at": "timestamp",
        "verdict": "id",
        "fill_level_ml": "number",
        "capper_torque_nm": "number",
        "temperature_c": "number",
    },
}
MAX_SALE_AMOUNT = Decimal(100_000)
WS = " \t\n\r"
NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
ID = re.compile(r"[A-Za-z0-9_.:/-]{1,128}")
TIMESTAMP = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})"
)
DECIMAL = re.compile(r"-?[0-9]{1,15}(?:\.[0-9]{1,2})?")
SEQUENCE = re.compile(r"0|[1-9][0-9]*")
FINITE = re.compile(r"-?(?:0|[1-9][0-9]{0,15})(?:\.[0-9]{1,15})?(?:[eE][+-]?[0-9]{1,2})?")


class NotFlat(ValueError):
    """The text is not one flat JSON object by the contract."""


@dataclass(frozen=True)
class Token:
    kind: str  # string | number | literal
    raw: str  # as written, quotes included


def _string_end(text: str, start: int) -> int:
    """The index after the string literal starting at text[start] == '"'; checks its escapes."""
    i = start + 1
    while i < len(text):
        c = text[i]
        if c == '"':
            return i + 1
        if ord(c) < 0x20:
            raise NotFlat("control character in a string")
        if c == "\\":
            e = text[i + 1 : i + 2]
            if e in ('"', "\\", "/", "b", "f", "n", "r", "t"):
                i += 2
                continue
            if e != "u" or not re.fullmatch(r"[0-9a-fA-F]{4}", text[i + 2 : i + 6]):
                raise NotFlat("bad escape")
            code = int(text[i + 2 : i + 6], 16)
            if code == 0:
                raise NotFlat("\\u0000")
            if 0xD800 <= code <= 0xDBFF:
                low = text[i + 6 : i + 12]
                if not re.fullmatch(r"\\u[dD][c-fC-F][0-9a-fA-F]{2}", low):
                    raise NotFlat("unpaired high surrogate")
                i += 12
                continue
            if 0xDC00 <= code <= 0xDFFF:
                raise NotFlat("unpaired low surrogate")
            i += 6
            continue
        i += 1
    raise NotFlat("unterminated string")


def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in WS:
        i += 1
    return i


def flat_object(text: str) -> list[tuple[str, Token]]:
    """The (key, value token) pairs of a flat JSON object, in order; NotFlat otherwise."""
    i = _skip(text, 0)
    if text[i : i + 1] != "{":
        raise NotFlat("not an object")
    i = _skip(text, i + 1)
    members: list[tuple[str, Token]] = []
    if text[i : i + 1] == "}":
        i += 1
    else:
        while True:
            if text[i : i + 1] != '"':
                raise NotFlat("key expected")
            end = _string_end(text, i)
            key = text[i + 1 : end - 1]
            if "\\" in key:
                raise NotFlat("escape in a key")
            i = _skip(text, end)
            if text[i : i + 1] != ":":
                raise NotFlat("colon expected")
            i = _skip(text, i + 1)
            if text[i : i + 1] == '"':
                end = _string_end(text, i)
                token = Token("string", text[i:end])
            else:
                match = NUMBER.match(text, i)
                literal = next((w for w in ("true", "false", "null") if text.startswith(w, i)), None)
                if match and match.end() > i:
                    end, token = match.end(), Token("number", match.group())
                elif literal:
                    end, token = i + len(literal), Token("literal", literal)
                else:
                    raise NotFlat("value expected")
            members.append((key, token))
            i = _skip(text, end)
            if text[i : i + 1] == ",":
                i = _skip(text, i + 1)
                continue
            if text[i : i + 1] == "}":
                i += 1
                break
            raise NotFlat("comma or brace expected")
    if _skip(text, i) != len(text):
        raise NotFlat("text after the object")
    return members


def _timestamp(raw: str) -> datetime | None:
    m = TIMESTAMP.fullmatch(raw)
    if not m:
        return None
    year, month, day, hour, minute, second = (int(m.group(k)) for k in range(1, 7))
    if year < 1000 or hour > 23 or minute > 59 or second > 59:
        return None
    offset = m.group(8)
    if offset not in "Zz" and (int(offset[1:3]) > 14 or int(offset[4:6]) > 59):
        return None
    try:
        local = datetime(year, month, day, hour, minute, second, int((m.group(7) or ".0")[1:7].ljust(6, "0")))
    except ValueError:  # not a calendar day
        return None
    minutes = (
        0
        if offset in ("Z", "z")
        else (1 if offset[0] == "+" else -1) * (int(offset[1:3]) * 60 + int(offset[4:6]))
    )
    return local - timedelta(minutes=minutes)


def _value(token: Token, kind: str) -> object | None:
    """The typed value of a token by its field's kind; None when it breaks the rule."""
    if kind == "id":
        return token.raw[1:-1] if token.kind == "string" and ID.fullmatch(token.raw[1:-1]) else None
    if kind == "timestamp":
        return _timestamp(token.raw[1:-1]) if token.kind == "string" else None
    if kind == "decimal":
        text = token.raw[1:-1] if token.kind == "string" else token.raw
        return Decimal(text) if token.kind != "literal" and DECIMAL.fullmatch(text) else None
    if kind == "sequence":
        ok = token.kind == "number" and SEQUENCE.fullmatch(token.raw) and int(token.raw) < 2**63
        return int(token.raw) if ok else None
    if kind == "number":
        return float(token.raw) if token.kind == "number" and FINITE.fullmatch(token.raw) else None
    raise ValueError(kind)


@dataclass(frozen=True)
class Verdict:
    """What the warehouse must make of a line: a dead letter of `kind`, or `values`."""

    kind: str | None
    values: dict[str, object] | None = None
    new_fields: str | None = None  # keys besides the fields, sorted, joined by ', '

    @property
    def is_valid(self) -> bool:
        return self.kind is None


def _seed_column(name: str, column: str) -> set[str]:
    with open(SEEDS / f"{name}.csv") as fh:
        return {row[column] for row in csv.DictReader(fh)}


SHOPS = _seed_column("shops", "shop_id")
SKUS = _seed_column("skus", "sku")
with open(SEEDS / "lines.csv") as _fh:
    COMMISSIONED = {
        row["line_id"]: datetime.fromisoformat(row["commissioned_at"]) for row in csv.DictReader(_fh)
    }


def decode(source: str, line: bytes, strict: bool = False) -> Verdict:
    """The contract alone (macros/cross_db/landing_contract.sql): decode_error_kind, or the typed
    fields. `strict`: the source's strict_fields (a key besides the fields is a dead letter)."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return Verdict("not_text")
    if "\x00" in text:
        return Verdict("not_text")
    if text.strip(WS) == "":
        return Verdict("empty_line")
    try:
        members = flat_object(text)
    except NotFlat:
        return Verdict("not_json_object")
    keys = [k for k, _ in members]
    fields = FIELDS[source]
    new_fields = ", ".join(sorted(set(keys) - set(fields))) or None
    if len(set(keys)) < len(keys):
        return Verdict("duplicate_field", new_fields=new_fields)
    if new_fields and strict:
        return Verdict("unknown_field", new_fields=new_fields)
    tokens = dict(members)
    if any(name not in tokens or tokens[name].raw == "null" for name in fields):
        return Verdict("missing_field", new_fields=new_fields)
    values = {name: _value(tokens[name], kind) for name, kind in fields.items()}
    if any(v is None for v in values.values()):
        return Verdict("bad_value", new_fields=new_fields)
    return Verdict(None, values, new_fields)


def judge(source: str, line: bytes, received_by: datetime | None = None, strict: bool = False) -> Verdict:
    """The contract, then the source's business rules (its validated-lines model).
    `received_by`: the end of the line's batch's arrival hour plus max_clock_skew_minutes."""
    decoded = decode(source, line, strict)
    if not decoded.is_valid:
        return decoded
    v = decoded.values
    assert v is not None
    if source == "sales":
        if v["shop_id"] not in SHOPS:
            return Verdict("unknown_shop")
        if v["amount"] < 0:
            return Verdict("negative_amount")
        if v["amount"] > MAX_SALE_AMOUNT:
            return Verdict("absurd_amount")
        if received_by is not None and v["received_at"] > received_by:
            return Verdict("from_the_future")
        if v["sold_at"] > v["received_at"]:
            return Verdict("sold_after_received")
        return decoded
    if v["line_id"] not in COMMISSIONED:
        return Verdict("unknown_line")
    if v["sku"] not in SKUS:
        return Verdict("unknown_sku")
    if v["verdict"] not in ("good", "reject"):
        return Verdict("unknown_verdict")
    if v["event_at"] < COMMISSIONED[v["line_id"]]:
        return Verdict("before_commissioning")
    if received_by is not None and v["received_at"] > received_by:
        return Verdict("from_the_future")
    if v["event_at"] > v["received_at"]:
        return Verdict("produced_after_received")
    return decoded


def utc(value: datetime) -> datetime:
    """A naive UTC datetime from an aware or naive one (the warehouse stores naive UTC)."""
    return value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo else value
