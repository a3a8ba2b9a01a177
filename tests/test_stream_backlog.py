"""A plant back after 4 hours offline: its backlog is scored but never paged, and lands in its day."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta

import pytest

from dayclose.jobs import run_nightly
from dayclose.settings import Target
from dayclose.stream.alerts import AlertTable
from dayclose.stream.gateway import build_scenario
from dayclose.stream.session import past_night, run_session
from tests.helpers import good_units
from tests.stream_fixtures import as_of_after, duckdb_target, read_truth, stream_server

pytestmark = pytest.mark.serial  # asserts a latency budget: scripts/test runs it alone


@pytest.fixture(scope="module")
def replay(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """3 plants for 14 s on a plants' clock reading yesterday 01:59:40; the last plant has been
    offline since 21:59:40 the day before and reconnects 4 s in, replaying 4 hours."""
    tmp = tmp_path_factory.mktemp("replay")
    offset, day = past_night(seconds_before_2am=20)
    with pytest.MonkeyPatch.context() as mp, stream_server(tmp / "nats", clock_offset_s=offset) as s:
        mp.setenv("DAYCLOSE_DUCKDB", str(tmp / "warehouse.duckdb"))
        scenario = build_scenario(
            plants=3,
            rate=30,
            duration_s=14,
            seed=2,
            backlog_hours=4,
            reconnect_after_s=4,
            clock_offset_s=offset,
        )
        session = asyncio.run(run_session(s, scenario, tmp / "sim", tmp / "landing", "duckdb"))
        yield {
            "truth": read_truth(tmp / "sim"),
            "alerts": AlertTable(duckdb_target(tmp / "warehouse.duckdb")).read(),
            "session": session,
            "landing": tmp / "landing",
            "day": day,
            "scenario": scenario,
        }


def test_a_4_hour_backlog_raises_no_live_alert_for_old_readings(replay: dict) -> None:
    sc, truth = replay["scenario"], replay["truth"]
    offline = sc.offline_plant
    backlog = sum(n for (line, lane), (n, _, _) in truth["lines"].items() if lane == "backfill")
    assert backlog == 2 * 5 * (
        4 * 3600 + 4
    )  # 2 lines, 5 readings a second, offline 4 h before the start + 4 s
    mine = [a for a in replay["alerts"] if a["plant_id"] == offline and a["line_id"]]
    old = [a for a in mine if a["opened_at"].timestamp() * 1000 < sc.reconnect_ms]
    assert old, "the backlog's out-of-spec episode raised nothing: it was not scored"
    assert {(a["lane"], a["paged"]) for a in old} == {("backfill", False)}
    assert not [a for a in replay["alerts"] if a["paged"] and a["lane"] != "live"]
    # the replay shared the worker with the live lines without holding them up
    stats = replay["session"].monitor
    assert stats.backfill_readings == backlog
    assert stats.live_p99(*stats.backfill_span) < 1000


# DuckDB: the archiver's landing is read by the loader and models that tests/test_postgres_agrees.py
# holds to the same result on Postgres (and the case's runs would lengthen the serial phase)
@pytest.mark.parametrize("engine", ["duckdb"], indirect=True)
def test_backlog_units_land_in_their_production_day(replay: dict, engine: Target) -> None:
    truth = replay["truth"]["good"]
    before_midnight = (replay["day"] - timedelta(days=1)).strftime("%Y-%m-%d")
    assert sum(n for (d, _), n in truth.items() if d == before_midnight) > 0
    folders = sorted(p.name for p in (replay["landing"] / "units").iterdir() if p.is_dir())
    assert folders == [f"arrived={replay['day']:%Y-%m-%d}T01"]  # all of it arrived after midnight
    summary = run_nightly("units", engine, replay["landing"], as_of_after(replay["day"]), quiet=True)
    assert summary.ok, summary.lines()
    assert good_units(engine) == truth
