"""The landing contract and the generator, without a warehouse."""

from __future__ import annotations

import calendar
import json
from datetime import date, datetime
from pathlib import Path

import pytest

from dayclose.generate import generate_sales
from dayclose.loader.contract import MARKER, discover
from tests.helpers import valid_sales_first_arrivals


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
    first_arrival = {
        event: (calendar.timegm(received.timetuple()), int(amount * 100))
        for event, (_, received, amount) in valid_sales_first_arrivals(tmp_path).items()
    }
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
