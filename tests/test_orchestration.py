"""Incident 004 made impossible: retries, overlap, cleared sensors and ungated publication.

The flows run under Prefect's test harness (an ephemeral API server, started once);
the run lock and the kill test use the shared job code the CLI runs.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from datetime import date
from decimal import Decimal
from pathlib import Path

import pytest

from dayclose import jobs, prefect_tasks
from dayclose.errors import Unavailable, WarehouseBusy
from dayclose.generate import generate_sales, read_sales_truth
from dayclose.jobs import run_nightly
from dayclose.loader import load as load_module
from dayclose.settings import PROJECT_DIR, Target
from dayclose.warehouse import Warehouse
from tests import helpers
from tests.helpers import sale, table, ts, valid_sales_first_arrivals, write_batch

FIRST = date(2026, 11, 20)


@pytest.fixture(scope="session")
def prefect_api():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture
def week(landing: Path) -> dict[str, Decimal]:
    """Five days of sales for 20 shops, every arrival hour sealed; truth per day."""
    generate_sales(landing, FIRST, 5, shops=20, events_per_day=400, seed=4)
    totals: dict[str, Decimal] = {}
    for (day, _), (amount, _) in read_sales_truth(landing / "truth" / "sales_daily_totals.csv").items():
        totals[day] = totals.get(day, Decimal(0)) + Decimal(amount)
    return totals


def landed_lines(landing: Path, before_hour: str) -> int:
    """Lines of the sealed sales batches whose arrival hour ended by `before_hour`."""
    return sum(
        f["rows"]
        for marker in (landing / "sales").glob("arrived=*/_SUCCESS")
        if marker.parent.name[8:] < before_hour
        for f in json.loads(marker.read_text())["files"]
    )


# A Prefect flow runs the job code the CLI runs (dayclose.jobs) through prefect-dbt's runner: its
# cases run on the embedded default; what the engines do differently in them is checked on
# both without Prefect (tests/test_loader.py, tests/test_reliability.py, tests/test_postgres_agrees.py)
def on_duckdb_with_prefect(test):
    """A flow case: on DuckDB, and on the worker that started Prefect's test server (once)."""
    return pytest.mark.xdist_group("prefect")(
        pytest.mark.parametrize("engine", ["duckdb"], indirect=True)(test)
    )


def published(target: Target) -> dict[str, Decimal]:
    with Warehouse(target) as wh:
        if not wh.relation_exists(f"{target.schema}_published", "daily_sales"):
            return {}
        rows = wh.query(
            f"select sale_date, sum(sales_amount) from {target.schema}_published.daily_sales group by 1"
        )
    return {str(d): Decimal(v) for d, v in rows}


class Records(logging.Handler):
    """The records of Prefect's loggers (flow and task runs, the engine) while installed."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def __enter__(self) -> list[logging.LogRecord]:
        logging.getLogger("prefect").addHandler(self)
        return self.records

    def __exit__(self, *exc: object) -> None:
        logging.getLogger("prefect").removeHandler(self)


@on_duckdb_with_prefect
def test_missing_marker_means_no_publication_and_no_success(
    prefect_api, engine: Target, landing: Path, week: dict
) -> None:
    from flows.sales_flow import sales_nightly

    (landing / "sales" / "arrived=2026-11-23T14" / "_SUCCESS").unlink()
    with Records() as records:
        state = sales_nightly(
            as_of="2026-11-24T00:30", target=engine.name, landing=str(landing), return_state=True
        )
    # outside a deployment nothing books a follow-up: the run ends waiting, not Completed
    assert state.is_cancelled() and state.name == "AwaitingMarkers"
    assert "2026-11-23T14" in state.message
    assert published(engine) == {}
    # one vocabulary: the log says waiting, not failed, and holds no error
    logs = [r.getMessage() for r in records]
    assert "  result: WAITING: waiting for completeness markers; NOT published" in logs, logs
    assert not any("waiting for _SUCCESS;" in m for m in logs)  # no load line counting 0 waiting
    assert [r.getMessage() for r in records if r.levelno >= logging.ERROR] == []
    [(status, was_published)] = table(engine, "select status, published from {schema}_published.run_audit")
    assert (status, bool(was_published)) == ("waiting for completeness markers", False)


def test_the_engines_error_record_of_a_waiting_night_is_an_info_line() -> None:
    """Prefect's engine records the CancelledRun it raises for a returned Cancelled state as an
    ERROR with a traceback (under a worker, in the run's logs): a waiting night's becomes INFO,
    any other stays an error."""
    from prefect.exceptions import CancelledRun

    waiting = "waiting for _SUCCESS of 1 arrival hours (2026-11-23T14); nothing built or published"
    with Records() as records:
        for message in (waiting, "Run cancelled."):
            try:
                raise CancelledRun(message)
            except CancelledRun:
                logging.getLogger("prefect.flow_runs").error(
                    "Engine execution exited with unexpected exception",
                    exc_info=True,
                    extra={"send_to_api": False},
                )
    assert [(r.levelname, r.getMessage(), r.exc_info is None) for r in records] == [
        ("INFO", f"the run ends Cancelled (AwaitingMarkers): {waiting}", True),
        ("ERROR", "Engine execution exited with unexpected exception", False),
    ]


def test_concurrent_runs_are_serialized_and_exact(engine: Target, landing: Path, week: dict) -> None:
    results: list = []

    def night(as_of: str) -> None:
        results.append(run_nightly("sales", engine, landing, ts(as_of), quiet=True, lock_timeout=300))

    threads = [threading.Thread(target=night, args=(a,)) for a in ("2026-11-24T00:30", "2026-11-24T00:30")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.ok for r in results] == [True, True]
    assert sorted(r.step_seconds["lock"] > 1 for r in results) == [False, True]  # one waited
    with Warehouse(engine) as wh:
        lines = wh.scalar(f"select count(*) from {engine.landing_schema}.sale_lines")
    assert lines == landed_lines(landing, "2026-11-24T00")
    ours = published(engine)
    assert ours["2026-11-20"] / week["2026-11-20"] > Decimal("0.99")
    assert ours["2026-11-20"] <= week["2026-11-20"]


def test_second_runner_gets_a_clear_message(engine: Target, landing: Path, week: dict) -> None:
    from dayclose.runlock import run_lock

    with run_lock(engine, "sales"), pytest.raises(WarehouseBusy, match="another dayclose run holds"):
        run_nightly("sales", engine, landing, ts("2026-11-24T00:30"), quiet=True, lock_timeout=0)


def start_run_and_wait_for_the_build(
    engine: Target, landing: Path, until: str = "START batch"
) -> subprocess.Popen[str]:
    """`dayclose run sales` of the week's last night in a process of its own, returned once
    dbt's log says `until` (by default: dbt has started the microbatch build's first batch)."""
    env = {**os.environ, "DAYCLOSE_TARGET": engine.name}
    cmd = [sys.executable, "-m", "dayclose.cli", "run", "sales", "--as-of", "2026-11-25T00:30"]
    proc = subprocess.Popen(
        [*cmd, "--landing", str(landing)],
        env=env,
        cwd=PROJECT_DIR,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    state = Path(os.environ["DAYCLOSE_STATE_DIR"])
    deadline = time.monotonic() + 240
    while proc.poll() is None and time.monotonic() < deadline:
        logs = list(state.glob("*/logs/dbt.log"))
        if logs and until in logs[0].read_text(errors="replace"):
            return proc
        time.sleep(0.05)
    proc.kill()
    out, err = proc.communicate()
    raise AssertionError(f"the run ended before its build could be interrupted:\n{out}\n{err}")


def rerun_is_exact(engine: Target, landing: Path, week: dict) -> None:
    """Nothing was published; the next run gets the lock at once and publishes the truth."""
    assert published(engine) == {}
    rerun = run_nightly("sales", engine, landing, ts("2026-11-25T00:30"), quiet=True, lock_timeout=0)
    assert rerun.ok, rerun.lines()
    # by Nov 25 00:30 every sale of Nov 20 has arrived (the last ones 72 h after the day)
    assert published(engine)["2026-11-20"] == week["2026-11-20"]


def test_run_killed_mid_build_then_rerun_is_exact(engine: Target, landing: Path, week: dict) -> None:
    proc = start_run_and_wait_for_the_build(engine, landing)
    os.kill(proc.pid, signal.SIGKILL)  # in the middle of the microbatch build
    proc.communicate()
    rerun_is_exact(engine, landing, week)


def test_sigterm_mid_build_stops_in_one_line_and_releases_the_lock(
    engine: Target, landing: Path, week: dict
) -> None:
    """A scheduler's SIGTERM: dbt's queries cancelled, the lock released, one line, exit 143."""
    proc = start_run_and_wait_for_the_build(engine, landing)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 143, (out, err)
    lines = err.strip().splitlines()
    assert lines[-1].startswith(
        "dayclose run: stopped by SIGTERM in step build: nothing of this run was published"
    ), err
    assert lines[-1].endswith("the run lock is released"), err
    assert "Traceback" not in err and "leaked semaphore" not in err, err
    assert out == "", out  # no summary: the run did not end
    rerun_is_exact(engine, landing, week)


def test_a_run_lock_lost_under_the_run_stops_its_publication(postgres_target: Target) -> None:
    """A session that ends takes its advisory lock with it, and another run may start: the
    check before publication says so instead of publishing next to that run."""
    from dayclose.runlock import run_lock

    with run_lock(postgres_target, "sales") as lock_held:
        lock_held("publish")  # held: no word
        with Warehouse(postgres_target) as wh:
            [(ended,)] = wh.query(
                "select pg_terminate_backend(pid) from pg_stat_activity "
                "where application_name = 'dayclose sales run lock' and datname = current_database()"
            )
        assert ended
        with pytest.raises(Unavailable, match=r"^publish: lost the connection to Postgres at "):
            lock_held("publish")
        with run_lock(postgres_target, "units", timeout=0) as other:  # the lock is free again
            other("publish")


def test_postgres_going_away_mid_build_is_one_line_and_exit_69(
    postgres_target: Target, landing: Path, week: dict
) -> None:
    """A failover or an admin ends every session of the run under dbt's build."""
    proc = start_run_and_wait_for_the_build(postgres_target, landing, until="Concurrency:")
    # the moment one of dbt's statements runs, every session of the run ends (dbt's, the lock's)
    deadline = time.monotonic() + 120
    with Warehouse(postgres_target) as wh:
        while proc.poll() is None and time.monotonic() < deadline:
            ended = wh.query(
                "select pg_terminate_backend(pid) from pg_stat_activity "
                "where datname = current_database() and pid <> pg_backend_pid() "
                "and exists (select 1 from pg_stat_activity as busy where busy.datname = current_database() "
                "and busy.pid <> pg_backend_pid() and busy.state = 'active' "
                'and busy.query like \'%%"node_id": "model.dayclose.%%\')'
            )
            if ended:
                break
            time.sleep(0.01)
    assert ended, "the run ended before one of dbt's statements could be interrupted"
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 69, (out, err)
    [line] = [ln for ln in err.splitlines() if ln.startswith("dayclose run:")]
    assert re.match(
        r"dayclose run: build: lost the connection to Postgres at [^ ]+, database dayclose_test_\w+ "
        r"\(.*(terminating connection|server closed the connection).*\); nothing of this run was "
        r"published .*; the run lock is released: run it again once the server answers$",
        line,
    ), line
    assert "Traceback" not in err, err
    rerun_is_exact(postgres_target, landing, week)


def dbt_invocations() -> list[str]:
    """The dbt log of the test's state folder, one text per dbt invocation."""
    [log] = Path(os.environ["DAYCLOSE_STATE_DIR"]).glob("*/logs/dbt.log")
    return helpers.dbt_invocations(log.parent.parent)


def new_state_folder(target: Target) -> None:
    """No dbt state left by an earlier test on the worker (tests/conftest.py keeps dbt's
    partial-parse state from test to test)."""
    shutil.rmtree(target.dbt_target_dir, ignore_errors=True)


def dbt_commands() -> list[str]:
    """What each dbt invocation ran (prefect-dbt's runner logs no `Command` line: its builds
    are known by their summary line)."""
    commands = []
    for text in dbt_invocations():
        found = re.search(r"Command `cli (\w+)`", text)
        commands.append(found.group(1) if found else "build" if "Finished running" in text else "?")
    return commands


def test_a_first_build_that_published_nothing_leaves_the_next_run_a_first_build(
    engine: Target, landing: Path, week: dict
) -> None:
    """A first build stopped by its gates, or killed once dbt had created the mart, leaves the
    mart behind with nothing published: the next run still builds and publishes every loaded
    day, not only its window (Nov 20 left the 4-day window of a Nov 25 run)."""
    as_of = ts("2026-11-25T00:30")
    jobs.load_step(engine, "sales", landing, as_of, None)
    window = (date(2026, 11, 22), date(2026, 11, 25))
    built = jobs.build_step(engine, "sales", window, as_of, {"run_id": "stopped"}, None, lambda: None, True)
    assert built.success
    assert table(engine, "select count(*) from {schema}.daily_sales") != [(0,)]
    assert published(engine) == {}

    rerun = run_nightly("sales", engine, landing, as_of, quiet=True, lock_timeout=30)
    assert rerun.ok, rerun.lines()
    assert rerun.window == (FIRST, date(2026, 11, 25))
    ours = published(engine)
    assert sorted(ours) == sorted(week)
    assert ours["2026-11-20"] == week["2026-11-20"]  # every sale of Nov 20 had arrived


@pytest.mark.parametrize("engine", ["duckdb"], indirect=True)  # dbt's parse: the same on both engines
def test_the_build_runs_on_the_parse_made_during_the_load(
    engine: Target, landing: Path, week: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """dbt parses the project once per run, in a thread beside the load; the build does not parse;
    neither sends usage events."""
    for opt_out in ("DO_NOT_TRACK", "DBT_SEND_ANONYMOUS_USAGE_STATS"):  # the project's flag alone
        monkeypatch.delenv(opt_out, raising=False)
    new_state_folder(engine)
    summary = run_nightly("sales", engine, landing, ts("2026-11-25T00:30"), quiet=True)
    assert summary.ok, summary.lines()
    assert dbt_commands() == ["parse", "build"]
    parse, build = dbt_invocations()
    assert "Starting full parse" in parse  # a new state folder
    assert "full parse" not in build and "Partial parsing" not in build
    # dbt_project.yml's flags: no usage events for dbt Labs, in either invocation
    assert "Sending event" not in parse + build
    assert published(engine)["2026-11-20"] == week["2026-11-20"]


@pytest.mark.parametrize("engine", ["duckdb"], indirect=True)  # dbt's files: the same on both engines
def test_each_run_parses_once_and_dbt_parses_again_only_what_changed(
    engine: Target, landing: Path, week: dict
) -> None:
    """A run parses the project beside its load and builds on that parse (dbtRunner(manifest=)):
    one parse and one build per run; dbt's partial parsing reads the last run's state, and other
    --vars make dbt parse the whole project again."""
    folder = engine.dbt_target_dir
    new_state_folder(engine)

    def night(as_of: str, **kwargs) -> str:
        summary = run_nightly("sales", engine, landing, ts(as_of), quiet=True, **kwargs)
        assert summary.ok, summary.lines()
        assert "model.dayclose.daily_sales" in json.loads((folder / "manifest.json").read_text())["nodes"]
        return json.loads((folder / "run_results.json").read_text())["metadata"]["invocation_id"]

    ids = [night("2026-11-24T00:30"), night("2026-11-25T00:30"), night("2026-11-25T00:30", window_days=5)]
    assert len(set(ids)) == 3
    assert dbt_commands() == ["parse", "build"] * 3
    full = ["Unable to do partial parsing" in text for text in dbt_invocations()[::2]]
    assert full == [True, False, True]  # a new state folder; nothing changed; other --vars


@pytest.mark.parametrize("engine", ["duckdb"], indirect=True)  # the job's Python
def test_a_run_whose_load_fails_leaves_no_parse_behind(
    engine: Target, landing: Path, week: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    def load_dies(*args):
        raise RuntimeError("the landing's disk is gone (injected)")

    monkeypatch.setattr(jobs, "load_step", load_dies)
    with pytest.raises(RuntimeError, match="injected"):
        run_nightly("sales", engine, landing, ts("2026-11-25T00:30"), quiet=True)
    assert [t.name for t in threading.enumerate() if t.name.startswith("dayclose-dbt")] == []


@on_duckdb_with_prefect
def test_incident_004s_chain_a_retried_load_a_cleared_sensor_and_a_restatement(
    prefect_api, engine: Target, landing: Path, week: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Incident 004's nights under the flows, on one landing: a load fails after writing rows and
    the task retries (totals stay 1.0x); the next night a cleared sensor delivers Nov 24's
    batches complete but empty and the zero-rows gate keeps the published numbers; then a late
    upload restates a closed day through the audited path."""
    from flows.restate_flow import restate_days
    from flows.sales_flow import sales_nightly

    monkeypatch.setattr(prefect_tasks, "RETRIES", 2)
    monkeypatch.setattr(prefect_tasks, "BACKOFF_SECONDS", 0.01)
    real_ingest = load_module.ingest_files
    failures = {"left": 1}

    def ingest_then_fail(wh, table_name, files):
        written = real_ingest(wh, table_name, files)  # the rows are written ...
        if failures["left"]:
            failures["left"] -= 1
            raise RuntimeError("serializable isolation violation (injected)")  # ... then the load dies
        return written

    monkeypatch.setattr(load_module, "ingest_files", ingest_then_fail)
    state = sales_nightly(
        as_of="2026-11-24T00:30", target=engine.name, landing=str(landing), return_state=True
    )
    assert state.is_completed(), state.message
    assert failures["left"] == 0
    with Warehouse(engine) as wh:
        lines = wh.scalar(f"select count(*) from {engine.landing_schema}.sale_lines")
    assert lines == landed_lines(landing, "2026-11-24T00")  # every line once, none twice
    published_before = published(engine)
    closed = published_before["2026-11-20"]
    assert closed <= week["2026-11-20"] and closed / week["2026-11-20"] > Decimal("0.99")

    # a cleared sensor: Nov 24's batches arrive complete but empty
    for hour in range(24):
        folder = landing / "sales" / f"arrived=2026-11-24T{hour:02d}"
        for part in folder.glob("part-*.jsonl"):
            part.unlink()
        (folder / "_SUCCESS").write_text(
            json.dumps({"source": "sales", "batch": folder.name[8:], "files": []})
        )
    state = sales_nightly(
        as_of="2026-11-25T00:30", target=engine.name, landing=str(landing), return_state=True
    )
    assert state.is_failed()
    assert "sales_no_empty_days" in state.message and "2026-11-24" in state.message
    assert published(engine) == published_before
    audit = table(engine, "select status, published from {schema}_published.run_audit order by started_at")
    assert [(s, bool(p)) for s, p in audit] == [("published", True), ("gates failed", False)]

    monkeypatch.setenv("DAYCLOSE_USER", "finance.analyst")
    # a till uploads a Nov 20 sale on Nov 29, long after the day's last nightly rebuild
    write_batch(
        landing,
        "2026-11-29T10",
        [sale("late-1", "S-001", "2026-11-20T12:00:00Z", "2026-11-29T10:05:00Z", "100.00")],
    )
    state = restate_days(
        job="sales",
        start="2026-11-20",
        end="2026-11-20",
        reason="late till uploads",
        landing=str(landing),
        as_of="2026-11-30T09:00",
        target=engine.name,
        return_state=True,
    )
    assert state.is_completed(), state.message
    [row] = table(
        engine,
        "select restated_by, first_day, last_day, reason, total_before, total_after, "
        "published from {schema}_published.restatement_audit",
    )
    who, first, last, reason, before, after, was_published = row
    assert (who, str(first), str(last), reason, bool(was_published)) == (
        "finance.analyst",
        "2026-11-20",
        "2026-11-20",
        "late till uploads",
        True,
    )
    # before: the day as published at its close; after: every sale of the day in the landing
    # now (the cleared hours' late sales of Nov 20 gone with them) and the late upload
    landed = sum(
        (
            amount
            for sold, _, amount in valid_sales_first_arrivals(landing).values()
            if str(sold.date()) == "2026-11-20"
        ),
        Decimal(0),
    )
    assert Decimal(str(before)) == closed
    assert Decimal(str(after)) == landed and landed > closed
    assert published(engine)["2026-11-20"] == landed
    # each run parses once, beside its load, and prefect-dbt's runner builds on that parse; the
    # later parses are dbt's partial parses of the first one's state
    assert dbt_commands() == ["parse", "build"] * 3
    assert ["Unable to do partial parsing" in text for text in dbt_invocations()[2::2]] == [False, False]


@pytest.mark.parametrize("engine", ["postgres"], indirect=True)  # DuckDB has no roles (README)
def test_readers_role_reads_published_and_nothing_else(engine: Target, landing: Path, week: dict) -> None:
    import psycopg2

    assert run_nightly("sales", engine, landing, ts("2026-11-24T00:30"), quiet=True).ok
    with Warehouse(engine) as wh:
        wh.execute(
            "do $$ begin if not exists (select from pg_roles where rolname = 'dayclose_test_dash') "
            "then create role dayclose_test_dash login; end if; end $$"
        )
        wh.execute("grant dayclose_reader to dayclose_test_dash")
    conn = psycopg2.connect("", user="dayclose_test_dash")
    try:
        with conn.cursor() as cur:
            cur.execute(f"select count(*) from {engine.schema}_published.daily_sales")
            assert cur.fetchone()[0] > 0
        conn.rollback()
        for relation in (f"{engine.schema}.daily_sales", f"{engine.landing_schema}.sale_lines"):
            with pytest.raises(psycopg2.errors.InsufficientPrivilege), conn.cursor() as cur:
                cur.execute(f"select count(*) from {relation}")
            conn.rollback()
    finally:
        conn.close()
