"""The message format and the landing lines the archiver makes of it (no NATS)."""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from dayclose.stream.archive import as_it_came, contract_lines
from dayclose.stream.wire import READING, WireError, _utc_ms, decode, encode_binary, encode_jsonl, rfc3339_ms

CONTRACT_KEYS = [
    "line_id",
    "plc_seq",
    "sku",
    "event_at",
    "received_at",
    "verdict",
    "fill_level_ml",
    "capper_torque_nm",
    "temperature_c",
]


RFC3339_MS = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")
SEEDS = Path(__file__).resolve().parent.parent / "seeds"
LINES = {r["line_id"] for r in csv.DictReader((SEEDS / "lines.csv").read_text().splitlines())}
SKUS = {r["sku"] for r in csv.DictReader((SEEDS / "skus.csv").read_text().splitlines())}


def contract_problem(line: str) -> str | None:
    """What breaks the units landing contract in a line (the contract as written, read here
    independently of the loader): None for a valid line."""
    doc = json.loads(line)
    if list(doc) != CONTRACT_KEYS:
        return f"keys {sorted(set(doc) ^ set(CONTRACT_KEYS))}"
    if doc["line_id"] not in LINES or doc["sku"] not in SKUS:
        return "unknown line or sku"
    if not isinstance(doc["plc_seq"], int) or isinstance(doc["plc_seq"], bool) or doc["plc_seq"] < 0:
        return "plc_seq"
    if not all(isinstance(doc[k], str) and RFC3339_MS.match(doc[k]) for k in ("event_at", "received_at")):
        return "timestamps"
    if doc["verdict"] not in ("good", "reject"):
        return f"verdict {doc['verdict']}"
    for key in CONTRACT_KEYS[-3:]:
        if isinstance(doc[key], bool) or not isinstance(doc[key], int | float) or not math.isfinite(doc[key]):
            return f"{key}: {doc[key]!r}"
    return None


def sample(n: int = 5):
    seq = np.arange(25_250_000_000, 25_250_000_000 + n)
    event = 1_795_000_000_000 + np.arange(n) * 37
    verdict = np.array([1, 0, 1, 1, 1][:n], dtype=np.uint8)
    sensors = np.array(
        [[330.4, 331.0, 329.9, 330.1, 330.0], [2.1, 2.2, 2.0, 2.15, 2.1], [3.9, 3.8, 4.0, 3.5, 3.6]]
    )
    return seq, event, verdict, sensors[:, :n]


@pytest.mark.parametrize("encoder", [encode_binary, encode_jsonl])
def test_round_trip(encoder) -> None:
    seq, event, verdict, sensors = sample()
    batch = decode(encoder("L-007-1", "IPA-330-BTL", seq, event, verdict, sensors, sent_ms=1))
    assert (batch.line_id, batch.sku) == ("L-007-1", "IPA-330-BTL")
    assert batch.seq.tolist() == seq.tolist() and batch.event_ms.tolist() == event.tolist()
    assert batch.verdict.tolist() == verdict.tolist() and not batch.problems
    np.testing.assert_allclose(batch.sensors, sensors, rtol=1e-6)


def test_binary_is_21_bytes_a_reading() -> None:
    seq, event, verdict, sensors = sample()
    payload = encode_binary("L-007-1", "IPA-330-BTL", seq, event, verdict, sensors, sent_ms=1)
    assert READING.itemsize == 21
    assert len(payload) == 32 + len("L-007-1") + len("IPA-330-BTL") + 5 * 21


@pytest.mark.parametrize(
    "payload, reason",
    [
        (b"", "undecodable payload"),
        (b"\x00\xffrandom", "undecodable payload"),
        (b"DCB1\x05", "truncated header"),
        (b"[1, 2]", "undecodable payload"),
        (b'{"a": 1', "no JSON object"),
    ],
)
def test_undecodable_payloads(payload: bytes, reason: str) -> None:
    with pytest.raises(WireError, match=reason):
        decode(payload)


def test_landing_lines_follow_the_contract_and_garbage_stays_visible() -> None:
    seq, event, verdict, sensors = sample()
    sensors[0, 2] = np.nan
    verdict[3] = 9
    batch = decode(encode_binary("L-007-1", "IPA-330-BTL", seq, event, verdict, sensors, sent_ms=1))
    lines = contract_lines(batch, "2026-11-23T21:14:05.120Z")
    assert all(line.endswith("}\n") and line.count("\n") == 1 for line in lines)
    docs = [json.loads(line) for line in lines]
    assert all(list(d) == CONTRACT_KEYS for d in docs)
    assert docs[0] == {
        "line_id": "L-007-1",
        "plc_seq": 25_250_000_000,
        "sku": "IPA-330-BTL",
        "event_at": "2026-11-18T11:06:40.000Z",
        "received_at": "2026-11-23T21:14:05.120Z",
        "verdict": "good",
        "fill_level_ml": 330.4,
        "capper_torque_nm": 2.1,
        "temperature_c": 3.9,
    }
    assert docs[1]["verdict"] == "reject"
    # valid lines, or visibly broken ones the nightly job dead-letters with a reason
    assert [contract_problem(line) for line in lines] == [
        None,
        None,
        "fill_level_ml: 'NaN'",
        "verdict code 9",
        None,
    ]


def test_json_lines_that_are_not_readings_are_kept_as_they_came() -> None:
    seq, event, verdict, sensors = sample(3)
    rows = encode_jsonl("L-007-1", "IPA-330-BTL", seq, event, verdict, sensors).split(b"\n")
    rows[1] = b'{"line_id": "L-007-1", "plc_seq": "x1", "sku": "IPA-330-BTL"}'
    batch = decode(b"\n".join(rows))
    assert batch.problems == {1: "plc_seq: not an integer >= 0: 'x1'"}
    lines = contract_lines(batch, "2026-11-23T21:14:05.120Z")
    assert json.loads(lines[1]) == {
        "line_id": "L-007-1",
        "plc_seq": "x1",
        "sku": "IPA-330-BTL",
        "received_at": "2026-11-23T21:14:05.120Z",
    }
    assert contract_problem(lines[1]).startswith("keys")
    wrapped = json.loads(as_it_came(b"\x00\x01", "undecodable payload", "2026-11-23T21:14:05.120Z", "s.t"))
    assert wrapped["undecodable_payload"] == "AAE=" and wrapped["subject"] == "s.t"
    assert contract_problem(json.dumps(wrapped)).startswith("keys")


@pytest.mark.parametrize("value", ["true", '"330.1"', "null", "[330.1]", "{}"])
def test_a_json_sensor_value_that_is_not_a_number_is_a_problem_of_its_line(value: str) -> None:
    seq, event, verdict, sensors = sample(3)
    rows = encode_jsonl("L-007-1", "IPA-330-BTL", seq, event, verdict, sensors).split(b"\n")
    rows[2] = rows[2].replace(b'"fill_level_ml": 329.9', b'"fill_level_ml": ' + value.encode())
    batch = decode(b"\n".join(rows))
    assert list(batch.problems) == [2] and batch.problems[2].startswith("fill_level_ml: not a number")
    assert batch.sensors[0, :2].tolist() == [330.4, 331.0]


def test_an_odd_reading_is_written_as_valid_json_with_its_values_as_they_came() -> None:
    raw = b'{"line_id": "NaN-Infinity", "plc_seq": 5, "fill_level_ml": NaN, "extra": [Infinity]}'
    doc = json.loads(as_it_came(raw, "unknown line", "2026-11-23T21:14:05.120Z"))
    assert doc == {
        "line_id": "NaN-Infinity",
        "plc_seq": 5,
        "fill_level_ml": "NaN",
        "extra": ["Infinity"],
        "received_at": "2026-11-23T21:14:05.120Z",
    }


def test_json_event_times_in_any_rfc3339_form_are_the_same_instants() -> None:
    """The compiled parser of the usual form (...T..:..:..mmmZ) equals numpy's reading of
    it, and other forms (offsets, no or more fraction digits) are the same instants."""
    rng = np.random.default_rng(7)
    ms = rng.integers(-2_000_000_000_000, 7_000_000_000_000, 20_000)  # 1906 to 2191
    stamps = rfc3339_ms(ms)
    assert _utc_ms(stamps).tolist() == ms.tolist()
    seq, event, verdict, sensors = sample(5)
    rows = encode_jsonl("L-007-1", "IPA-330-BTL", seq, event, verdict, sensors).split(b"\n")
    usual = rfc3339_ms(event)
    forms = [
        usual[0],
        usual[1].replace("Z", "+00:00"),
        "2026-11-18T12:06:40.074+01:00",  # an hour east of UTC
        usual[3][:-5] + ".111000Z",
        usual[4].replace("T", " "),
    ]
    rows = [row.replace(f'"{usual[i]}"'.encode(), f'"{forms[i]}"'.encode()) for i, row in enumerate(rows)]
    batch = decode(b"\n".join(rows))
    assert batch.problems == {}
    assert usual[2] == "2026-11-18T11:06:40.074Z" and batch.event_ms.tolist() == event.tolist()
    for bad, why in [("2026-02-29T00:00:00.000Z", "day"), ("2026-11-30T24:00:00.000Z", "hour")]:
        rows[2] = rows[0].replace(f'"{usual[0]}"'.encode(), f'"{bad}"'.encode())
        batch = decode(b"\n".join(rows))
        assert list(batch.problems) == [2] and batch.problems[2].startswith("event_at"), why
