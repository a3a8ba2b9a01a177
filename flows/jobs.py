"""The nightly job and the restatement, one code path for the CLI and the Prefect flows.

lock the warehouse -> (wait for completeness markers) -> load the complete batches
that had arrived by as-of -> build the window that ends with the day before as-of
(dbt build: models and the gate tests, on the write side) -> publish to the readers'
schema only if every gate passed -> record the run. Each step is idempotent, so a
retry or a rerun can never double a number.
"""

from __future__ import annotations

import contextlib
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar

import yaml

from flows import dbt_runner as dbt
from flows.audit import gate_results_json, record_restatement, record_run
from flows.landing import RECHECK_DAYS, SOURCES, Batch, LoadReport, SourceSpec, load_source, pending_summary
from flows.publish import PublishMismatch, publish
from flows.runlock import run_lock
from flows.settings import PROJECT_DIR, Target
from flows.warehouse import Warehouse


@dataclass(frozen=True)
class Job:
    """What a nightly job of one source builds and reads back."""

    source: SourceSpec
    mart: str
    date_column: str
    value_sql: str  # the day's headline figure
    count_sql: str
    value_label: str
    count_label: str

    @property
    def selector(self) -> str:
        return f"+tag:{self.source.name}"

    @property
    def window_var(self) -> str:
        return f"{self.source.name}_window_days"

    @property
    def dead_letters(self) -> str:
        return f"{self.source.name}_dead_letters"

    @property
    def late_arrivals(self) -> str:
        return f"{self.source.name}_late_arrivals"


JOBS: dict[str, Job] = {
    "sales": Job(
        SOURCES["sales"], "daily_sales", "sale_date", "sum(sales_amount)", "sum(sales_count)", "", "sales"
    ),
    "units": Job(
        SOURCES["units"],
        "daily_good_units",
        "production_date",
        "sum(good_units)",
        "sum(good_units + rejected_units)",
        "good units",
        "units",
    ),
}


FIRST_BUILD_LOOKBACK_DAYS = 31


@lru_cache(maxsize=1)
def project_vars() -> dict:
    """The vars of dbt_project.yml: the one place the windows and thresholds are set."""
    with open(PROJECT_DIR / "dbt_project.yml") as fh:
        return yaml.safe_load(fh)["vars"]


@dataclass
class DayStatus:
    day: date
    total: object
    count: int
    can_still_change: bool
    expected_share_complete: float | None


@dataclass
class RunSummary:
    job: str
    target: str
    as_of: datetime
    window: tuple[date, date]
    load: LoadReport
    build: dbt.DbtOutcome | None = None
    days: list[DayStatus] = field(default_factory=list)
    dead_letters: dict[str, int] = field(default_factory=dict)
    lateness: dict[str, object] = field(default_factory=dict)
    restate_days: list[date] = field(default_factory=list)
    window_days: int = 4
    kind: str = "run"
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    missing_markers: list[str] = field(default_factory=list)
    gate_failures: dict[str, list[str]] = field(default_factory=dict)
    published: bool = False
    status: str = "started"
    message: str = ""
    step_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.published and not self.load.refused

    def lines(self) -> list[str]:
        """The short printed summary."""
        start, end = self.window
        out = [
            f"dayclose {self.kind} {self.job} as of {self.as_of:%Y-%m-%d %H:%M} UTC on {self.target}: "
            f"days {start} .. {end - timedelta(days=1)}",
        ]
        if self.missing_markers:
            out.append(
                f"  WAITING: {len(self.missing_markers)} arrival hours have no _SUCCESS yet: "
                f"{pending_summary(self.missing_markers)}; nothing was built or published"
            )
        out.append(
            f"  load: {len(self.load.loaded)} batches, {self.load.rows_loaded:,} lines loaded; "
            f"{self.load.already_loaded} already loaded; {len(self.load.waiting)} waiting for _SUCCESS; "
            f"{len(self.load.refused)} refused ({self.load.seconds:.1f}s)"
        )
        for batch in self.load.waiting[-5:]:
            out.append(f"  waiting: {self.job} arrived={batch} has no _SUCCESS yet; loaded once it has")
        for refused in self.load.refused:
            out.append(f"  ERROR {refused.message}")
        for problem in self.load.problems:
            out.append(f"  warning: {problem}")
        if self.dead_letters:
            reasons = ", ".join(f"{n} {r}" for r, n in sorted(self.dead_letters.items(), key=lambda x: -x[1]))
            out.append(f"  dead-lettered in this run's batches: {reasons}")
        if self.build is not None:
            models = [n for n in self.build.nodes if n.resource_type == "model"]
            tests = [n for n in self.build.nodes if n.resource_type == "test"]
            out.append(
                f"  build: {len(models)} models, {len(tests)} tests; "
                f"{len(self.build.failed())} failed, {len(self.build.warned())} warned"
            )
            for node in self.build.failed():
                kind = "gate" if node.is_gate else node.resource_type
                out.append(f"  FAILED {kind} {node.name}: {node.message}")
                out.extend(f"    {row}" for row in self.gate_failures.get(node.name, []))
            for node in self.build.warned():
                out.append(f"  warn {node.name}: {node.message}")
                out.extend(f"    {row}" for row in self.gate_failures.get(node.name, []))
            if self.build.error:
                out.append(f"  ERROR dbt: {self.build.error}")
        job = JOBS[self.job]
        for d in self.days:
            share = "-" if d.expected_share_complete is None else f"{d.expected_share_complete:.1%}"
            state = "can still change" if d.can_still_change else "final"
            out.append(
                f"  {d.day}: {d.total:>14,} {job.value_label} of {d.count:>10,} {job.count_label}; "
                f"{state}; expected complete {share}"
            )
        lt = self.lateness
        if lt.get("share") is not None:
            out.append(
                f"  lateness: p99 {lt['p99']:.1f}h, p99.9 {lt['p999']:.1f}h; window {lt['configured']} days "
                f"covers {lt['share']:.2%}; recommended {lt['recommended']} days"
            )
        elif self.build is not None:
            out.append("  lateness: not measured yet (no settled days in the measurement range)")
        if self.restate_days:
            out.append(
                "  days with events too late for the window (restate them): "
                + ", ".join(str(d) for d in self.restate_days)
            )
        published = "published to the readers' schema" if self.published else "NOT published"
        out.append(f"  result: {'ok' if self.ok else 'FAILED'}: {self.status}; {published}")
        if self.message:
            out.append(f"  {self.message}")
        return out


def window_for(as_of: datetime, window_days: int) -> tuple[date, date]:
    """The days [start, end) a run as of `as_of` rebuilds: the window ending the day before."""
    end = as_of.date()
    return end - timedelta(days=window_days), end


T = TypeVar("T")


def direct(name: str, fn: Callable[..., T], *args: Any) -> T:
    """Run a step as a plain call (the CLI); the Prefect flows pass a runner that makes it a task."""
    return fn(*args)


StepRunner = Callable[..., Any]


def run_nightly(
    job_name: str,
    target: Target,
    landing: Path,
    as_of: datetime,
    window_days: int | None = None,
    invoker: dbt.Invoker | None = None,
    quiet: bool = False,
    lock_timeout: float = 0.0,
    require_complete: bool = False,
    step: StepRunner = direct,
    run_id: str | None = None,
) -> RunSummary:
    """The nightly job: lock, (completeness), load, build and gate the window, publish, record."""
    job = JOBS[job_name]
    days = window_days or int(project_vars()[job.window_var])
    summary = RunSummary(
        job_name,
        target.name,
        as_of,
        window_for(as_of, days),
        LoadReport(job.source.name, as_of),
        window_days=days,
    )
    summary.run_id = run_id or summary.run_id
    return _run(
        job,
        target,
        summary,
        landing,
        # a project var: passed only when overridden (other --vars make dbt re-parse the project)
        {job.window_var: days} if window_days else {},
        invoker,
        quiet,
        lock_timeout,
        require_complete,
        step,
    )


def restate(
    job_name: str,
    target: Target,
    start: date,
    end: date,
    reason: str,
    landing: Path | None = None,
    as_of: datetime | None = None,
    invoker: dbt.Invoker | None = None,
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
        raise SystemExit(f"dayclose restate: --end {end} is before --start {start}")
    if not reason.strip():
        raise SystemExit("dayclose restate: --reason must say why")
    job = JOBS[job_name]
    as_of = as_of or datetime.now(UTC).replace(tzinfo=None, microsecond=0)
    window = (start, end + timedelta(days=1))
    summary = RunSummary(
        job_name,
        target.name,
        as_of,
        window,
        LoadReport(job.source.name, as_of),
        window_days=(window[1] - start).days,
        kind="restate",
    )
    summary.run_id = run_id or summary.run_id
    return _run(
        job,
        target,
        summary,
        landing,
        {"restate_reason": reason},
        invoker,
        quiet,
        lock_timeout,
        False,
        step,
        reason=reason,
    )


def _run(
    job: Job,
    target: Target,
    summary: RunSummary,
    landing: Path | None,
    extra_vars: dict,
    invoker: dbt.Invoker | None,
    quiet: bool,
    lock_timeout: float,
    require_complete: bool,
    step: StepRunner,
    reason: str | None = None,
) -> RunSummary:
    started = datetime.now(UTC).replace(tzinfo=None)
    clock = time.monotonic()
    with run_lock(target, summary.job, lock_timeout):
        summary.step_seconds["lock"] = time.monotonic() - clock
        try:
            _steps(job, target, summary, landing, extra_vars, invoker, quiet, require_complete, step, reason)
        except BaseException as exc:
            summary.status = "error"
            summary.message = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            # every run is recorded, also one that raised
            with Warehouse(target) as wh:
                record_run(wh, _audit_row(summary, started))
    return summary


def _steps(
    job: Job,
    target: Target,
    summary: RunSummary,
    landing: Path | None,
    extra_vars: dict,
    invoker: dbt.Invoker | None,
    quiet: bool,
    require_complete: bool,
    step: StepRunner,
    reason: str | None,
) -> None:
    if require_complete and landing is not None:
        summary.missing_markers = missing_markers(landing, job.source.name, summary.window[0], summary.as_of)
    if summary.missing_markers:
        summary.status = "waiting for completeness markers"
        return
    before = _total(target, job, summary.window) if summary.kind == "restate" else None
    if landing is not None:
        clock = time.monotonic()
        # a restatement re-reads every manifest: it is the path for old corrections
        recheck = None if summary.kind == "restate" else RECHECK_DAYS
        summary.load = step("load", load_step, target, job.source.name, landing, summary.as_of, recheck)
        summary.step_seconds["load"] = time.monotonic() - clock
    if summary.kind == "run":
        summary.window = _first_build_window(target, job, summary)
        summary.window = _with_unpublished_days(target, job, summary.window)
    clock = time.monotonic()
    variables = {**extra_vars, "run_id": summary.run_id}
    summary.build = step(
        "build", build_step, target, summary.job, summary.window, summary.as_of, variables, invoker, quiet
    )
    summary.step_seconds["build"] = time.monotonic() - clock
    with Warehouse(target) as wh:
        _read_back(wh, job, summary)
    if summary.build.success:
        clock = time.monotonic()
        try:
            step("publish", publish_step, target, summary.job, summary.window, summary.as_of)
        except PublishMismatch as exc:
            # built and gated, refused at publication (a later as-of already published these days)
            summary.status = "not published"
            summary.message = f"{exc}; the previous published numbers stay"
            _forget_unpublished_versions(target, summary.run_id)
        except BaseException:
            with contextlib.suppress(Exception):  # the publish error is the one to report
                _forget_unpublished_versions(target, summary.run_id)
            raise
        else:
            summary.published = True
            summary.status = "published" if not summary.load.refused else "published; batches refused"
        summary.step_seconds["publish"] = time.monotonic() - clock
    else:
        summary.status = "gates failed" if any(n.is_gate for n in summary.build.failed()) else "build failed"
        summary.message = "the previous published numbers stay; nothing of this run reached readers"
        _forget_unpublished_versions(target, summary.run_id)
    if summary.kind == "restate" and reason is not None:
        after = _total(target, job, summary.window)
        with Warehouse(target) as wh:
            record_restatement(
                wh,
                summary.run_id,
                summary.job,
                summary.window[0],
                summary.window[1] - timedelta(days=1),
                reason,
                before,
                after,
                summary.published,
            )


def _with_unpublished_days(target: Target, job: Job, window: tuple[date, date]) -> tuple[date, date]:
    """Widen the window to days built by earlier runs whose gates failed, so they get published.

    A failed run has rebuilt its window on the write side without publishing it; the next
    run's window may no longer reach its first day, which would then stay unpublished.
    """
    with Warehouse(target) as wh:
        if not wh.relation_exists(f"{target.schema}_published", "run_audit"):
            return window
        audit = f"{target.schema}_published.run_audit"
        first = wh.scalar(
            f"select min(window_start) from {audit} where job = %s and not published "
            "and status in ('gates failed', 'build failed', 'error') and started_at > coalesce("
            f"(select max(started_at) from {audit} where job = %s and published), "
            "cast('1900-01-01' as timestamp))",
            (job.source.name, job.source.name),
        )
    if first is not None and first < window[0]:
        return first, window[1]
    return window


def _forget_unpublished_versions(target: Target, run_id: str) -> None:
    """Published-value versions exist only for values that were published."""
    with Warehouse(target) as wh:
        if wh.relation_exists(target.schema, "daily_good_units_versions"):
            wh.execute(f"delete from {target.schema}.daily_good_units_versions where run_id = %s", (run_id,))


def load_step(
    target: Target, source: str, landing: Path, as_of: datetime, recheck_days: int | None
) -> LoadReport:
    """Load every complete batch that had arrived by as-of (idempotent: safe to retry)."""
    with Warehouse(target) as wh:
        return load_source(wh, SOURCES[source], landing, as_of, recheck_days=recheck_days)


def build_step(
    target: Target,
    job_name: str,
    window: tuple[date, date],
    as_of: datetime,
    extra_vars: dict,
    invoker: dbt.Invoker | None,
    quiet: bool,
) -> dbt.DbtOutcome:
    """dbt build of the job's models and gates for the window's days (idempotent: safe to retry)."""
    job = JOBS[job_name]
    start, end = window
    run_vars = {k: v for k, v in extra_vars.items() if k in dbt.RUN_VARS}
    run_vars.update(as_of=as_of, rebuilt_from=str(start), rebuilt_to=str(end))
    project_vars = {k: v for k, v in extra_vars.items() if k not in dbt.RUN_VARS}
    args = dbt.dbt_args(
        target, ["build", "--select", job.selector], window=window, extra_vars=project_vars, quiet=quiet
    )
    outcome = dbt.invoke(target, args, invoker, run_vars=run_vars)
    if outcome.error and not outcome.nodes:
        raise RuntimeError(f"dbt could not run: {outcome.error}")
    return outcome


def publish_step(target: Target, job_name: str, window: tuple[date, date], as_of: datetime) -> dict[str, int]:
    """Publish the window to the readers' schema, atomically."""
    with Warehouse(target) as wh:
        return publish(wh, job_name, window[0], window[1], as_of)


def missing_markers(landing: Path, source: str, first_day: date, as_of: datetime) -> list[str]:
    """Arrival hours from `first_day` 00:00 up to the last hour ended by as-of without _SUCCESS."""
    hour = datetime.combine(first_day, datetime.min.time())
    missing = []
    while hour + timedelta(hours=1) <= as_of:
        batch = Batch(source, hour.strftime("%Y-%m-%dT%H"), landing / source / f"arrived={hour:%Y-%m-%dT%H}")
        if not batch.marker.exists():
            missing.append(batch.batch_id)
        hour += timedelta(hours=1)
    return missing


def _first_build_window(target: Target, job: Job, summary: RunSummary) -> tuple[date, date]:
    window = summary.window
    with Warehouse(target) as wh:
        if wh.relation_exists(target.schema, job.mart):
            return window
        # First build: every day loaded so far, not only the window; but not before a month
        # ahead of the first arrival (a garbage timestamp must not start the history in 2001).
        # Older days, if any, show in <source>_late_arrivals and are restated explicitly.
        raw = f"{target.landing_schema}.{job.source.table}"
        first = wh.scalar(
            f"select min({job.source.event_time}) from {raw} where decode_error is null "
            f"and batch_completed_at <= %s and {job.source.event_time} >= "
            f"(select min(batch_arrived_at) from {raw}) - interval '{FIRST_BUILD_LOOKBACK_DAYS} days'",
            (summary.as_of,),
        )
    if first is not None and first.date() < window[0]:
        return first.date(), window[1]
    return window


def _total(target: Target, job: Job, window: tuple[date, date]) -> float | None:
    """The job's published total over the window: what readers saw (None before any publish)."""
    published = f"{target.schema}_published"
    with Warehouse(target) as wh:
        if not wh.relation_exists(published, job.mart):
            return None
        value = wh.scalar(
            f"select {job.value_sql} from {published}.{job.mart} "
            f"where {job.date_column} >= %s and {job.date_column} < %s",
            window,
        )
    return None if value is None else float(value)


def _audit_row(summary: RunSummary, started: datetime) -> dict:
    nodes = summary.build.nodes if summary.build else []
    tests = [n for n in nodes if n.resource_type == "test"]
    return {
        "run_id": summary.run_id,
        "job": summary.job,
        "kind": summary.kind,
        "as_of": summary.as_of,
        "window_start": summary.window[0],
        "window_end": summary.window[1],
        "batches_loaded": len(summary.load.loaded),
        "rows_loaded": summary.load.rows_loaded,
        "batches_waiting": len(summary.load.waiting) + len(summary.missing_markers),
        "batches_refused": len(summary.load.refused),
        "gates_passed": sum(1 for n in tests if n.status == "pass"),
        "gates_failed": sum(1 for n in tests if n.status in ("fail", "error")),
        "gates_warned": sum(1 for n in tests if n.status == "warn"),
        "gate_results": gate_results_json(nodes),
        "published": summary.published,
        "status": summary.status,
        "message": summary.message or None,
        "started_at": started,
        "lock_s": summary.step_seconds.get("lock"),
        "load_s": summary.step_seconds.get("load"),
        "build_s": summary.step_seconds.get("build"),
        "publish_s": summary.step_seconds.get("publish"),
    }


def _reason_kind(reason: str | None) -> str:
    """A dead-letter reason without the offending value, for counting by kind."""
    parts = (reason or "unknown").split("; ")[0].split(": ")
    text = parts[0] if parts[0] == "invalid JSON" else ": ".join(parts[:2])
    text = re.sub(r" ?'[^']*'", "", text)
    return re.sub(r"^(unknown \w+) .*$", r"\1", text)


def _failing_rows(wh: Warehouse, relation: str, limit: int = 5) -> list[str]:
    """The first rows a failed test stored (store_failures): the day and the figures."""
    try:
        cols, rows = wh.columns_and_rows(f"select * from {relation} limit {limit + 1}")
    except Exception as exc:  # the message must not hide the failure itself
        return [f"(failing rows not readable: {exc})"]
    text = [", ".join(f"{c}={v}" for c, v in zip(cols, row, strict=True)) for row in rows[:limit]]
    if len(rows) > limit:
        text.append(f"... more rows in {relation}")
    return text


def _read_back(wh: Warehouse, job: Job, summary: RunSummary) -> None:
    schema = wh.target.schema
    end = summary.window[1]
    start = end - timedelta(days=summary.window_days)
    if wh.relation_exists(schema, job.mart):
        rows = wh.query(
            f"select {job.date_column}, {job.value_sql}, {job.count_sql}, bool_or(can_still_change), "
            f"min(expected_share_complete) from {schema}.{job.mart} "
            f"where {job.date_column} >= %s and {job.date_column} < %s group by 1 order by 1",
            (start, end),
        )
        summary.days = [
            DayStatus(r[0], r[1], int(r[2]), bool(r[3]), None if r[4] is None else float(r[4])) for r in rows
        ]
    batch_ids = [r.batch_id for r in summary.load.loaded]
    if batch_ids and wh.relation_exists(schema, job.dead_letters):
        marks = ", ".join(["%s"] * len(batch_ids))
        for reason, n in wh.query(
            f"select dead_letter_reason, count(*) from {schema}.{job.dead_letters} "
            f"where batch_id in ({marks}) group by 1",
            batch_ids,
        ):
            key = _reason_kind(reason)
            summary.dead_letters[key] = summary.dead_letters.get(key, 0) + int(n)
    if wh.relation_exists(schema, "arrival_lateness"):
        row = wh.query(
            f"select delay_p99_hours, delay_p999_hours, configured_window_days, "
            f"configured_window_share, recommended_window_days from {schema}.arrival_lateness "
            "where source_name = %s",
            (job.source.name,),
        )
        if row:
            p99, p999, configured, share, recommended = row[0]
            summary.lateness = {
                "p99": float(p99),
                "p999": float(p999),
                "configured": configured,
                "share": None if share is None else float(share),
                "recommended": recommended,
            }
    if summary.build is not None:
        for node in summary.build.failed() + summary.build.warned():
            if node.resource_type == "test" and node.relation_name:
                summary.gate_failures[node.name] = _failing_rows(wh, node.relation_name)
    if wh.relation_exists(schema, job.late_arrivals):
        summary.restate_days = [
            r[0]
            for r in wh.query(
                f"select event_date from {schema}.{job.late_arrivals} where needs_restatement order by 1"
            )
        ]
