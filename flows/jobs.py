"""The nightly job, one code path for the CLI and the Prefect flows.

load the complete batches that had arrived by as-of -> rebuild the window that
ends with the day before as-of (dbt build: models and the gate tests) -> report.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from pathlib import Path

import yaml

from flows import dbt
from flows.landing import SOURCES, LoadReport, SourceSpec, load_source
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

    @property
    def ok(self) -> bool:
        return not self.load.refused and self.build is not None and self.build.success

    def lines(self) -> list[str]:
        """The short printed summary."""
        start, end = self.window
        out = [
            f"dayclose {self.kind} {self.job} as of {self.as_of:%Y-%m-%d %H:%M} UTC on {self.target}: "
            f"days {start} .. {end - timedelta(days=1)}",
            f"  load: {len(self.load.loaded)} batches, {self.load.rows_loaded:,} lines loaded; "
            f"{self.load.already_loaded} already loaded; {len(self.load.waiting)} waiting for _SUCCESS; "
            f"{len(self.load.refused)} refused ({self.load.seconds:.1f}s)",
        ]
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
                out.append(f"  FAILED {node.resource_type} {node.name}: {node.message}")
            for node in self.build.warned():
                out.append(f"  warn {node.name}: {node.message}")
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
        else:
            out.append("  lateness: not measured yet (no settled days in the measurement range)")
        if self.restate_days:
            out.append(
                "  days with events too late for the window (restate them): "
                + ", ".join(str(d) for d in self.restate_days)
            )
        out.append("  result: " + ("ok" if self.ok else "FAILED"))
        return out


def window_for(as_of: datetime, window_days: int) -> tuple[date, date]:
    """The days [start, end) a run as of `as_of` rebuilds: the window ending the day before."""
    end = as_of.date()
    return end - timedelta(days=window_days), end


def run_nightly(
    job_name: str,
    target: Target,
    landing: Path,
    as_of: datetime,
    window_days: int | None = None,
    invoker: dbt.Invoker | None = None,
    quiet: bool = False,
) -> RunSummary:
    """Load, rebuild the window, run the gates, read back the summary."""
    job = JOBS[job_name]
    days = window_days or int(project_vars()[job.window_var])
    with Warehouse(target) as wh:
        load = load_source(wh, job.source, landing, as_of)
        window = window_for(as_of, days)
        if not wh.relation_exists(target.schema, job.mart):
            # First build: every day loaded so far, not only the window; but not before a month
            # ahead of the first arrival (a garbage timestamp must not start the history in 2001).
            # Older days, if any, show in <source>_late_arrivals and are restated explicitly.
            raw = f"{target.landing_schema}.{job.source.table}"
            first = wh.scalar(
                f"select min({job.source.event_time}) from {raw} where decode_error is null "
                f"and batch_completed_at <= %s and {job.source.event_time} >= "
                f"(select min(batch_arrived_at) from {raw}) - interval '{FIRST_BUILD_LOOKBACK_DAYS} days'",
                (as_of,),
            )
            if first is not None and first.date() < window[0]:
                window = (first.date(), window[1])
    summary = RunSummary(job_name, target.name, as_of, window, load, window_days=days)
    return _build(job, target, summary, {job.window_var: days}, invoker, quiet)


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
) -> RunSummary:
    """Rebuild the days start..end (inclusive), beyond the nightly window if need be.

    Loads any complete batch not yet loaded first (when given a landing), rebuilds the
    days whole, runs the same gates, and records the reason with every value it changes
    (daily_good_units_versions; units_restatements once the month has closed). Running it
    again changes nothing.
    """
    if end < start:
        raise SystemExit(f"dayclose restate: --end {end} is before --start {start}")
    if not reason.strip():
        raise SystemExit("dayclose restate: --reason must say why")
    job = JOBS[job_name]
    as_of = as_of or datetime.now(UTC).replace(tzinfo=None, microsecond=0)
    with Warehouse(target) as wh:
        load = load_source(wh, job.source, landing, as_of) if landing else LoadReport(job.source.name, as_of)
    window = (start, end + timedelta(days=1))
    summary = RunSummary(job_name, target.name, as_of, window, load, window_days=(window[1] - start).days)
    summary.kind = "restate"
    return _build(job, target, summary, {"restate_reason": reason}, invoker, quiet)


def _build(
    job: Job,
    target: Target,
    summary: RunSummary,
    extra_vars: dict,
    invoker: dbt.Invoker | None,
    quiet: bool,
) -> RunSummary:
    """dbt build of the job's models and gates for the summary's days; then read back."""
    start, end = summary.window
    variables = {**extra_vars, "rebuilt_from": start.isoformat(), "rebuilt_to": end.isoformat()}
    args = dbt.dbt_args(
        target,
        ["build", "--select", job.selector],
        as_of=summary.as_of,
        window=summary.window,
        extra_vars=variables,
        quiet=quiet,
    )
    summary.build = dbt.invoke(target, args, invoker)
    if summary.build.success or summary.build.nodes:
        with Warehouse(target) as wh:
            _read_back(wh, job, summary)
    return summary


def _reason_kind(reason: str | None) -> str:
    """A dead-letter reason without the offending value, for counting by kind."""
    parts = (reason or "unknown").split("; ")[0].split(": ")
    text = parts[0] if parts[0] == "invalid JSON" else ": ".join(parts[:2])
    text = re.sub(r" ?'[^']*'", "", text)
    return re.sub(r"^(unknown \w+) .*$", r"\1", text)


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
    if wh.relation_exists(schema, job.late_arrivals):
        summary.restate_days = [
            r[0]
            for r in wh.query(
                f"select event_date from {schema}.{job.late_arrivals} where needs_restatement order by 1"
            )
        ]
