"""The nightly job and the restatement: one code path for the CLI and the Prefect flows.

lock the warehouse -> (wait for completeness markers) -> load the complete batches
that had arrived by as-of -> build the window that ends with the day before as-of
(dbt build: models and the gate tests, on the write side) -> publish to the readers'
schema only if every gate passed -> record the run. Each step is idempotent, so a
retry or a rerun can never double a number.

The steps are plain functions; `step` runs each one (a direct call for the CLI, a
retried Prefect task for the flows).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from dayclose import dbt_runner as dbt
from dayclose.audit import audit_row, record_restatement, record_run
from dayclose.console import progress
from dayclose.dates import utc_now
from dayclose.errors import DaycloseError, Terminated, Unavailable
from dayclose.loader import RECHECK_DAYS, LoadReport, load_source, missing_markers
from dayclose.publish import (
    PublishMismatch,
    export_for_readers,
    forget_unpublished_versions,
    publish,
    published_total,
)
from dayclose.runlock import LockCheck, run_lock
from dayclose.settings import Target
from dayclose.sources import Source, project_vars, source
from dayclose.summary import RunSummary, read_back
from dayclose.warehouse import Warehouse, connection_lost, lost_connection_message

FIRST_BUILD_LOOKBACK_DAYS = 31


def window_for(as_of: datetime, window_days: int) -> tuple[date, date]:
    """The days [start, end) a run as of `as_of` rebuilds: the window ending the day before."""
    end = as_of.date()
    return end - timedelta(days=window_days), end


T = TypeVar("T")
StepRunner = Callable[..., Any]


def direct(name: str, fn: Callable[..., T], *args: Any) -> T:
    """Run a step as a plain call (the CLI); the Prefect flows pass a runner that makes it a task."""
    return fn(*args)


@dataclass
class _Run:
    """One run's settings and its summary, passed from step to step."""

    source: Source
    target: Target
    summary: RunSummary
    landing: Path | None
    project_vars: dict  # dbt --vars: only overrides (other --vars make dbt re-parse the project)
    runner: dbt.RunnerFactory | None
    quiet: bool
    step: StepRunner
    require_complete: bool = False
    reason: str | None = None
    current_step: str = "lock"  # the step running, or the last one run (step_done), for messages
    step_done: bool = True
    lock_held: LockCheck = lambda step: None  # raises when the run lock was lost under the run


def run_nightly(
    job_name: str,
    target: Target,
    landing: Path,
    as_of: datetime,
    window_days: int | None = None,
    runner: dbt.RunnerFactory | None = None,
    quiet: bool = False,
    lock_timeout: float = 0.0,
    require_complete: bool = False,
    step: StepRunner = direct,
    run_id: str | None = None,
    dbt_vars: dict[str, Any] | None = None,
) -> RunSummary:
    """The nightly job: lock, (completeness), load, build and gate the window, publish, record.

    `dbt_vars`: project variables for this run's dbt invocations, as dbt's --vars (for example
    {"sales_strict_fields": true}); dbt parses the project again whenever they change."""
    src = source(job_name)
    days = window_days or src.window_days
    summary = RunSummary(job_name, target.name, as_of, window_for(as_of, days), LoadReport(src.name, as_of))
    summary.window_days = days
    summary.run_id = run_id or summary.run_id
    summary.warehouse = target.describe()
    overrides = {**({f"{src.name}_window_days": days} if window_days else {}), **(dbt_vars or {})}
    summary.strict_fields = bool(overrides.get(f"{src.name}_strict_fields", src.strict_fields))
    run = _Run(src, target, summary, landing, overrides, runner, quiet, step, require_complete)
    return _locked(run, lock_timeout)


def restate(
    job_name: str,
    target: Target,
    start: date,
    end: date,
    reason: str,
    landing: Path | None = None,
    as_of: datetime | None = None,
    runner: dbt.RunnerFactory | None = None,
    quiet: bool = False,
    lock_timeout: float = 0.0,
    step: StepRunner = direct,
    run_id: str | None = None,
) -> RunSummary:
    """Rebuild the days start..end (inclusive), beyond the nightly window if need be.

    Loads any complete batch not yet loaded first (when given a landing), rebuilds the
    days whole, runs the same gates, publishes through the same step, and records the
    reason with every value it changes (daily_good_units_versions; units_restatements once
    the month has closed) and in the restatement audit. Running it again changes nothing.
    """
    if end < start:
        raise DaycloseError(f"restate: --end {end} is before --start {start}: expected start <= end")
    if not reason.strip():
        raise DaycloseError("restate: --reason is empty: say why the days are restated")
    src = source(job_name)
    as_of = as_of or utc_now()
    window = (start, end + timedelta(days=1))
    summary = RunSummary(job_name, target.name, as_of, window, LoadReport(src.name, as_of), kind="restate")
    summary.window_days = (window[1] - start).days
    summary.strict_fields = src.strict_fields
    summary.run_id = run_id or summary.run_id
    summary.warehouse = target.describe()
    run = _Run(src, target, summary, landing, {}, runner, quiet, step, reason=reason)
    return _locked(run, lock_timeout)


def _locked(run: _Run, lock_timeout: float) -> RunSummary:
    """The run under the warehouse's run lock; recorded in the run audit whatever happens."""
    summary = run.summary
    started = utc_now()
    clock = time.monotonic()
    with (
        run_lock(run.target, summary.job, lock_timeout) as run.lock_held,
        dbt.environment(dbt.dbt_env(run.target)),
    ):
        summary.step_seconds["lock"] = time.monotonic() - clock
        try:
            _steps(run)
        except BaseException as exc:
            summary.status = "error"
            summary.message = f"{type(exc).__name__}: {exc}"
            with contextlib.suppress(Exception):  # the run's own error is the one to report
                _record(run, started)
            explained = _explained(run, exc)
            if explained is exc:
                raise
            raise explained from exc
        _record(run, started)
    return summary


def _explained(run: _Run, exc: BaseException) -> BaseException:
    """A stop from outside said in one line: a SIGTERM, or a Postgres that went away (a
    failover, an admin, a restart), with the step it came in and what it leaves. Any
    other error as it is."""
    summary = run.summary
    step = f"after {run.current_step}" if run.step_done else run.current_step
    left = "the window was published before" if summary.published else "nothing of this run was published"
    if summary.load.loaded:
        left += f" (the {len(summary.load.loaded)} batches it loaded stay loaded for the next run)"
    elif run.current_step == "load" and not run.step_done:
        left += " (each batch it had finished loading stays loaded for the next run)"
    if isinstance(exc, Terminated):
        return Terminated(f"stopped by SIGTERM in step {step}: {left}; the run lock is released")
    if connection_lost(exc):
        exc = Unavailable(lost_connection_message(step, exc))
    if isinstance(exc, Unavailable):
        return Unavailable(f"{exc}; {left}; the run lock is released: run it again once the server answers")
    return exc


def _record(run: _Run, started: datetime) -> None:
    """Every run is recorded in the run audit, also one that raised; DuckDB readers get the new state."""
    with Warehouse(run.target) as wh:
        record_run(wh, audit_row(run.summary, started))
    export_for_readers(run.target)


def _timed(run: _Run, name: str, fn: Callable[..., T], *args: Any) -> T:
    """One step through the run's step runner, its duration in the summary."""
    clock = time.monotonic()
    run.current_step, run.step_done = name, False
    try:
        result = run.step(name, fn, *args)
        run.step_done = True
        return result
    finally:
        run.summary.step_seconds[name] = time.monotonic() - clock


def _steps(run: _Run) -> None:
    summary = run.summary
    if run.require_complete and run.landing is not None:
        summary.missing_markers = missing_markers(
            run.landing, run.source.name, summary.window[0], summary.as_of
        )
    if summary.missing_markers:
        summary.status = "waiting for completeness markers"
        return
    # dbt parses the project while the batches load; the build runs on that parse
    parsed = dbt.start_parse(run.target, run.project_vars)
    try:
        _load_build_publish(run, parsed.result)
    finally:
        futures.wait([parsed])  # never a parse left running after its run: dbt runs one at a time


def _load_build_publish(run: _Run, manifest: Callable[[], Any]) -> None:
    summary, target = run.summary, run.target
    before = published_total(target, run.source, summary.window) if run.reason is not None else None
    if run.landing is not None:
        # a restatement re-reads every manifest: it is the path for old corrections
        recheck = None if summary.kind == "restate" else RECHECK_DAYS
        summary.load = _timed(
            run, "load", load_step, target, run.source.name, run.landing, summary.as_of, recheck
        )
    if summary.kind == "run":
        with Warehouse(target) as wh:
            published_runs = _published_runs(wh, target, run.source)
            summary.window = _first_build_window(wh, target, run.source, summary, published_runs)
        _with_days_not_final(summary, published_runs)
    last_day = summary.window[1] - timedelta(days=1)
    progress(
        f"build {summary.job}: days {summary.window[0]} .. {last_day}, then the gates "
        f"(dbt's log: {target.state_dir / 'logs' / 'dbt.log'})"
    )
    variables = {**run.project_vars, "run_id": summary.run_id}
    if run.reason is not None:
        variables["restate_reason"] = run.reason
    summary.build = _timed(
        run,
        "build",
        build_step,
        target,
        summary.job,
        summary.window,
        summary.as_of,
        variables,
        run.runner,
        manifest,
        run.quiet,
    )
    if not summary.build.success:
        # a model dbt reports only as ERROR (a microbatch batch) may have lost its server:
        # a run lock gone with its session says so, in one line
        run.lock_held("build")
    with Warehouse(target) as wh:
        read_back(wh, summary)
    if summary.build.success:
        _publish(run)
    else:
        summary.status = "gates failed" if any(n.is_gate for n in summary.build.failed()) else "build failed"
        summary.message = "the previous published numbers stay; nothing of this run reached readers"
        forget_unpublished_versions(target, summary.run_id)
    if run.reason is not None:
        after = published_total(target, run.source, summary.window)
        with Warehouse(target) as wh:
            record_restatement(wh, summary, run.reason, before, after)


def _publish(run: _Run) -> None:
    summary = run.summary
    held = (
        _days_held(run.target, run.source, summary)
        if project_vars()["hold_days_with_conflicting_copies"]
        else frozenset()
    )
    try:
        run.current_step, run.step_done = "publish", False
        run.lock_held("publish")  # built while another run could take the lock: not for readers
        progress(f"publish {summary.job}: the gates passed; days {summary.days_text()} to the readers")
        _timed(run, "publish", publish_step, run.target, summary.job, summary.window, summary.as_of, held)
    except PublishMismatch as exc:
        # built and gated, refused at publication (a later as-of already published these days)
        summary.status = "not published"
        summary.message = f"{exc}; the previous published numbers stay"
        forget_unpublished_versions(run.target, summary.run_id)
    except BaseException:
        with contextlib.suppress(Exception):  # the publish error is the one to report
            forget_unpublished_versions(run.target, summary.run_id)
        raise
    else:
        summary.published = True
        summary.status = "published" if not summary.load.refused else "published; batches refused"
        if summary.load.missing_folder:
            summary.status += "; no source folder in the landing"
        if held:
            summary.days_held = sorted(held)
            summary.status += "; days held back"
            forget_unpublished_versions(run.target, summary.run_id, held)


def _days_held(target: Target, src: Source, summary: RunSummary) -> frozenset[date]:
    """The days of the window with a conflicting copy (its day and its first arrival's day)."""
    day = src.event_date
    with Warehouse(target) as wh:
        if not wh.relation_exists(target.schema, src.conflicting_copies):
            return frozenset()
        rows = wh.query(
            f"select {day}, first_{day} from {target.schema}.{src.conflicting_copies} "
            f"where {day} >= %s and {day} < %s",
            summary.window,
        )
    start, end = summary.window
    return frozenset(d for row in rows for d in row if start <= d < end)


def load_step(
    target: Target, source_name: str, landing: Path, as_of: datetime, recheck_days: int | None
) -> LoadReport:
    """Load every complete batch that had arrived by as-of (idempotent: safe to retry)."""
    with Warehouse(target) as wh:
        return load_source(wh, source(source_name), landing, as_of, recheck_days=recheck_days)


def build_step(
    target: Target,
    job_name: str,
    window: tuple[date, date],
    as_of: datetime,
    extra_vars: dict,
    runner: dbt.RunnerFactory | None,
    manifest: Callable[[], Any],
    quiet: bool,
) -> dbt.DbtOutcome:
    """dbt build of the job's models and gates for the window's days (idempotent: safe to retry)."""
    start, end = window
    run_vars = {k: v for k, v in extra_vars.items() if k in dbt.RUN_VARS}
    run_vars.update(as_of=as_of, rebuilt_from=str(start), rebuilt_to=str(end))
    overrides = {k: v for k, v in extra_vars.items() if k not in dbt.RUN_VARS}
    args = dbt.dbt_args(
        target,
        ["build", *source(job_name).selection],
        window=window,
        extra_vars=overrides,
        # prefect-dbt's runner (the flows) keeps dbt off the console by itself and sends its
        # lines to the flow run's log; dbt's own runner (the CLI) is told to
        quiet=quiet and runner is None,
    )
    with dbt.environment(dbt.run_environment(target, run_vars)):
        outcome = dbt.invoke(args, runner, manifest())
    if target.name == "postgres":
        # dbt reports a session that ended under a model as that model's error: a server
        # that went away fails the step (retried under Prefect), not the night's numbers
        lost = [n.message for n in outcome.failed() if connection_lost(n.message)]
        if lost or connection_lost(outcome.error):
            raise Unavailable(lost_connection_message("build", (lost or [outcome.error])[0]))
    if outcome.error and not outcome.nodes:
        raise RuntimeError(f"dbt could not run: {outcome.error}")
    return outcome


def publish_step(
    target: Target,
    job_name: str,
    window: tuple[date, date],
    as_of: datetime,
    held: frozenset[date] = frozenset(),
) -> dict[str, int]:
    """Publish the window (but the held days) to the readers' schema, atomically."""
    with Warehouse(target) as wh:
        return publish(wh, job_name, window[0], window[1], as_of, held)


def _with_days_not_final(summary: RunSummary, runs: list[tuple[date, date, datetime]]) -> None:
    """Widen the window back to the days that are not final yet, or list them for a restatement.

    A day is final once a published run rebuilt it at its last window position or later (as
    of day D + window_days). Runs missed (the scheduler was down) or failed leave days that
    left the window without that build, or were never built at all: the next run catches
    them up, when they are at most catch_up_max_days before its window; older ones are listed
    for a restatement and the run warns. `runs`: the source's published runs, from the run
    audit (_published_runs): nothing to keep besides.
    """
    window, days = summary.window, summary.window_days
    if not runs:
        return
    final = {
        start + timedelta(days=n)
        for start, end, as_of in runs
        for n in range((end - start).days)
        if as_of.date() >= start + timedelta(days=n + days)
    }
    first = min(start for start, _, _ in runs)
    not_final = [first + timedelta(days=n) for n in range((window[0] - first).days)]
    not_final = [day for day in not_final if day not in final]
    if not not_final:
        return
    limit = window[0] - timedelta(days=int(project_vars()["catch_up_max_days"]))
    summary.days_not_final = [day for day in not_final if day < limit]
    caught_up = [day for day in not_final if day >= limit]
    if caught_up:
        summary.window = (caught_up[0], window[1])


def _published_runs(wh: Warehouse, target: Target, src: Source) -> list[tuple[date, date, datetime]]:
    """(window_start, window_end, as_of) of every run of the source that published, from the run audit."""
    if not wh.relation_exists(f"{target.schema}_published", "run_audit"):
        return []
    return wh.query(
        f"select window_start, window_end, as_of from {target.schema}_published.run_audit "
        "where job = %s and published",
        (src.name,),
    )


def _first_build_window(
    wh: Warehouse,
    target: Target,
    src: Source,
    summary: RunSummary,
    published_runs: list[tuple[date, date, datetime]],
) -> tuple[date, date]:
    """A first build covers every day loaded so far, not only the window.

    A run is a first build until one run of the source has published: a first build stopped
    by its gates, or killed once dbt had created the mart, leaves the mart behind with nothing
    published, and the next run must still build and publish every day, not only its window.

    The first day is read off the raw lines' event time (the lines are decoded later, by
    dbt): not before a month ahead of the first arrival, so that a garbage timestamp cannot
    start the history in 2001, and a calendar day (a garbage `2026-00-15` is none: the line
    is dead-lettered by dbt). Older days, if any, show in <source>_late_arrivals and are
    restated explicitly.
    """
    window = summary.window
    event_at = src.event_at
    if published_runs and wh.relation_exists(target.schema, src.mart):
        return window
    raw = f"{target.landing_schema}.{src.table}"
    day = event_day_sql(wh, event_at)
    # Each line's day computed once: the range in the aggregate's filter, as a where on the
    # column is pushed down with the expression copied (DuckDB), and on Postgres `offset 0`,
    # which keeps the subquery from being merged into the outer query, where the expression is
    # copied into the filter and the aggregate, so each line would be decoded twice.
    fence = " offset 0" if wh.kind == "postgres" else ""
    days = f"from (select {day} as event_day from {raw}{fence}) as days"
    in_range = "filter (where event_day >= %s and event_day < %s)"
    bounds = (
        str(_first_arrival_day(wh, raw) - timedelta(days=FIRST_BUILD_LOOKBACK_DAYS)),
        str(window[0]),
    )
    first = wh.scalar(f"select min(event_day) {in_range} {days}", bounds)
    if first is None:
        return window
    earliest = _calendar_day(first)
    if earliest is None:  # the earliest is no calendar day: the earliest of those that are
        texts = wh.scalar(f"select array_agg(distinct event_day) {in_range} {days}", bounds) or []
        earliest = min(filter(None, map(_calendar_day, texts)), default=None)
    return (earliest, window[1]) if earliest is not None else window


def _calendar_day(text: str) -> date | None:
    try:
        return date.fromisoformat(text)
    except ValueError:
        return None


def event_day_sql(wh: Warehouse, event_at: str) -> str:
    """SQL: the day of a raw line's `event_at` timestamp, as text (null when none is found).

    The regular expression defines it: the first `"<event_at>" : "YYYY-MM-DDT` (or `t`), spaces allowed
    around the colon. Postgres' regular expressions are slow to capture, so the lines whose
    first `"<event_at>"` is followed by `: "`, a day of digits and a `T`, as dayclose's writers
    put it, take the day by position (strpos, substr, like, translate), and only the other
    lines go through the expression. The same result for every
    line: where the key's first occurrence is followed by a day, the expression matches there,
    and no match of it can start before the key's first occurrence. DuckDB's regular
    expressions are fast and its `translate` is not: there the same test of those 23
    characters is one full match.
    """
    key = f'"{event_at}"'
    head = f'{key}: "____-__-__T'  # the key, then the day's 10 characters, then the T
    key_and_day = f"substr(raw_line, strpos(raw_line, '{key}'), {len(head)})"  # 0: shorter than head
    day = f"substr({key_and_day}, {len(key) + 4}, 10)"
    pattern = wh.regexp_extract("raw_line", f'{key}[ ]*:[ ]*"([0-9]{{4}}-[0-9]{{2}}-[0-9]{{2}})[Tt]')
    if wh.kind == "spark":  # Java's regular expressions capture at no extra cost
        return pattern
    if wh.kind == "duckdb":
        has_day = f"""regexp_full_match({key_and_day}, '{key}: "[0-9]{{4}}-[0-9]{{2}}-[0-9]{{2}}T')"""
    else:
        has_day = f"{key_and_day} like '{head}' and translate({day}, '0123456789', '') = '--'"
    return f"case when {has_day} then {day} else {pattern} end"


def _first_arrival_day(wh: Warehouse, raw: str) -> date:
    first = wh.scalar(f"select min(batch_id) from {raw}")
    return date.fromisoformat(first[:10]) if first else date.max - timedelta(days=FIRST_BUILD_LOOKBACK_DAYS)
