"""The landing contract and the generator, without a warehouse."""

from __future__ import annotations

import calendar
import json
from datetime import date, datetime
from pathlib import Path

import pytest

from dayclose.generate import generate_sales
from dayclose.loader.contract import MARKER, discover
from dayclose.loader.decode import decode_line
from dayclose.sources import SALES


@pytest.mark.parametrize(
    ("line", "error"),
    [
        (
            '{"event_id": "a", "shop_id": "S-1", "sold_at": "2026-11-23T18:42:00Z", '
            '"received_at": "2026-11-24T07:15:00+01:00", "amount": "1320.00"}',
            None,
        ),
        ("not json", "invalid JSON: Expecting value"),
        ("[1, 2]", "not a JSON object"),
        (
            '{"event_id": "a", "shop_id": "S-1", "sold_at": "2026-11-23T18:42:00", '
            '"received_at": "2026-11-24T07:15:00Z", "amount": "1"}',
            "sold_at: not an RFC 3339 timestamp with a time zone: '2026-11-23T18:42:00'",
        ),
        (
            '{"event_id": "a", "shop_id": "S-1", "sold_at": "2026-11-23T18:42:00Z", '
            '"received_at": "2026-11-24T07:15:00Z", "amount": "1.234"}',
            "amount: more than 2 decimal places: '1.234'",
        ),
        (
            '{"event_id": "a", "shop_id": "S-1", "sold_at": "2026-02-30T18:42:00Z", '
            '"received_at": "2026-11-24T07:15:00Z", "amount": "1e400"}',
            "sold_at: unparsable timestamp '2026-02-30T18:42:00Z'; amount: out of range: '1e400'",
        ),
        (
            '{"shop_id": "S-1", "sold_at": "2026-11-23T18:42:00Z", '
            '"received_at": "2026-11-24T07:15:00Z", "amount": 3}',
            "missing field event_id",
        ),
        ("   ", "empty line"),
    ],
)
def test_decode_line(line: str, error: str | None) -> None:
    values, problem = decode_line(SALES, line)
    assert problem == error
    if error is None:
        assert values == ["a", "S-1", "2026-11-23 18:42:00", "2026-11-24 06:15:00.000000", "1320.00"]


def test_generator_is_deterministic_and_complete(tmp_path: Path) -> None:
    a = generate_sales(tmp_path / "a", date(2026, 11, 23), 2, shops=10, events_per_day=2000, seed=5)
    generate_sales(tmp_path / "b", date(2026, 11, 23), 2, shops=10, events_per_day=2000, seed=5)
    generate_sales(tmp_path / "c", date(2026, 11, 23), 2, shops=10, events_per_day=2000, seed=6)
    manifests = {
        name: sorted((p.parent.name, p.read_text()) for p in (tmp_path / name).glob(f"sales/*/{MARKER}"))
        for name in "abc"
    }
    assert manifests["a"] == manifests["b"] != manifests["c"]
    assert a.events == 4000 and a.lines > a.events  # resends and garbage lines on top
    for _, text in manifests["a"]:
        for f in json.loads(text)["files"]:
            assert f["rows"] > 0


def test_generator_reproduces_the_incident_lateness(tmp_path: Path) -> None:
    """Share of Monday's final total arrived by each run of the incident's timeline."""
    generate_sales(tmp_path, date(2026, 11, 23), 1, shops=140, events_per_day=60_000, seed=1)
    day_end = calendar.timegm(date(2026, 11, 24).timetuple())
    first_arrival: dict[str, tuple[int, int]] = {}
    for part in (tmp_path / "sales").glob("*/part-*.jsonl"):
        for line in part.read_text().splitlines():
            values, error = decode_line(SALES, line)
            if error or values[1] > "S-500" or values[4].startswith("-") or float(values[4]) > 1e5:
                continue
            if values[2] > values[3]:
                continue
            received = calendar.timegm(datetime.fromisoformat(values[3]).timetuple())
            cents = int(values[4].replace(".", ""))
            old = first_arrival.get(values[0])
            if old is None or received < old[0]:
                first_arrival[values[0]] = (received, cents)
    total = sum(c for _, c in first_arrival.values())

    def share_by(hours: float) -> float:
        return sum(c for r, c in first_arrival.values() if r < day_end + hours * 3600) / total

    assert share_by(0) == pytest.approx(0.966, abs=0.003)  # Tue 00:30 run
    assert share_by(24) == pytest.approx(0.992, abs=0.0015)  # Wed 00:30
    assert share_by(58) == pytest.approx(0.999, abs=0.0006)  # Thu 10:00 (finance)
    assert share_by(72) == 1.0  # Fri 00:30


def test_discover_names_bad_folders_and_respects_as_of(tmp_path: Path) -> None:
    (tmp_path / "sales" / "arrived=2026-11-23T10").mkdir(parents=True)
    (tmp_path / "sales" / "arrived=2026-11-23T11").mkdir()
    (tmp_path / "sales" / "arrived=yesterday").mkdir()
    batches, problems = discover(tmp_path, "sales", datetime(2026, 11, 23, 11, 30))
    assert [b.batch_id for b in batches] == ["2026-11-23T10"]  # 11:00-12:00 not over yet
    assert len(problems) == 1 and "arrived=yesterday" in problems[0]
