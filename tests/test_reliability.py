"""Nothing stops the night and nothing is counted wrong: the jobs side by side, conflicting
and cross-day resends, missed nights, and readers that must never block the writer."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from datetime import date
from decimal import Decimal
from pathlib import Path

import pytest

from dayclose import dbt_runner as dbt
from dayclose import sources
from dayclose.generate import generate_sales, read_sales_truth
from dayclose.jobs import run_nightly
from dayclose.publish import readers_file
from dayclose.settings import Target
from dayclose.warehouse import Warehouse
from tests.helpers import (
    daily_sales,
    dbt_invocations,
    event_hash,
    sale,
    steady_production,
    table,
    ts,
    unit,
    write_batch,
)

MONDAY = "2026-11-23"


def run(target: Target, landing: Path, as_of: str, job: str = "sales"):
    summary = run_nightly(job, target, landing, ts(as_of), quiet=True)
    assert summary.build is not None, summary.lines()
    return summary


def test_each_job_keeps_the_other_jobs_relations(engine: Target, landing: Path) -> None:
    """A units run never rebuilds the sales models (on Postgres that dropped the sales dead
    letters, a view on a view it rebuilt), and the other way round."""
    write_batch(
        landing, "2026-11-23T10", [sale("a", "S-001", "2026-11-23T10:00:00Z", "2026-11-23T10:01:00Z"), "{"]
    )
    steady_production(landing, ["L-001-1"], "2026-11-22", 2)
    write_batch(landing, "2026-11-23T11", [unit("L-001-1", 5, "2026-11-23T11:00:00Z", "bad")], source="units")
    assert run(engine, landing, "2026-11-24T00:30", "sales").ok
    for job in ("units", "sales", "units"):
        assert run(engine, landing, "2026-11-24T00:30", job).ok
        for source in ("sales", "units"):
            rows = table(engine, f"select count(*) from {{schema}}.{source}_dead_letters")
            assert rows == [(1,)], (job, source)


def test_conflicting_resend_counts_its_first_arrival_and_publishes_the_rest(
    engine: Target, landing: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A till resends an event with another amount: the first arrival counts, the copy is
    recorded with both lines, the gate warns, and every shop is published."""
    write_batch(
        landing,
        "2026-11-23T10",
        [
            sale("c1", "S-001", "2026-11-23T10:00:00Z", "2026-11-23T10:01:00Z", "10.00"),
            sale("n1", "S-002", "2026-11-23T10:00:00Z", "2026-11-23T10:01:00Z", "5.00"),
            sale("o1", "S-003", "2026-11-22T10:00:00Z", "2026-11-23T10:02:00Z", "7.00"),
        ],
    )
    write_batch(
        landing,
        "2026-11-23T15",
        [sale("c1", "S-001", "2026-11-23T10:00:00Z", "2026-11-23T15:01:00Z", "90000.00")],
    )
    summary = run(engine, landing, "2026-11-24T00:30")
    assert summary.ok and summary.published, summary.lines()
    assert daily_sales(engine) == {
        (MONDAY, "S-001"): (Decimal("10.00"), 1),
        (MONDAY, "S-002"): (Decimal("5.00"), 1),
        ("2026-11-22", "S-003"): (Decimal("7.00"), 1),
    }
    assert "sales_copies_agree_with_first_arrivals" in summary.gate_failures  # a warning
    [conflict] = table(
        engine,
        "select event_id, first_amount, copy_amount, first_batch_id, batch_id, first_raw_line, copy_raw_line "
        "from {schema}_published.sales_conflicting_copies",
    )
    assert conflict[:5] == ("c1", Decimal("10.00"), Decimal("90000.00"), "2026-11-23T10", "2026-11-23T15")
    assert '"10.00"' in conflict[5] and '"90000.00"' in conflict[6]

    # holding back the days concerned: Monday keeps its previous numbers, Sunday is published
    monkeypatch.setitem(sources.project_vars(), "hold_days_with_conflicting_copies", True)
    write_batch(
        landing,
        "2026-11-23T16",
        [
            sale("n2", "S-002", "2026-11-23T16:00:00Z", "2026-11-23T16:01:00Z", "1.00"),
            sale("o2", "S-003", "2026-11-22T16:00:00Z", "2026-11-23T16:02:00Z", "2.00"),
        ],
    )
    held = run(engine, landing, "2026-11-24T00:30")
    assert held.ok and held.days_held == [date(2026, 11, 23)], held.lines()
    published = daily_sales(engine)
    assert published[(MONDAY, "S-002")] == (Decimal("5.00"), 1)  # held: the numbers before
    assert published[("2026-11-22", "S-003")] == (Decimal("9.00"), 2)  # published


def test_a_resend_on_another_day_counts_once(engine: Target, landing: Path) -> None:
    """An event first arrived on Nov 10 (long out of the window) comes again on Nov 23 with
    another event time: it is not counted again on its new day."""
    write_batch(
        landing,
        "2026-11-10T09",
        [sale("x1", "S-001", "2026-11-10T09:00:00Z", "2026-11-10T09:01:00Z", "20.00")],
    )
    for day in range(10, 24):
        write_batch(
            landing,
            f"2026-11-{day}T08",
            [sale(f"d{day}", "S-002", f"2026-11-{day}T08:00:00Z", f"2026-11-{day}T08:01:00Z")],
        )
    assert run(engine, landing, "2026-11-12T00:30").ok
    assert run(engine, landing, "2026-11-23T00:30").ok  # Nov 10 has left the window
    write_batch(
        landing,
        "2026-11-23T09",
        [sale("x1", "S-001", "2026-11-22T09:00:00Z", "2026-11-23T09:01:00Z", "20.00")],
    )
    summary = run(engine, landing, "2026-11-24T00:30")
    assert summary.ok and summary.published, summary.lines()
    assert summary.window[0] == date(2026, 11, 20), summary.lines()
    published = daily_sales(engine)
    assert published[("2026-11-10", "S-001")] == (Decimal("20.00"), 1)
    assert ("2026-11-22", "S-001") not in published
    [(copy_day, first_day)] = table(
        engine, "select sale_date, first_sale_date from {schema}_published.sales_conflicting_copies"
    )
    assert (str(copy_day), str(first_day)) == ("2026-11-22", "2026-11-10")
    # plain dbt, a week later, rebuilds the conflicting copies from scratch: the copy's day has
    # left the nightly window, but the model covers the microbatch models' begin, as they do
    outcome = dbt.run_command(
        engine,
        ["run", "--select", "sales_conflicting_copies", "--full-refresh"],
        run_vars={"as_of": ts("2026-12-01T00:30")},
    )
    assert outcome.success, outcome.error
    assert table(engine, "select event_id, sale_date from {schema}.sales_conflicting_copies") == [
        ("x1", date(2026, 11, 22))
    ]


def test_first_arrivals_are_found_by_a_hash_that_two_events_may_share(engine: Target, landing: Path) -> None:
    """The nightly build finds registered events by event_hash (on DuckDB; Postgres by the key):
    a resend is found and counts once, and a registered sale that shares its hash with a new one
    neither hides the new one nor changes."""
    registry = "select event_id, batch_id, event_hash from {schema}.int_sales_deduplicated order by event_id"
    write_batch(
        landing,
        "2026-11-20T09",
        [
            sale("x1", "S-001", "2026-11-20T09:00:00Z", "2026-11-20T09:01:00Z", "20.00"),
            sale("x2", "S-002", "2026-11-20T09:05:00Z", "2026-11-20T09:06:00Z", "30.00"),
        ],
    )
    assert run(engine, landing, "2026-11-21T00:30").ok
    write_batch(
        landing,
        "2026-11-21T10",
        [
            sale("x1", "S-001", "2026-11-21T10:00:00Z", "2026-11-21T10:01:00Z", "20.00"),  # a resend
            sale("n0", "S-003", "2026-11-21T10:02:00Z", "2026-11-21T10:03:00Z", "5.00"),
        ],
    )
    summary = run(engine, landing, "2026-11-22T00:30")
    assert summary.ok and summary.published, summary.lines()
    assert table(engine, registry) == [
        ("n0", "2026-11-21T10", event_hash("n0")),
        ("x1", "2026-11-20T09", event_hash("x1")),
        ("x2", "2026-11-20T09", event_hash("x2")),
    ]
    # x2 now shares its hash with n1, a sale of the next night
    with Warehouse(engine) as wh:
        wh.execute(
            f"update {engine.schema}.int_sales_deduplicated set event_hash = %s where event_id = 'x2'",
            (event_hash("n1"),),
        )
    write_batch(
        landing,
        "2026-11-22T10",
        [
            sale("n1", "S-003", "2026-11-22T10:00:00Z", "2026-11-22T10:01:00Z", "7.00"),
            sale("x2", "S-002", "2026-11-20T09:05:00Z", "2026-11-22T10:02:00Z", "30.00"),  # a resend
        ],
    )
    summary = run(engine, landing, "2026-11-23T00:30")
    assert summary.ok and summary.published, summary.lines()
    assert table(engine, registry) == [
        ("n0", "2026-11-21T10", event_hash("n0")),
        ("n1", "2026-11-22T10", event_hash("n1")),
        ("x1", "2026-11-20T09", event_hash("x1")),
        ("x2", "2026-11-20T09", event_hash("n1")),
    ]
    published = daily_sales(engine)
    assert published[("2026-11-20", "S-001")] == (Decimal("20.00"), 1)
    assert published[("2026-11-20", "S-002")] == (Decimal("30.00"), 1)
    assert published[("2026-11-21", "S-003")] == (Decimal("5.00"), 1)
    assert published[("2026-11-22", "S-003")] == (Decimal("7.00"), 1)
    assert ("2026-11-21", "S-001") not in published


def test_an_earlier_copy_loaded_later_revises_the_first_arrival(engine: Target, landing: Path) -> None:
    """Hour 09's batch waits for its marker while hour 15's, with a copy of the same sale, is
    loaded: the sale is registered at 15's copy. Once 09 is loaded, its copy is the first
    arrival: the sale's registered row is replaced (is_revised), never doubled."""
    early = [sale("e1", "S-001", "2026-11-23T09:00:00Z", "2026-11-23T09:01:00Z", "4.00")]
    folder = write_batch(landing, "2026-11-23T09", early, sealed=False)
    write_batch(
        landing,
        "2026-11-23T15",
        [
            sale("e1", "S-001", "2026-11-23T09:00:00Z", "2026-11-23T15:01:00Z", "4.00"),
            sale("e2", "S-002", "2026-11-23T15:00:00Z", "2026-11-23T15:01:00Z", "6.00"),
        ],
    )
    first = run(engine, landing, "2026-11-24T00:30")
    assert first.ok and first.load.waiting == ["2026-11-23T09"], first.lines()
    registry = "select event_id, batch_id, is_revised from {schema}.int_sales_deduplicated order by event_id"
    assert table(engine, registry) == [("e1", "2026-11-23T15", False), ("e2", "2026-11-23T15", False)]
    shutil.rmtree(folder)
    write_batch(landing, "2026-11-23T09", early)
    second = run(engine, landing, "2026-11-24T00:30")
    assert second.ok and second.published, second.lines()
    assert table(engine, registry) == [("e1", "2026-11-23T09", True), ("e2", "2026-11-23T15", False)]
    assert daily_sales(engine) == {
        (MONDAY, "S-001"): (Decimal("4.00"), 1),
        (MONDAY, "S-002"): (Decimal("6.00"), 1),
    }


def test_a_damaged_registry_blocks_publication(engine: Target, landing: Path) -> None:
    """The first-arrival registry decides what counts. Damaged four ways, each fails the gate
    with its own row and nothing reaches readers: an event registered twice (a1), a valid
    line whose event is missing (a2), a first arrival moved to a later copy (a3: the earlier
    copy arrived before it), a first arrival pointing at a line that does not exist (a4)."""
    lines = [sale(f"a{n}", "S-001", "2026-11-23T10:00:00Z", "2026-11-23T10:01:00Z") for n in (1, 2, 3, 4)]
    write_batch(landing, "2026-11-23T10", lines)
    later_copy = sale("a3", "S-001", "2026-11-23T10:00:00Z", "2026-11-23T11:01:00Z")
    write_batch(landing, "2026-11-23T11", [later_copy])
    assert run(engine, landing, "2026-11-24T00:30").ok
    before = daily_sales(engine)
    registry = f"{engine.schema}.int_sales_deduplicated"
    with Warehouse(engine) as wh:
        if engine.duckdb_path is None:  # Postgres: its unique index would refuse the damage
            for (index,) in wh.query(
                "select indexname from pg_indexes where schemaname = %s and tablename = %s",
                (engine.schema, "int_sales_deduplicated"),
            ):
                wh.execute(f'drop index {engine.schema}."{index}"')
        wh.execute(f"insert into {registry} select * from {registry} where event_id = 'a1'")
        wh.execute(f"delete from {registry} where event_id = 'a2'")
        wh.execute(
            f"update {registry} set batch_id = copy.batch_id, file_name = copy.file_name, "
            "line_number = copy.line_number, received_at = copy.received_at "
            f"from (select * from {engine.schema}.int_sale_lines_validated "
            "where event_id = 'a3' and batch_id = '2026-11-23T11') as copy "
            f"where {registry}.event_id = 'a3'"
        )
        wh.execute(f"update {registry} set line_number = 99 where event_id = 'a4'")
    summary = run(engine, landing, "2026-11-24T00:30")
    assert not summary.published and summary.status == "gates failed", summary.lines()
    problems = table(
        engine,
        "select event_id, batch_id, line_number, problem "
        "from {schema}_dbt_test__audit.sales_first_arrivals_account_for_lines order by event_id",
    )
    assert problems == [
        ("a1", "2026-11-23T10", 1, "event registered more than once"),
        ("a2", "2026-11-23T10", 2, "valid line without an event"),
        ("a3", "2026-11-23T10", 3, "a copy arrived before the first arrival"),
        ("a4", "2026-11-23T10", 99, "first arrival that is not a valid line"),
    ]
    assert daily_sales(engine) == before


@pytest.mark.parametrize("engine", ["duckdb"], indirect=True)  # the windows are the job's Python
def test_missed_nights_are_caught_up_and_readers_told_the_truth(
    engine: Target, landing: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scheduler is down for two nights: the next run rebuilds the days that left the
    window meanwhile, to the truth, and marks them final; beyond catch_up_max_days it lists
    the days for a restatement instead and still tells readers no nightly run will change them."""
    generate_sales(landing, date(2026, 11, 16), 12, shops=20, events_per_day=600, seed=7)
    truth: dict[str, Decimal] = {}
    for (day, _), (amount, _) in read_sales_truth(landing / "truth" / "sales_daily_totals.csv").items():
        truth[day] = truth.get(day, Decimal(0)) + Decimal(amount)
    assert run(engine, landing, "2026-11-21T00:30").ok  # builds Nov 16 .. 20
    # Nov 22 and 23 00:30: the scheduler is down
    summary = run(engine, landing, "2026-11-24T00:30")  # window Nov 20 .. 23
    assert summary.ok, summary.lines()
    # Nov 18 and 19 left the window without their last rebuild (as of Nov 22 and Nov 23)
    assert summary.window[0] == date(2026, 11, 18), summary.window
    totals = {d: sum(a for (day, _), (a, _) in daily_sales(engine).items() if day == d) for d in truth}
    for day in ("2026-11-18", "2026-11-19", "2026-11-20"):
        assert totals[day] == truth[day], day
    status = dict(
        table(
            engine,
            "select sale_date, bool_or(can_still_change) from {schema}_published.daily_sales group by 1",
        )
    )
    assert [str(d) for d, changing in sorted(status.items()) if changing] == [
        "2026-11-21",
        "2026-11-22",
        "2026-11-23",
    ]

    # a week down, with catch-up limited to 2 days: older days are listed, and final for readers
    monkeypatch.setitem(sources.project_vars(), "catch_up_max_days", 2)
    late = run(engine, landing, "2026-11-28T00:30")  # window Nov 24 .. 27
    assert late.ok, late.lines()
    assert late.window[0] == date(2026, 11, 22)
    assert late.days_not_final == [date(2026, 11, 21)]
    assert any("restate them: 2026-11-21" in line for line in late.lines())
    status = dict(
        table(
            engine,
            "select sale_date, bool_or(can_still_change) from {schema}_published.daily_sales group by 1",
        )
    )
    assert not status[date(2026, 11, 21)]


def test_a_duckdb_reader_never_blocks_the_nightly_run(engine: Target, landing: Path, tmp_path: Path) -> None:
    if engine.name != "duckdb":
        pytest.skip("Postgres readers use the reader role; DuckDB readers read their own file")
    write_batch(
        landing, "2026-11-23T10", [sale("a", "S-001", "2026-11-23T10:00:00Z", "2026-11-23T10:01:00Z")]
    )
    assert run(engine, landing, "2026-11-24T00:30").ok
    path = readers_file(engine)
    assert path is not None and path.exists()
    # a dashboard holds a read-only connection to the readers' file in another process
    reader = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import duckdb, sys\n"
            f"c = duckdb.connect({str(path)!r}, read_only=True)\n"
            "print(c.execute('select sum(sales_amount) from daily_sales').fetchone()[0], flush=True)\n"
            "sys.stdin.readline()\n"
            "print(c.execute('select sum(sales_amount) from daily_sales').fetchone()[0], flush=True)\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert reader.stdout is not None and reader.stdin is not None
        assert Decimal(reader.stdout.readline()) == Decimal("10.00")
        write_batch(
            landing, "2026-11-23T11", [sale("b", "S-001", "2026-11-23T11:00:00Z", "2026-11-23T11:01:00Z")]
        )
        again = run(engine, landing, "2026-11-24T00:30")
        assert again.ok, again.lines()  # not blocked: exit 0, published
        reader.stdin.write("\n")
        reader.stdin.flush()
        assert Decimal(reader.stdout.readline()) == Decimal("10.00")  # its snapshot, unchanged
    finally:
        reader.kill()
        reader.wait()
    fresh = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import duckdb; print(duckdb.connect({str(path)!r}, read_only=True)"
            ".execute('select sum(sales_amount) from daily_sales').fetchone()[0])",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert Decimal(fresh.stdout) == Decimal("20.00")
    tables = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import duckdb; print(sorted(r[0] for r in duckdb.connect({str(path)!r}, "
            "read_only=True).execute('show tables').fetchall()))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "run_audit" in tables and "daily_sales" in tables


def test_a_day_resent_with_new_ids_is_flagged_as_a_possible_resend(engine: Target, landing: Path) -> None:
    """Seed 004's 2.1x: Wednesday's sales sent again with new event ids double Wednesday, and
    no id can tell. The volume gate judges it against the three earlier Wednesdays there are
    (not the four it would like), says so, and names it a possible resend."""
    from datetime import timedelta

    first = date(2026, 10, 29)
    for n in range(29):  # 2026-10-29 .. 2026-11-26, 20 sales of 10.00 a day
        day = first + timedelta(days=n)
        lines = [
            sale(f"{day}-{i}", "S-001", f"{day}T12:{i:02d}:00Z", f"{day}T12:{i:02d}:30Z") for i in range(20)
        ]
        write_batch(landing, f"{day}T12", lines)
    wednesday = "2026-11-25"
    resent = [
        sale(f"again-{i}", "S-001", f"{wednesday}T12:{i:02d}:00Z", f"{wednesday}T20:{i:02d}:00Z")
        for i in range(20)
    ]
    write_batch(landing, f"{wednesday}T20", resent)
    summary = run(engine, landing, "2026-11-27T00:30")
    assert summary.ok, summary.lines()  # a warning: readers get the numbers, and the summary says why
    assert [n.name for n in summary.build.warned()] == ["sales_volume_within_band"], summary.lines()
    [row] = summary.gate_failures["sales_volume_within_band"]
    assert f"calendar_date={wednesday}" in row and "day_total=400" in row, row
    assert "weeks_compared=3" in row and "finding=possible resend" in row, row
    assert any("warn sales_volume_within_band" in line for line in summary.lines())


def test_a_large_batch_corrected_with_a_new_manifest_stays_quick_on_postgres(
    postgres_target: Target, landing: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """200,000 sales in a batch re-delivered with a new manifest (150,000 of their ids at another
    amount, 1,000 new ids, the rest gone): the next run re-registers them exactly, and no
    statement may plan a nested loop over the replaced batch's keys and its new copies, whatever
    the statistics say (such a plan ran for more than six minutes; the night takes seconds)."""
    monkeypatch.setenv("PGOPTIONS", "-c statement_timeout=240s")  # a hopeless plan fails, not hangs
    generate_sales(landing, date(2026, 11, 18), 6, shops=20, events_per_day=400, seed=4)
    folder = landing / "sales" / "arrived=2026-11-23T10"

    def deliver(blob: bytes) -> None:
        """The batch's part-9999.jsonl holding `blob`, its manifest saying so (a new manifest)."""
        (folder / "part-9999.jsonl").write_bytes(blob)
        manifest = json.loads((folder / "_SUCCESS").read_text())
        entry = {
            "name": "part-9999.jsonl",
            "rows": blob.count(b"\n"),
            "sha256": hashlib.sha256(blob).hexdigest(),
        }
        manifest["files"] = [f for f in manifest["files"] if f["name"] != entry["name"]] + [entry]
        (folder / "_SUCCESS").write_text(json.dumps(manifest))

    def lines(ids: range, cents: int) -> bytes:
        return "".join(
            sale(
                f"big-{i}",
                f"S-{1 + i % 20:03d}",
                f"2026-11-23T09:{i // 60 % 60:02d}:{i % 60:02d}Z",
                "2026-11-23T10:30:00Z",
                f"{(i % 9000 + cents) / 100:.2f}",
            )
            + "\n"
            for i in ids
        ).encode()

    deliver(lines(range(200_000), 100))
    assert run(postgres_target, landing, "2026-11-24T00:30").ok
    before = dict(
        table(
            postgres_target,
            "select sale_date, sum(sales_amount) from {schema}_published.daily_sales group by 1",
        )
    )
    deliver(lines(range(150_000), 250) + lines(range(200_000, 201_000), 100))
    summary = run(postgres_target, landing, "2026-11-24T00:45")  # no other batch arrived since
    assert summary.ok, summary.lines()
    # the night with the corrected batch, and only that one, planned without nested loops
    [log] = Path(os.environ["DAYCLOSE_STATE_DIR"]).glob("*/logs/dbt.log")
    *earlier, last = dbt_invocations(log.parent.parent)
    assert "set local enable_nestloop = off" in last
    assert not any("set local enable_nestloop" in text for text in earlier)
    old = sum(i % 9000 + 100 for i in range(200_000))
    new = sum(i % 9000 + 250 for i in range(150_000)) + sum(i % 9000 + 100 for i in range(200_000, 201_000))
    after = dict(
        table(
            postgres_target,
            "select sale_date, sum(sales_amount) from {schema}_published.daily_sales group by 1",
        )
    )
    assert after.pop(date(2026, 11, 23)) == before.pop(date(2026, 11, 23)) + Decimal(new - old) / 100
    assert after == before
    assert table(
        postgres_target,
        "select count(*) from {schema}.int_sales_deduplicated where left(event_id, 4) = 'big-'",
    ) == [(151_000,)]
