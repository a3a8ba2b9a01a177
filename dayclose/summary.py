"""What a run did, read back from the warehouse and printed: the summary of `dayclose run`.

The same RunSummary is the Prefect flows' log and final state, and the run audit's row.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta

from dayclose import dbt_runner as dbt
from dayclose.loader import LoadReport, pending_summary
from dayclose.sources import Source, sources
from dayclose.warehouse import Warehouse


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
    target: str  # the target's name; `warehouse` says where it is
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
    days_not_final: list[date] = field(default_factory=list)  # missed nights beyond catch_up_max_days
    days_held: list[date] = field(default_factory=list)  # not published: conflicting copies
    warehouse: str = ""  # Target.describe(): the DuckDB file, or the Postgres server and database
    # keys besides the contract's fields in this run's batches: (keys, lines, first batch ever)
    new_fields: list[tuple[str, int, str]] = field(default_factory=list)
    strict_fields: bool = False  # the run's <source>_strict_fields: such lines are dead letters

    @property
    def source(self) -> Source:
        return sources()[self.job]

    @property
    def ok(self) -> bool:
        return self.published and not self.load.refused and not self.load.missing_folder

    @property
    def listed_days(self) -> tuple[date, date]:
        """The days the summary lists, inclusive: the last window_days of the window (a first
        build or a catch-up rebuilds more; the header says from when)."""
        end = self.window[1] - timedelta(days=1)
        return max(self.window[0], self.window[1] - timedelta(days=self.window_days)), end

    def days_text(self) -> str:
        """The listed days as every message names them: `2026-11-26 .. 2026-11-29`."""
        first, last = self.listed_days
        return f"{first} .. {last}"

    def lines(self) -> list[str]:
        """The short printed summary."""
        rebuilt = "" if self.window[0] >= self.listed_days[0] else f" (rebuilt from {self.window[0]})"
        out = [
            f"dayclose {self.kind} {self.job} as of {self.as_of:%Y-%m-%d %H:%M} UTC on {self.target}: "
            f"days {self.days_text()}{rebuilt}",
        ]
        if self.warehouse:
            out.append(f"  warehouse: {self.warehouse}")
        if self.missing_markers:
            out.append(
                f"  WAITING: {len(self.missing_markers)} arrival hours have no _SUCCESS yet: "
                f"{pending_summary(self.missing_markers)}; nothing was loaded, built or published"
            )
        else:
            out.append(
                f"  load: {len(self.load.loaded)} batches, {self.load.rows_loaded:,} lines loaded; "
                f"{self.load.already_loaded} already loaded; {len(self.load.waiting)} waiting for _SUCCESS; "
                f"{len(self.load.refused)} refused ({self.load.seconds:.1f}s)"
            )
        if self.load.missing_folder:
            out.append(
                f"  ERROR no folder {self.load.missing_folder} for the {self.job} batches (a mistyped "
                "--landing, an unmounted share?): nothing loaded; the days' gates still ran"
            )
        for batch in self.load.waiting[-5:]:
            out.append(f"  waiting: {self.job} arrived={batch} has no _SUCCESS yet; loaded once it has")
        for refused in self.load.refused:
            out.append(f"  ERROR {refused.message}")
        for problem in self.load.problems:
            out.append(f"  warning: {problem}")
        for keys, lines, first in self.new_fields:
            kept = "dead-lettered: strict_fields" if self.strict_fields else "counted"
            out.append(
                f"  new fields: {lines:,} lines of this run's batches carried {keys} besides the "
                f"contract's fields ({kept}; first in batch {first}): see {self.source.new_fields}"
            )
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
        job = self.source
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
        if self.days_not_final:
            out.append(
                f"  WARNING: {len(self.days_not_final)} days never had their final build (missed nights "
                f"beyond catch_up_max_days), restate them: {_day_ranges(self.days_not_final)}"
            )
        if self.days_held:
            out.append(
                f"  held back (conflicting copies, hold_days_with_conflicting_copies): "
                f"{_day_ranges(self.days_held)}; their previous published numbers stay"
            )
        published = "published to the readers' schema" if self.published else "NOT published"
        verdict = "ok" if self.ok else "WAITING" if self.missing_markers else "FAILED"
        out.append(f"  result: {verdict}: {self.status}; {published}")
        if self.message:
            out.append(f"  {self.message}")
        return out


def _day_ranges(days: list[date]) -> str:
    """'2026-11-01..2026-11-03, 2026-11-07' for a sorted list of days."""
    ranges: list[list[date]] = []
    for day in days:
        if ranges and day == ranges[-1][1] + timedelta(days=1):
            ranges[-1][1] = day
        else:
            ranges.append([day, day])
    return ", ".join(str(a) if a == b else f"{a}..{b}" for a, b in ranges)


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


def read_back(wh: Warehouse, summary: RunSummary) -> None:
    """Fill the summary from the write side: the window's days, dead letters, lateness, gates."""
    job = summary.source
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
    if batch_ids and wh.relation_exists(schema, job.dead_letter_counts):
        marks = ", ".join(["%s"] * len(batch_ids))
        for kind, n in wh.query(
            f"select dead_letter_kind, sum(dead_letters) from {schema}.{job.dead_letter_counts} "
            f"where batch_id in ({marks}) group by 1",
            batch_ids,
        ):
            summary.dead_letters[kind] = int(n)
    if batch_ids and wh.relation_exists(schema, job.new_fields):
        marks = ", ".join(["%s"] * len(batch_ids))
        summary.new_fields = [
            (keys, int(lines), first)
            for keys, lines, first in wh.query(
                f"select new_fields, sum(case when batch_id in ({marks}) then line_count else 0 end), "
                f"min(batch_id) from {schema}.{job.new_fields} where new_fields is not null "
                f"group by new_fields "
                f"having sum(case when batch_id in ({marks}) then line_count else 0 end) > 0 "
                "order by new_fields",
                batch_ids * 2,
            )
        ]
    if wh.relation_exists(schema, "arrival_lateness"):
        row = wh.query(
            f"select delay_p99_hours, delay_p999_hours, configured_window_days, "
            f"configured_window_share, recommended_window_days from {schema}.arrival_lateness "
            "where source_name = %s",
            (job.name,),
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
