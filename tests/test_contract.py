"""The landing contract, line by line, on both engines: a corpus of malformed lines with the
outcome each must have, and thousands of random and mutated lines against an independent
reading of the contract (tests/contract_oracle.py).

Every line of a loaded batch must end up counted exactly as the contract allows, or
dead-lettered with a reason; its raw bytes are kept exactly; and no line stops the run.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import pytest

from dayclose.jobs import run_nightly
from dayclose.settings import Target
from tests import contract_oracle as oracle
from tests.helpers import split_lines, stored_lines, table, ts, write_raw_batch

HOUR = "2026-11-23T10"
T, R = "2026-11-23T10:00:00Z", "2026-11-23T10:05:00Z"
RECEIVED_BY = datetime(2026, 11, 23, 11, 15)  # HOUR's end plus max_clock_skew_minutes (15)


def sale_line(**fields: object) -> bytes:
    doc: dict[str, object] = {
        "event_id": "e",
        "shop_id": "S-001",
        "sold_at": T,
        "received_at": R,
        "amount": "12.50",
    }
    doc.update(fields)
    return json.dumps({k: v for k, v in doc.items() if v is not ...}).encode()


def unit_line(**fields: object) -> bytes:
    doc: dict[str, object] = {
        "line_id": "L-001-1",
        "plc_seq": 1,
        "sku": "PILS-330-BTL",
        "event_at": T,
        "received_at": R,
        "verdict": "good",
        "fill_level_ml": 330.5,
        "capper_torque_nm": 2.1,
        "temperature_c": 3.0,
    }
    doc.update(fields)
    return json.dumps({k: v for k, v in doc.items() if v is not ...}).encode()


NESTED = b'{"event_id": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"

# (what the line is, its bytes, the dead-letter kind it must get or None, a part of its reason)
SALES_CORPUS: list[tuple[str, bytes, str | None, str]] = [
    ("canonical", sale_line(event_id="ok-1"), None, ""),
    ("offset timestamp", sale_line(event_id="ok-2", sold_at="2026-11-23T11:00:00+01:00"), None, ""),
    # offsets with minutes, and one that takes the local day back to the UTC day before
    ("offset +05:45", sale_line(event_id="ok-7", sold_at="2026-11-23T15:45:00+05:45"), None, ""),
    ("offset -00:30", sale_line(event_id="ok-8", sold_at="2026-11-23T09:30:00-00:30"), None, ""),
    ("offset +14:00", sale_line(event_id="ok-9", sold_at="2026-11-24T00:00:00+14:00"), None, ""),
    # RFC 3339 5.6: T and Z in either case, any number of fraction digits (Go's RFC3339Nano,
    # Java's Instant.toString()); microseconds kept by truncation: the day's last nanosecond
    # stays in its day
    ("lower-case t and z", sale_line(event_id="ok-10", sold_at="2026-11-23t10:00:00z"), None, ""),
    (
        "nine fraction digits",
        sale_line(event_id="ok-11", sold_at="2026-11-22T23:59:59.999999999Z"),
        None,
        "",
    ),
    (
        "one fraction digit, offset",
        sale_line(event_id="ok-12", sold_at="2026-11-23T06:30:00.5-03:30"),
        None,
        "",
    ),
    ("amount as a JSON number", sale_line(event_id="ok-3").replace(b'"12.50"', b"12.5"), None, ""),
    # a number JSON does not allow, in a line of the fields in their order (DuckDB's plain lines)
    ("amount with a leading zero", sale_line().replace(b'"12.50"', b"012.50"), "not_json_object", ""),
    ("amount -00", sale_line().replace(b'"12.50"', b"-00"), "not_json_object", ""),
    ("CRLF line end", sale_line(event_id="ok-4") + b"\r", None, ""),
    # U+0085 (NEL) is no JSON blank; Java's $ (Spark's regular expressions) took it for a line end
    ("NEL after the object", sale_line(event_id="nel-1") + "\u0085".encode(), "not_json_object", ""),
    ("whitespace around", b" \t" + sale_line(event_id="ok-5") + b"  ", None, ""),
    ("a valid line of 3 MB", sale_line(event_id="ok-6").replace(b", ", b"," + b" " * 600_000), None, ""),
    (
        "unicode escape in an id",
        sale_line(event_id="\\u0041").replace(b"\\\\u0041", b"\\u0041"),
        "bad_value",
        "event_id",
    ),
    ("empty line", b"", "empty_line", "empty line"),
    ("whitespace only", b" \t ", "empty_line", "empty line"),
    ("the text \\N", b"\\N", "not_json_object", "not a JSON object"),
    ("field holding \\N", sale_line(shop_id="\\N"), "bad_value", "shop_id: not an id"),
    ("truncated JSON", sale_line()[:40], "not_json_object", "truncated"),
    ("a JSON array", b'["e", "S-001"]', "not_json_object", "array"),
    ("a nested object", sale_line(amount={"value": "1.00"}), "not_json_object", "object or array"),
    ("nested 50,000 levels", NESTED, "not_json_object", ""),
    ("NaN amount", sale_line().replace(b'"12.50"', b"NaN"), "not_json_object", "NaN"),
    ("Infinity amount", sale_line().replace(b'"12.50"', b"-Infinity"), "not_json_object", "NaN and Infinity"),
    (
        "duplicated key",
        sale_line(amount="10.00").replace(b"}", b', "amount": "90000.00"}'),
        "duplicate_field",
        "duplicate field amount",
    ),
    ("a new key", sale_line(currency="EUR"), None, ""),
    ("a new key and 1 MB", sale_line(event_id="ok-7", pos_version="4.2", padding="x" * 1_000_000), None, ""),
    ("missing field", sale_line(amount=...), "missing_field", "missing field amount"),
    ("null field", sale_line(shop_id=None), "missing_field", "missing field shop_id (null)"),
    ("exponent amount", sale_line(amount="1e3"), "bad_value", "amount: not a decimal"),
    # numbers and escaped strings are read as written, not as a JSON parser rewrites them
    (
        "three decimals as a JSON number",
        sale_line().replace(b'"12.50"', b"12.500"),
        "bad_value",
        "amount: not a",
    ),
    ("exponent as a JSON number", sale_line().replace(b'"12.50"', b"1E2"), "bad_value", "amount: not a"),
    (
        "escaped slash in an id",
        sale_line(shop_id="S/001").replace(b"S/001", b"S\\/001"),
        "bad_value",
        "shop_id",
    ),
    ("underscore amount", sale_line(amount="1_000.00"), "bad_value", "amount"),
    ("Arabic-Indic digits", sale_line(amount="\u0661\u0662"), "bad_value", "amount"),
    ("fullwidth digits", sale_line(amount="\uff11\uff12.00"), "bad_value", "amount"),
    ("three decimals", sale_line(amount="1.234"), "bad_value", "amount"),
    ("plus sign", sale_line(amount="+12.50"), "bad_value", "amount"),
    ("16 integer digits", sale_line(amount="1234567890123456"), "bad_value", "amount"),
    ("amount true", sale_line(amount=True), "bad_value", "amount"),
    ("no time zone", sale_line(sold_at="2026-11-23T10:00:00"), "bad_value", "sold_at: not an RFC 3339"),
    ("ISO week date", sale_line(sold_at="2026-W48-1T10:00:00Z"), "bad_value", "sold_at"),
    ("basic format", sale_line(sold_at="20261123T100000Z"), "bad_value", "sold_at"),
    ("offset then Z", sale_line(sold_at="2026-11-23T10:00:00+01:00Z"), "bad_value", "sold_at"),
    ("February 30", sale_line(sold_at="2026-02-30T10:00:00Z"), "bad_value", "sold_at"),
    ("hour 24", sale_line(sold_at="2026-11-23T24:00:00Z"), "bad_value", "sold_at"),
    # a clock running ahead: received after the batch arrived, beyond max_clock_skew_minutes
    (
        "received in 2099",
        sale_line(sold_at="2099-01-01T00:00:00Z", received_at="2099-01-01T00:00:00Z"),
        "from_the_future",
        "received_at after its batch arrived",
    ),
    ("received 20 min after the hour", sale_line(received_at="2026-11-23T11:20:00Z"), "from_the_future", ""),
    (
        "received 14 min after the hour",
        sale_line(event_id="ok-13", received_at="2026-11-23T11:14:00Z"),
        None,
        "",
    ),
    ("space for T", sale_line(sold_at="2026-11-23 10:00:00Z"), "bad_value", "sold_at"),
    ("a dot without digits", sale_line(sold_at="2026-11-23T10:00:00.Z"), "bad_value", "sold_at"),
    ("offset +15:00", sale_line(sold_at="2026-11-23T10:00:00+15:00"), "bad_value", "sold_at"),
    ("lone surrogate escape", sale_line().replace(b'"e"', b'"\\ud800"'), "not_json_object", "surrogate"),
    ("NUL escape", sale_line().replace(b'"e"', b'"a\\u0000"'), "not_json_object", "\\u0000"),
    ("escape in a key", sale_line().replace(b'"amount"', b'"amo\\u0075nt"'), "not_json_object", ""),
    ("invalid UTF-8", sale_line().replace(b'"e"', b'"\xff\xfe"'), "not_text", "not valid UTF-8"),
    ("a NUL byte", sale_line().replace(b'"e"', b'"a\x00b"'), "not_text", "NUL"),
    ("a control byte in a string", sale_line().replace(b'"e"', b'"a\x01b"'), "not_json_object", ""),
    ("COPY's end-of-data marker", b"\\.", "not_json_object", ""),
    ("a line of 17 MB", b"x" * (17 << 20), "not_json_object", "not a JSON object"),
    ("128-character id", sale_line(event_id="e" * 128), None, ""),
    ("129-character id", sale_line(event_id="e" * 129), "bad_value", "event_id"),
    ("unknown shop", sale_line(shop_id="S-999"), "unknown_shop", "unknown shop_id S-999"),
    ("negative amount", sale_line(amount="-1.00"), "negative_amount", "negative amount"),
    ("absurd amount", sale_line(amount="100000.01"), "absurd_amount", "absurd amount"),
    (
        "sold after received",
        sale_line(sold_at="2026-11-23T10:30:00Z"),
        "sold_after_received",
        "sold_at after",
    ),
]

UNITS_CORPUS: list[tuple[str, bytes, str | None, str]] = [
    ("canonical", unit_line(plc_seq=11), None, ""),
    ("largest plc_seq", unit_line(plc_seq=9223372036854775807), None, ""),
    ("exponent sensor", unit_line(plc_seq=12, temperature_c=3e-1).replace(b"0.3", b"3e-1"), None, ""),
    ("CRLF line end", unit_line(plc_seq=13) + b"\r", None, ""),
    ("offset timestamp", unit_line(plc_seq=14, event_at="2026-11-23T05:00:00-05:00"), None, ""),
    ("empty line", b"", "empty_line", ""),
    ("the text \\N", b"\\N", "not_json_object", ""),
    ("truncated JSON", unit_line()[:60], "not_json_object", "truncated"),
    ("a JSON array", b"[1, 2]", "not_json_object", "array"),
    ("nested 50,000 levels", NESTED, "not_json_object", ""),
    ("NaN sensor", unit_line().replace(b"330.5", b"NaN"), "not_json_object", "NaN"),
    (
        "duplicated verdict",
        unit_line(verdict="reject").replace(b"}", b', "verdict": "good"}'),
        "duplicate_field",
        "duplicate field verdict",
    ),
    ("a new key", unit_line(shift="night"), None, ""),
    ("missing plc_seq", unit_line(plc_seq=...), "missing_field", "missing field plc_seq"),
    ("null sensor", unit_line(temperature_c=None), "missing_field", "temperature_c (null)"),
    ("negative plc_seq", unit_line(plc_seq=-5), "bad_value", "plc_seq: not an integer"),
    ("plc_seq over a bigint", unit_line(plc_seq=9223372036854775808), "bad_value", "plc_seq"),
    ("plc_seq of 20 digits", unit_line(plc_seq=10000000000000000000), "bad_value", "plc_seq"),
    ("plc_seq as a string", unit_line(plc_seq="15"), "bad_value", "plc_seq"),
    ("plc_seq with a leading zero", unit_line(plc_seq=7).replace(b": 7,", b": 007,"), "not_json_object", ""),
    ("sensor with a leading zero", unit_line().replace(b"330.5", b"0330.5"), "not_json_object", ""),
    ("plc_seq with decimals", unit_line(plc_seq=1.5), "bad_value", "plc_seq"),
    ("sensor as a string", unit_line(temperature_c="ERR"), "bad_value", "temperature_c: not a finite number"),
    ("sensor 1e400", unit_line().replace(b"330.5", b"1e400"), "bad_value", "fill_level_ml"),
    (
        "sensor with 17 digits",
        unit_line().replace(b"330.5", b"12345678901234567"),
        "bad_value",
        "fill_level_ml",
    ),
    ("no time zone", unit_line(event_at="2026-11-23T10:00:00.120"), "bad_value", "event_at"),
    ("nine fraction digits", unit_line(plc_seq=7, event_at="2026-11-23T10:00:00.123456789+01:00"), None, ""),
    ("leap second", unit_line(event_at="2026-11-23T10:00:60Z"), "bad_value", "event_at"),
    (
        "PLC a year ahead",
        unit_line(event_at="2027-11-23T10:00:00Z", received_at="2027-11-23T10:00:01Z"),
        "from_the_future",
        "max_clock_skew",
    ),
    ("invalid UTF-8", unit_line().replace(b"L-001-1", b"L-\xc0\xaf"), "not_text", "UTF-8"),
    ("a NUL byte", unit_line() + b"\x00", "not_text", "NUL"),
    ("verdict maybe", unit_line(verdict="maybe"), "unknown_verdict", "verdict not in (good, reject): maybe"),
    ("unknown line", unit_line(line_id="L-999-1"), "unknown_line", "unknown line_id L-999-1"),
    ("unknown SKU", unit_line(sku="MYSTERY-BREW"), "unknown_sku", "unknown sku MYSTERY-BREW"),
    (
        "before commissioning",
        unit_line(event_at="2001-01-01T00:00:00Z"),
        "before_commissioning",
        "commissioned",
    ),
    (
        "produced after received",
        unit_line(event_at="2026-11-23T11:00:00Z"),
        "produced_after_received",
        "after",
    ),
]


def corpus_files(corpus: list[tuple[str, bytes, str | None, str]]) -> dict[str, bytes]:
    """The corpus in two files: all but the last line in part-0000 (one line each); the last
    line alone in part-0001 after a byte-order mark, without a final newline."""
    lines = [line for _, line, _, _ in corpus]
    return {
        "part-0000.jsonl": b"".join(line + b"\n" for line in lines[:-1]),
        "part-0001.jsonl": b"\xef\xbb\xbf" + lines[-1],
    }


def check_batch(
    engine: Target, source: str, files: dict[str, bytes], strict: bool = False
) -> dict[tuple[str, int], oracle.Verdict]:
    """Load and build a batch; check every line against the oracle; return the oracle's verdicts.
    `strict`: the run sets <source>_strict_fields."""
    write_raw_batch(LANDING[0], source, HOUR, files)
    strict_var = {f"{source}_strict_fields": True} if strict else None
    summary = run_nightly(source, engine, LANDING[0], ts("2026-11-24T00:30"), quiet=True, dbt_vars=strict_var)
    assert summary.build is not None and not summary.load.refused, summary.lines()
    table_name = {"sales": "sale_lines", "units": "unit_lines"}[source]
    expected = {
        (name, n): line for name, blob in files.items() for n, line in enumerate(split_lines(blob), start=1)
    }
    # the raw text, byte for byte, with its file and line number
    assert stored_lines(engine, table_name, HOUR) == expected
    entity = {"sales": "sale", "units": "unit"}[source]
    verdicts = {
        (f, int(n)): (kind, reason)
        for f, n, kind, reason in table(
            engine,
            f"select file_name, line_number, dead_letter_kind, dead_letter_reason "
            f"from {{schema}}.int_{entity}_lines_validated",
        )
    }
    judged = {key: oracle.judge(source, line, RECEIVED_BY, strict) for key, line in expected.items()}
    assert {k: v[0] for k, v in verdicts.items()} == {k: j.kind for k, j in judged.items()}
    # the keys besides the fields, named for every line that is a flat object
    new_fields = dict(
        ((f, int(n)), keys)
        for f, n, keys in table(
            engine, f"select file_name, line_number, new_fields from {{schema}}.int_{entity}_lines_decoded"
        )
    )
    assert new_fields == {k: oracle.decode(source, line).new_fields for k, line in expected.items()}
    assert all(reason for kind, reason in verdicts.values() if kind), "a dead letter without a reason"
    check_values(engine, source, entity, judged)
    return judged


def check_values(engine: Target, source: str, entity: str, judged: dict) -> None:
    """Valid lines decoded to exactly the oracle's values."""
    fields = list(oracle.FIELDS[source])
    rows = table(
        engine,
        f"select file_name, line_number, {', '.join(fields)} from {{schema}}.int_{entity}_lines_validated "
        "where is_valid",
    )
    for f, n, *values in rows:
        want = judged[(f, int(n))].values
        for name, got in zip(fields, values, strict=True):
            expected = want[name]
            if isinstance(expected, float):
                assert float(got) == pytest.approx(expected, rel=1e-12), (f, n, name)
            elif isinstance(expected, Decimal):
                assert Decimal(str(got)) == expected, (f, n, name)
            else:
                assert got == expected, (f, n, name, got, expected)


LANDING: list[Path] = []


@pytest.fixture(autouse=True)
def _landing(landing: Path):
    LANDING[:] = [landing]
    yield


@pytest.mark.parametrize(
    ("source", "corpus"), [("sales", SALES_CORPUS), ("units", UNITS_CORPUS)], ids=["sales", "units"]
)
def test_every_kind_of_line_gets_its_outcome(engine: Target, source: str, corpus: list) -> None:
    # the corpus's own expectations agree with the independent reading of the contract
    for what, line, kind, _ in corpus:
        assert oracle.judge(source, line, RECEIVED_BY).kind == kind, what
    assert len({what for what, _, kind, _ in corpus if kind}) >= 25
    check_batch(engine, source, corpus_files(corpus))
    entity = {"sales": "sale", "units": "unit"}[source]
    reasons = dict(
        table(
            engine,
            f"select line_number, dead_letter_reason from {{schema}}.{source}_dead_letters "
            "where file_name = 'part-0000.jsonl'",
        )
    )
    for n, (what, _, kind, reason) in enumerate(corpus[:-1], start=1):
        if kind:
            assert reason in reasons[n], (what, reasons[n])
    assert table(engine, f"select count(*) from {{schema}}.int_{entity}_lines_decoded")[0][0] == len(corpus)


def mutations(valid: list[bytes], rng: random.Random, count: int) -> list[bytes]:
    """Valid lines with one byte, field or character changed, and random bytes."""
    alphabet = [
        b'"',
        b"\\",
        b"{",
        b"}",
        b",",
        b":",
        b" ",
        b"\r",
        b"\x00",
        b"\xff",
        b"\xc3\xa9",
        b"e",
        b"-",
        b".",
        b"0",
        b"9",
        b"Z",
        b"T",
        b"+",
        b"null",
        b"NaN",
        b"\\u0000",
        b"\\ud800",
    ]
    out = []
    for _ in range(count):
        line = bytearray(rng.choice(valid))
        kind = rng.randrange(6)
        if kind == 0:
            out.append(bytes(rng.randrange(256) for _ in range(rng.randrange(0, 80))).replace(b"\n", b""))
            continue
        at = rng.randrange(len(line))
        if kind == 1:
            line[at] = rng.randrange(256)
        elif kind == 2:
            line[at:at] = rng.choice(alphabet)
        elif kind == 3:
            del line[at : at + rng.randrange(1, 6)]
        elif kind == 4:
            doc = json.loads(bytes(line))
            key = rng.choice(list(doc))
            doc[key] = rng.choice(
                [None, "", "x", 0, -1, 1.5, 10**20, "2026-11-23", True, [1], {"a": 1}, "\\N"]
            )
            line = bytearray(json.dumps(doc).encode())
        else:
            line = bytearray(bytes(line).replace(b'", "', b'","', 1) + rng.choice([b"", b" ", b"\r", b"\t"]))
        out.append(bytes(line).replace(b"\n", b""))
    return out


@pytest.mark.parametrize("source", ["sales", "units"])
def test_random_and_mutated_lines_never_stop_the_run(engine: Target, source: str) -> None:
    """Thousands of lines: the run never crashes, every line is judged as the contract says,
    its bytes are kept, and the published count is the valid lines' first arrivals, once."""
    rng = random.Random(f"fuzz/{source}")
    make: Callable[..., bytes] = sale_line if source == "sales" else unit_line
    valid = []
    for i in range(400):
        minute = f"2026-11-23T{8 + i % 2:02d}:{i % 60:02d}:{rng.randrange(60):02d}Z"
        if source == "sales":
            valid.append(
                make(
                    event_id=f"f-{i % 300}",
                    shop_id=f"S-{1 + i % 20:03d}",
                    sold_at=minute,
                    amount=f"{rng.randrange(1, 99999) / 100:.2f}",
                )
            )
        else:
            valid.append(
                make(
                    plc_seq=i % 300,
                    event_at=minute,
                    verdict=rng.choice(["good", "reject"]),
                    fill_level_ml=round(rng.uniform(320, 340), 1),
                )
            )
    lines = valid + mutations(valid, rng, 3000)
    rng.shuffle(lines)
    files = {
        "part-0000.jsonl": b"".join(line + b"\n" for line in lines[:1700]),
        "part-0001.jsonl": b"\n".join(lines[1700:]),
    }
    judged = check_batch(engine, source, files)
    assert 300 < sum(v.is_valid for v in judged.values()) < len(lines) - 1000
    # counted exactly as the contract allows: each valid event once, at its first arrival
    first: dict[object, tuple[tuple, oracle.Verdict]] = {}
    for (name, n), verdict in judged.items():
        if verdict.is_valid:
            v = verdict.values
            key = v["event_id"] if source == "sales" else (v["line_id"], v["plc_seq"])
            order = (v["received_at"], name, n)
            if key not in first or order < first[key][0]:
                first[key] = (order, verdict)
    built = (
        "2026-10-23",
        "2026-11-24",
    )  # a first build reaches back at most 31 days before the first arrival
    if source == "sales":
        want: dict = {}
        for _, verdict in first.values():
            cell = (str(verdict.values["sold_at"].date()), verdict.values["shop_id"])
            want[cell] = want.get(cell, Decimal(0)) + verdict.values["amount"]
        got = table(engine, "select sale_date, shop_id, sales_amount from {schema}_published.daily_sales")
        assert {(str(d), s): Decimal(a) for d, s, a in got} == {
            k: v for k, v in want.items() if built[0] <= k[0] < built[1]
        }
    else:
        want = {}
        for _, verdict in first.values():
            cell = (str(verdict.values["event_at"].date()), verdict.values["sku"])
            want[cell] = want.get(cell, 0) + (verdict.values["verdict"] == "good")
        got = table(
            engine, "select production_date, sku, good_units from {schema}_published.daily_good_units"
        )
        assert {(str(d), s): int(n) for d, s, n in got} == want


def test_a_producer_that_adds_a_field_is_counted_named_and_warned(engine: Target, landing: Path) -> None:
    """A till vendor ships a new field: its lines count, the run names the keys, a gate warns;
    with strict_fields the next batch's such lines are dead letters naming the key."""
    lines = [sale_line(event_id=f"n-{i}", pos_version="4.2") for i in range(3)]
    lines += [sale_line(event_id="n-3"), sale_line(event_id="n-4", pos_version="4.2", padding="x" * 10**6)]
    write_raw_batch(landing, "sales", HOUR, {"part-0000.jsonl": b"\n".join(lines) + b"\n"})
    summary = run_nightly("sales", engine, landing, ts("2026-11-24T00:30"), quiet=True)
    assert summary.ok and summary.build is not None, summary.lines()
    text = "\n".join(summary.lines())
    for keys, n in (("padding, pos_version", 1), ("pos_version", 3)):
        assert (
            f"new fields: {n:,} lines of this run's batches carried {keys} besides the contract's "
            f"fields (counted; first in batch {HOUR})"
        ) in text, text
    assert [n.name for n in summary.build.warned()] == ["sales_lines_carry_no_new_fields"], text
    assert "new_fields=padding, pos_version, line_count_lately=1, first_batch_id=2026-11-23T10" in text, text
    published = table(
        engine, "select sum(sales_amount), sum(sales_count) from {schema}_published.daily_sales"
    )
    assert (Decimal(published[0][0]), int(published[0][1])) == (Decimal("62.50"), 5)
    assert table(
        engine,
        "select new_fields, line_count, decoded_line_count from {schema}_published.sales_new_fields "
        "order by new_fields nulls first",
    ) == [(None, 1, 1), ("padding, pos_version", 1, 1), ("pos_version", 3, 3)]

    later = "2026-11-23T11"
    times = {"sold_at": "2026-11-23T11:00:00Z", "received_at": "2026-11-23T11:01:00Z"}
    strict = [sale_line(event_id="n-5", **times), sale_line(event_id="n-6", pos_version="4.3", **times)]
    write_raw_batch(landing, "sales", later, {"part-0000.jsonl": b"\n".join(strict) + b"\n"})
    summary = run_nightly(
        "sales", engine, landing, ts("2026-11-24T00:31"), quiet=True, dbt_vars={"sales_strict_fields": True}
    )
    text = "\n".join(summary.lines())
    assert summary.ok, text
    assert (
        "carried pos_version besides the contract's fields (dead-lettered: strict_fields; "
        "first in batch 2026-11-23T10)"
    ) in text, text
    assert table(engine, "select dead_letter_kind, dead_letter_reason from {schema}.sales_dead_letters") == [
        ("unknown_field", "unknown field pos_version")
    ]


def test_rfc3339_fractions_are_truncated_to_the_microsecond() -> None:
    """The oracle's reading, which the engines' decoded values must equal (check_values)."""
    late = oracle.judge("sales", sale_line(sold_at="2026-11-22T23:59:59.999999999Z"))
    assert late.kind is None and late.values["sold_at"] == datetime(2026, 11, 22, 23, 59, 59, 999999)
    lower = oracle.judge("sales", sale_line(sold_at="2026-11-23t06:30:00.5-03:30"))
    assert lower.kind is None and lower.values["sold_at"] == datetime(2026, 11, 23, 10, 0, 0, 500000)
