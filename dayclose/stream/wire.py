"""The message format: a batch of one line's unit readings per message, binary or JSON lines.

A gateway sends one line's readings, at most 100 or 200 ms of them, in one message. Two
encodings, told apart by their first bytes:

**binary** (`DCB1`, the default; 21 bytes a reading + 32 + names a message), little-endian:

    header   magic "DCB1" | n u16 | len(line_id) u8 | len(sku) u8 | base_seq i64 | base_ms i64
             | sent_ms i64 | line_id utf-8 | sku utf-8
    reading  seq_delta u32 | t_delta_ms i32 | verdict u8 (1 good, 0 reject) | fill_level_ml f32
             | capper_torque_nm f32 | temperature_c f32                       (n times, packed)

    plc_seq = base_seq + seq_delta; event_at = base_ms + t_delta_ms (Unix ms, the PLC's clock);
    sent_ms is the gateway's clock when it sent the message. numpy reads the readings in place
    (frombuffer): decoding costs nanoseconds a reading.

**JSON lines**: one object a line with the units landing contract's fields but `received_at`
(`{"line_id", "plc_seq", "sku", "event_at": RFC 3339, "verdict": "good"|"reject",
"fill_level_ml", "capper_torque_nm", "temperature_c"}`). About 1 us a reading to decode:
the format decides the throughput (docs/streaming.md).

decode() raises WireError for a payload that is neither; a JSON line that is not a reading
is kept as a problem of that one reading, with its text, so nothing is dropped silently.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import chain
from operator import attrgetter
from typing import Annotated, Literal

import msgspec
import numba
import numpy as np

from dayclose.errors import EXIT_DATA, DaycloseError

MAGIC = b"DCB1"
HEADER = struct.Struct("<4sHBBqqq")
READING = np.dtype(
    [
        ("seq", "<u4"),
        ("t", "<i4"),
        ("verdict", "u1"),
        ("fill", "<f4"),
        ("torque", "<f4"),
        ("temp", "<f4"),
    ]
)
SENSORS = ("fill_level_ml", "capper_torque_nm", "temperature_c")
VERDICTS = {"good": 1, "reject": 0}
MAX_READINGS = 65_535
FORMATS = ("binary", "jsonl")


class WireError(DaycloseError):
    """A payload that is not a batch of readings in either encoding."""

    exit_code = EXIT_DATA


@dataclass
class Readings:
    """One message's readings, as columns (index i is the i-th reading)."""

    line_id: str
    sku: str
    seq: np.ndarray  # int64, the PLC's unit sequence number
    event_ms: np.ndarray  # int64, Unix ms on the PLC's clock
    verdict: np.ndarray  # uint8: 1 good, 0 reject, anything else is not a verdict
    sensors: np.ndarray  # float64 (3, n): fill_level_ml, capper_torque_nm, temperature_c
    sent_ms: int | None = None
    float32: bool = False  # binary: values were float32 (7 significant digits)
    problems: dict[int, str] = field(default_factory=dict)  # JSON lines not decodable as a reading
    raw: list[bytes] | None = None  # JSON lines: each reading's text

    def __len__(self) -> int:
        return len(self.seq)


def json_safe(value: object) -> object:
    """A value JSON can carry: a non-finite number as the string "NaN", "Infinity" or "-Infinity"
    (what the landing and the dead letters write for a broken sensor), containers walked."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if value != value else "Infinity" if value > 0 else "-Infinity"
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_safe(v) for v in value]
    return value


# -- encoding ------------------------------------------------------------------------------
def encode_binary(
    line_id: str,
    sku: str,
    seq: np.ndarray,
    event_ms: np.ndarray,
    verdict: np.ndarray,
    sensors: np.ndarray,
    sent_ms: int,
) -> bytes:
    n = len(seq)
    if not 0 < n <= MAX_READINGS:
        raise WireError(f"{n} readings in one message: expected 1 to {MAX_READINGS}")
    base_seq, base_ms = int(seq[0]), int(event_ms[0])
    out = np.empty(n, dtype=READING)
    seq_delta = np.asarray(seq, dtype=np.int64) - base_seq
    t_delta = np.asarray(event_ms, dtype=np.int64) - base_ms
    if seq_delta.min() < 0 or seq_delta.max() >= 2**32 or np.abs(t_delta).max() >= 2**31:
        raise WireError(f"{line_id}: readings too far apart for one message (plc_seq or event time)")
    out["seq"] = seq_delta
    out["t"] = t_delta
    out["verdict"] = verdict
    out["fill"], out["torque"], out["temp"] = sensors[0], sensors[1], sensors[2]
    line_b, sku_b = line_id.encode(), sku.encode()
    head = HEADER.pack(MAGIC, n, len(line_b), len(sku_b), base_seq, base_ms, int(sent_ms))
    return head + line_b + sku_b + out.tobytes()


def rfc3339_ms(ms: np.ndarray) -> list[str]:
    """RFC 3339 UTC text with milliseconds ("2026-11-23T21:14:05.120Z") of Unix ms, vectorised."""
    return [s + "Z" for s in np.datetime_as_string(np.asarray(ms, dtype="datetime64[ms]"), unit="ms")]


def encode_jsonl(
    line_id: str,
    sku: str,
    seq: np.ndarray,
    event_ms: np.ndarray,
    verdict: np.ndarray,
    sensors: np.ndarray,
    sent_ms: int | None = None,
) -> bytes:
    stamps = rfc3339_ms(event_ms)
    names = {1: "good", 0: "reject"}
    rows = [
        json.dumps(
            {
                "line_id": line_id,
                "plc_seq": int(s),
                "sku": sku,
                "event_at": t,
                "verdict": names.get(int(v), str(int(v))),
                "fill_level_ml": round(float(f), 3),
                "capper_torque_nm": round(float(q), 3),
                "temperature_c": round(float(c), 3),
            }
        )
        for s, t, v, f, q, c in zip(seq, stamps, verdict, sensors[0], sensors[1], sensors[2], strict=True)
    ]
    return "\n".join(rows).encode()


def encode(fmt: str, *args, **kwargs) -> bytes:
    if fmt == "binary":
        return encode_binary(*args, **kwargs)
    if fmt == "jsonl":
        return encode_jsonl(*args, **kwargs)
    raise DaycloseError(f"message format {fmt!r}: expected one of {', '.join(FORMATS)}")


# -- decoding ------------------------------------------------------------------------------
def decode(payload: bytes) -> Readings:
    """The readings of a message, or WireError naming why it is not a batch of readings."""
    if payload[:4] == MAGIC:
        return _decode_binary(payload)
    if payload[:1] == b"{":
        return _decode_jsonl(payload)
    raise WireError(f"undecodable payload ({len(payload)} bytes starting {payload[:8]!r}): not DCB1 nor JSON")


def _decode_binary(payload: bytes) -> Readings:
    if len(payload) < HEADER.size:
        raise WireError(f"truncated header ({len(payload)} bytes)")
    _, n, line_len, sku_len, base_seq, base_ms, sent_ms = HEADER.unpack_from(payload)
    start = HEADER.size + line_len + sku_len
    if len(payload) != start + n * READING.itemsize:
        raise WireError(
            f"length {len(payload)} bytes, expected {start + n * READING.itemsize} for {n} readings"
        )
    try:
        line_id = payload[HEADER.size : HEADER.size + line_len].decode()
        sku = payload[HEADER.size + line_len : start].decode()
    except UnicodeDecodeError:
        raise WireError("line_id or sku is not UTF-8") from None
    rows = np.frombuffer(payload, dtype=READING, count=n, offset=start)
    sensors = np.empty((3, n))
    sensors[0], sensors[1], sensors[2] = rows["fill"], rows["torque"], rows["temp"]
    return Readings(
        line_id=line_id,
        sku=sku,
        seq=rows["seq"].astype(np.int64) + base_seq,
        event_ms=rows["t"].astype(np.int64) + base_ms,
        verdict=rows["verdict"],
        sensors=sensors,
        sent_ms=sent_ms,
        float32=True,
    )


def _parse_time_ms(text: object) -> int:
    if not isinstance(text, str):
        raise ValueError(f"event_at: not an RFC 3339 string: {text!r}")
    parsed = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
    if parsed.tzinfo is None:
        raise ValueError(f"event_at: no time zone: {text!r}")
    return int(parsed.astimezone(UTC).timestamp() * 1000)


_STAMP = b"0000-00-00T00:00:00.000Z"  # the form the fast path reads: UTC, milliseconds
_FORM = np.frombuffer(_STAMP, dtype=np.uint8)
_DIGITS = np.equal(_FORM, ord("0"))  # where a digit goes


@numba.njit(cache=True, nogil=True)
def _stamps_ms(chars: np.ndarray, digits: np.ndarray, form: np.ndarray) -> np.ndarray:
    """Unix ms of n stamps of the form YYYY-MM-DDTHH:MM:SS.mmmZ (chars: n x 24 bytes), or an
    empty array when one is not of that form or not a real date and time."""
    n = chars.shape[0]
    out = np.empty(n, dtype=np.int64)
    for i in range(n):
        for j in range(24):
            c = chars[i, j]
            if (digits[j] and not 48 <= c <= 57) or (not digits[j] and c != form[j]):
                return np.empty(0, dtype=np.int64)
        d = chars[i] - 48
        year = d[0] * 1000 + d[1] * 100 + d[2] * 10 + d[3]
        month, day = d[5] * 10 + d[6], d[8] * 10 + d[9]
        hour, minute, second = d[11] * 10 + d[12], d[14] * 10 + d[15], d[17] * 10 + d[18]
        milli = d[20] * 100 + d[21] * 10 + d[22]
        leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
        days_in = (31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
        if not (
            1 <= month <= 12 and 1 <= day <= days_in[month - 1] and hour < 24 and minute < 60 and second < 60
        ):
            return np.empty(0, dtype=np.int64)
        y = year - 1 if month <= 2 else year  # days from 1970-01-01 (H. Hinnant's days_from_civil)
        era = y // 400
        yoe = y - era * 400
        doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
        doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
        days = era * 146097 + doe - 719468
        out[i] = ((days * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + milli
    return out


def _utc_ms(stamps: list[str]) -> np.ndarray | None:
    """Unix ms of RFC 3339 stamps in UTC ("...Z"); None when one is not (the caller then
    decodes line by line and names it). The usual form is parsed compiled; another "...Z"
    form (no or more fraction digits) by numpy."""
    joined = "".join(stamps).encode()
    n = len(stamps)
    if len(joined) == 24 * n:
        parsed = _stamps_ms(np.frombuffer(joined, dtype=np.uint8).reshape(n, 24), _DIGITS, _FORM)
        if len(parsed) == n:
            return parsed
    if [t[-1:] for t in stamps].count("Z") != n:
        return None
    try:
        return np.array([t[:-1] for t in stamps], dtype="datetime64[ms]").astype(np.int64)
    except ValueError:
        return None


def warm_up() -> None:
    """Load the compiled stamp parser (compile it, on first use after an install)."""
    _utc_ms(["2026-01-01T00:00:00.000Z"])


class _JsonReading(msgspec.Struct, gc=False):
    """A JSON line as the fast path takes it: every field present with its type (msgspec
    checks them in C while it parses); unknown keys are ignored, as the landing does."""

    line_id: str
    plc_seq: Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]
    sku: str
    event_at: str
    verdict: Literal["good", "reject"]
    fill_level_ml: float
    capper_torque_nm: float
    temperature_c: float


_JSON_READINGS = msgspec.json.Decoder(list[_JsonReading])
_SENSOR_FIELDS = attrgetter(*SENSORS)


def _columns(payload: bytes) -> Readings | None:
    """The fast path: every line a well-formed reading of one line and SKU, stamped in UTC
    ("...Z"); None otherwise (then each line is decoded on its own, so a bad one is named
    and the rest kept). One parse for the whole message, columns taken with C iterators."""
    body = payload[:-1] if payload.endswith(b"\n") else payload
    try:
        rows = _JSON_READINGS.decode(b"[" + body.replace(b"\n", b",") + b"]")
    except msgspec.MsgspecError:
        return None
    n = len(rows)
    if n == 0:
        return None
    lines, skus = list(map(attrgetter("line_id"), rows)), list(map(attrgetter("sku"), rows))
    if lines.count(lines[0]) != n or skus.count(skus[0]) != n:
        return None
    stamps = list(map(attrgetter("event_at"), rows))
    event_ms = _utc_ms(stamps)
    if event_ms is None:
        return None
    verdicts = list(map(attrgetter("verdict"), rows))
    good = verdicts.count("good")
    verdict = (
        np.ones(n, dtype=np.uint8)
        if good == n
        else np.fromiter((VERDICTS[v] for v in verdicts), dtype=np.uint8, count=n)
    )
    values = np.fromiter(chain.from_iterable(map(_SENSOR_FIELDS, rows)), dtype=np.float64, count=3 * n)
    return Readings(
        line_id=lines[0],
        sku=skus[0],
        seq=np.fromiter(map(attrgetter("plc_seq"), rows), dtype=np.int64, count=n),
        event_ms=event_ms,
        verdict=verdict,
        sensors=values.reshape(n, 3).T.copy(),
    )


def _decode_jsonl(payload: bytes) -> Readings:
    regular = _columns(payload)
    if regular is not None:
        return regular
    raw = payload.split(b"\n")
    if raw and raw[-1] == b"":
        raw.pop()
    docs: list[object] = []
    for text in raw:  # line by line (the standard library), so a broken line is named alone
        try:
            docs.append(json.loads(text))
        except ValueError as exc:
            docs.append(f"invalid JSON: {getattr(exc, 'msg', exc)}")
    n = len(docs)
    if n == 0:
        raise WireError("empty JSON lines payload")
    problems: dict[int, str] = {}
    first = next((d for d in docs if isinstance(d, dict)), None)
    if first is None:
        raise WireError(f"no JSON object among {n} lines")
    line_id, sku = first.get("line_id"), first.get("sku")
    seq = np.zeros(n, dtype=np.int64)
    verdict = np.full(n, 255, dtype=np.uint8)
    sensors = np.full((3, n), np.nan)
    stamps: list[str] = [""] * n
    for i, doc in enumerate(docs):
        if not isinstance(doc, dict):
            problems[i] = doc if isinstance(doc, str) else "not a JSON object"
            continue
        try:
            if doc.get("line_id") != line_id or doc.get("sku") != sku:
                raise ValueError(
                    f"line_id/sku {doc.get('line_id')}/{doc.get('sku')} differ from the message's"
                )
            s = doc["plc_seq"]
            if isinstance(s, bool) or not isinstance(s, int) or s < 0:
                raise ValueError(f"plc_seq: not an integer >= 0: {s!r}")
            seq[i] = s
            verdict[i] = VERDICTS.get(doc["verdict"], 255)
            if verdict[i] == 255:
                raise ValueError(f"verdict not in (good, reject): {doc['verdict']!r}")
            for k, name in enumerate(SENSORS):
                v = doc[name]
                if isinstance(v, bool) or not isinstance(v, int | float):
                    raise ValueError(f"{name}: not a number: {v!r}")
                sensors[k, i] = v
            stamps[i] = doc["event_at"]
        except KeyError as exc:
            problems[i] = f"missing field {exc.args[0]}"
        except ValueError as exc:
            problems[i] = str(exc)
    event_ms = np.zeros(n, dtype=np.int64)
    good = [i for i in range(n) if i not in problems]
    try:  # vectorised when every stamp is "...Z"
        texts = [stamps[i] for i in good]
        if not all(isinstance(t, str) and t.endswith("Z") for t in texts):
            raise ValueError
        event_ms[good] = np.array([t[:-1] for t in texts], dtype="datetime64[ms]").astype(np.int64)
    except ValueError:
        for i in good:
            try:
                event_ms[i] = _parse_time_ms(stamps[i])
            except (ValueError, TypeError) as exc:
                problems[i] = f"event_at: {exc}" if not str(exc).startswith("event_at") else str(exc)
    return Readings(
        line_id=str(line_id),
        sku=str(sku),
        seq=seq,
        event_ms=event_ms,
        verdict=verdict,
        sensors=sensors,
        problems=problems,
        raw=raw,
    )
