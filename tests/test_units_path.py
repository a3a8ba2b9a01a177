"""The brewery units path end to end: each scenario on DuckDB, and on Postgres where it runs
Postgres code of its own (what the models compute alike: tests/test_postgres_agrees.py)."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import pytest

from dayclose.generate import generate_units, read_units_truth
from dayclose.jobs import restate, run_nightly
from dayclose.settings import Target
from tests.helpers import event_hash, good_units, steady_production, table, ts, unit, write_batch

LINE = "L-001-1"  # bottling, plant P-001
SKU = "PILS-330-BTL"


def run(target: Target, landing: Path, as_of: str):
    summary = run_nightly("units", target, landing, ts(as_of), quiet=True)
    assert summary.build is not None
    return summary


def backlog(first_seq: int, count: int, day: str, received: str) -> list[str]:
    """`count` good units finished on `day` from 22:00 on, all received at `received`."""
    return [
        unit(LINE, first_seq + i, f"{day}T22:{i % 60:02d}:{i // 60:02d}Z", received) for i in range(count)
    ]


@pytest.mark.parametrize("engine", ["duckdb"], indirect=True)  # Postgres: tests/test_postgres_agrees.py
def test_replayed_backlog_lands_in_its_day_and_counts_once(engine: Target, landing: Path) -> None:
    steady = steady_production(landing, [LINE], "2026-11-20", 6)
    # P-001 goes offline at 22:00 on Monday and replays its backlog at 04:00 on Tuesday,
    # with one producer retry (the same line twice) in the replay
    lines = backlog(1, 30, "2026-11-23", "2026-11-24T04:05:00Z")
    write_batch(landing, "2026-11-24T04", [*lines, lines[7]], source="units")
    first = run(engine, landing, "2026-11-24T00:30")  # before the replay
    assert first.ok, first.lines()
    assert good_units(engine)[("2026-11-23", SKU)] == steady
    second = run(engine, landing, "2026-11-25T00:30")
    assert second.ok, second.lines()
    assert good_units(engine)[("2026-11-23", SKU)] == steady + 30
    assert good_units(engine)[("2026-11-24", SKU)] == steady


@pytest.mark.parametrize("engine", ["duckdb"], indirect=True)  # Postgres: tests/test_postgres_agrees.py
def test_full_replay_twice_changes_nothing(engine: Target, landing: Path) -> None:
    steady_production(landing, [LINE], "2026-11-20", 6)
    write_batch(
        landing, "2026-11-24T04", backlog(1, 25, "2026-11-23", "2026-11-24T04:05:00Z"), source="units"
    )
    run(engine, landing, "2026-11-24T06:30")
    before = good_units(engine)
    # the plant replays the whole backlog again, twice, hours later
    write_batch(
        landing, "2026-11-24T05", backlog(1, 25, "2026-11-23", "2026-11-24T05:40:00Z"), source="units"
    )
    write_batch(
        landing, "2026-11-24T06", backlog(1, 25, "2026-11-23", "2026-11-24T06:10:00Z"), source="units"
    )
    summary = run(engine, landing, "2026-11-24T07:30")
    assert summary.ok, summary.lines()
    assert len(summary.load.loaded) == 2
    assert good_units(engine) == before
    again = run(engine, landing, "2026-11-24T07:30")
    assert again.ok and good_units(engine) == before
    # the look-up key of the registry, for a two-column event key
    registry = table(engine, "select line_id, plc_seq, event_hash from {schema}.int_units_deduplicated")
    assert registry and all(h == event_hash(line, seq) for line, seq, h in registry)


@pytest.mark.parametrize("engine", ["duckdb"], indirect=True)  # Postgres: test_postgres_agrees.py
def test_garbage_dead_lettered_and_count_untouched(engine: Target, landing: Path) -> None:
    steady = steady_production(landing, [LINE], "2026-11-20", 6)
    t, r = "2026-11-23T10:00:00Z", "2026-11-23T10:00:30Z"
    bad = {
        1: unit("L-999-1", 101, t, r),
        2: unit(LINE, 102, t, r, sku="MYSTERY-BREW"),
        3: '{"line_id": "L-001-1", "sku": "PILS-330-BTL", "event_at": "2026-11-23T10:00:00Z"}',
        4: unit(LINE, "103a", t, r),  # type: ignore[arg-type]
        5: unit(LINE, 104, "2001-01-01T00:00:00Z", r),
        6: unit(LINE, 105, "2026-11-23T11:00:00Z", r),
        7: unit(LINE, 106, t, r, verdict="maybe"),
        8: unit(LINE, 107, t, r, temp="ERR"),
        9: "{not json",
    }
    flagged = [  # garbage and stuck readings on real units: flagged, counted by the verdict
        unit(LINE, 201, t, r, fill=9999.9),
        unit(LINE, 202, t, r, temp=-999.0),
        unit(LINE, 203, t, r, torque=0.0, verdict="reject"),
    ]
    write_batch(landing, "2026-11-23T10", [*bad.values(), *flagged], source="units")
    summary = run(engine, landing, "2026-11-24T00:30")
    assert summary.ok, summary.lines()
    assert good_units(engine)[("2026-11-23", SKU)] == steady + 2
    [(flags, rejected)] = table(
        engine,
        "select good_units_with_sensor_flags, rejected_units from {schema}_published.daily_good_units "
        "where production_date = '2026-11-23'",
    )
    assert (flags, rejected) == (2, 1)
    letters = dict(table(engine, "select line_number, dead_letter_reason from {schema}.units_dead_letters"))
    assert letters == {
        1: "unknown line_id L-999-1",
        2: "unknown sku MYSTERY-BREW",
        3: letters[3],
        4: 'plc_seq: not an integer from 0 to 9223372036854775807: "103a"',
        5: "event_at before the line was commissioned",
        6: "event_at after received_at",
        7: "verdict not in (good, reject): maybe",
        8: 'temperature_c: not a finite number: "ERR"',
        9: letters[9],
    }
    assert letters[3].startswith("missing field plc_seq") and "missing field verdict" in letters[3]
    assert letters[9].startswith("invalid JSON")
    assert sum(summary.dead_letters.values()) == len(bad)


def test_restatement_after_close_is_ledgered_and_versioned(engine: Target, landing: Path) -> None:
    steady = steady_production(landing, [LINE], "2026-10-25", 12)
    assert run(engine, landing, "2026-11-02T00:30").ok  # a first build: every loaded day
    assert good_units(engine)[("2026-10-30", SKU)] == steady
    # October closed on Nov 3; on Nov 4 the plant reports 12 more units of Oct 30
    write_batch(
        landing, "2026-11-04T10", backlog(500, 12, "2026-10-30", "2026-11-04T10:20:00Z"), source="units"
    )
    nightly = run(engine, landing, "2026-11-05T00:30")
    assert nightly.ok, nightly.lines()
    assert good_units(engine)[("2026-10-30", SKU)] == steady  # beyond the window
    assert nightly.restate_days == [date(2026, 10, 30)]
    first = restate(
        "units",
        engine,
        date(2026, 10, 30),
        date(2026, 10, 30),
        "P-001 reported late",
        as_of=ts("2026-11-05T09:00"),
        quiet=True,
    )
    assert first.ok, first.lines()
    assert good_units(engine)[("2026-10-30", SKU)] == steady + 12
    ledger = table(
        engine,
        "select production_date, sku, published_at_close, restated_good_units, delta, "
        "reason, caused_by_batches from {schema}_published.units_restatements",
    )
    assert [tuple(str(v) for v in row) for row in ledger] == [
        ("2026-10-30", SKU, str(steady), str(steady + 12), "12", "P-001 reported late", "2026-11-04T10")
    ]
    # what did we report for Oct 30 as of Nov 2? the value before the restatement
    as_of_nov_2 = table(
        engine,
        "select good_units from {schema}_published.daily_good_units_versions "
        "where production_date = '2026-10-30' and published_as_of <= '2026-11-02 12:00:00' "
        "order by version_number desc limit 1",
    )
    assert as_of_nov_2 == [(steady,)]
    again = restate(
        "units",
        engine,
        date(2026, 10, 30),
        date(2026, 10, 30),
        "P-001 reported late",
        as_of=ts("2026-11-05T09:00"),
        quiet=True,
    )
    assert again.ok
    assert len(table(engine, "select * from {schema}_published.units_restatements")) == 1
    assert (
        len(
            table(
                engine,
                "select * from {schema}_published.daily_good_units_versions "
                "where production_date = '2026-10-30'",
            )
        )
        == 2
    )


@pytest.mark.parametrize("engine", ["duckdb"], indirect=True)  # Postgres: tests/test_postgres_agrees.py
def test_days_past_the_window_equal_the_ground_truth(engine: Target, landing: Path) -> None:
    generate_units(landing, date(2026, 11, 20), 6, plants=12, units_per_day=6_000, seed=9)
    truth = read_units_truth(landing / "truth" / "units_daily_good.csv")
    for night in ("2026-11-22", "2026-11-23", "2026-11-24", "2026-11-25", "2026-11-26"):
        summary = run(engine, landing, f"{night}T00:30")
        assert summary.ok, summary.lines()
    published = good_units(engine)
    for day in ("2026-11-20", "2026-11-21", "2026-11-22", "2026-11-23"):
        expected = {k: v for k, v in truth.items() if k[0] == day}
        assert expected and {k: v for k, v in published.items() if k[0] == day} == expected, day


def test_a_run_older_than_the_published_one_publishes_nothing(engine: Target, landing: Path) -> None:
    """A late rerun at an earlier as-of is built and gated, then refused at publication."""
    steady_production(landing, [LINE], "2026-11-20", 6)
    write_batch(
        landing, "2026-11-24T04", backlog(1, 12, "2026-11-23", "2026-11-24T04:05:00Z"), source="units"
    )
    newer = run(engine, landing, "2026-11-25T00:30")
    assert newer.ok, newer.lines()
    published = good_units(engine)
    versions = "select count(*) from {schema}_published.daily_good_units_versions"
    published_versions = table(engine, versions)
    older = run(engine, landing, "2026-11-24T00:30")  # before the replay: it would show fewer units
    assert not older.ok and not older.published and older.status == "not published"
    assert "later than this run's 2026-11-24 00:30:00" in older.message
    assert any("FAILED: not published" in line for line in older.lines())
    assert good_units(engine) == published
    assert table(engine, versions) == published_versions
    # nothing of the refused run stays on the write side to leak into the next publication
    assert table(
        engine, f"select count(*) from {{schema}}.daily_good_units_versions where run_id = '{older.run_id}'"
    ) == [(0,)]


def test_conflicting_copies_of_units_in_the_window_and_from_before_it(engine: Target, landing: Path) -> None:
    """Two units resent in one batch: one first arrived in the window, resent with another
    verdict; one first arrived long before the window, resent with another finish time (its
    registered row is on a day the run does not rebuild). Both copies are recorded against
    their first arrivals (the two-column key), and only the first arrivals count."""
    steady = steady_production(landing, [LINE], "2026-11-10", 14)
    first = unit(LINE, 1, "2026-11-10T10:00:00Z", "2026-11-10T10:00:05Z")
    write_batch(landing, "2026-11-10T10", [first], source="units")
    assert run(engine, landing, "2026-11-11T00:30").ok
    assert run(engine, landing, "2026-11-23T00:30").ok  # Nov 10 has left the window
    in_window = unit(LINE, 500, "2026-11-23T09:00:00Z", "2026-11-23T10:00:05Z")
    write_batch(landing, "2026-11-23T10", [in_window], source="units")
    write_batch(
        landing,
        "2026-11-23T11",
        [
            unit(LINE, 500, "2026-11-23T09:00:00Z", "2026-11-23T11:00:05Z", verdict="reject"),
            unit(LINE, 1, "2026-11-22T10:00:00Z", "2026-11-23T11:00:05Z"),
        ],
        source="units",
    )
    summary = run(engine, landing, "2026-11-24T00:30")
    assert summary.ok and summary.published, summary.lines()
    rows = table(
        engine,
        "select line_id, plc_seq, production_date, first_production_date, first_verdict, copy_verdict "
        "from {schema}.units_conflicting_copies order by plc_seq",
    )
    assert rows == [
        (LINE, 1, date(2026, 11, 22), date(2026, 11, 10), "good", "good"),
        (LINE, 500, date(2026, 11, 23), date(2026, 11, 23), "good", "reject"),
    ]
    counted = good_units(engine)
    assert counted[("2026-11-22", SKU)] == steady and counted[("2026-11-23", SKU)] == steady + 1
