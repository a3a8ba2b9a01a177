"""The run audit: one row per run, readable by analysts beside the published numbers.

`<schema>_published.run_audit` records every run, published or not: which job, as of
when, the days it rebuilt, the batches and rows it loaded, the gate results, whether
it published, and how long each step took, so the critical path of a night is visible.
`<schema>_published.restatement_audit` records who restated which days, when, why,
and the totals before and after.
"""

from __future__ import annotations

import getpass
import json
import os
from datetime import UTC, datetime, timedelta

from dayclose.publish import published_schema
from dayclose.summary import RunSummary
from dayclose.warehouse import Warehouse

RUN_AUDIT = """
    run_id varchar not null,
    job varchar not null,
    kind varchar not null,
    as_of timestamp not null,
    window_start date,
    window_end date,
    batches_loaded integer,
    rows_loaded bigint,
    batches_waiting integer,
    batches_refused integer,
    gates_passed integer,
    gates_failed integer,
    gates_warned integer,
    gate_results varchar,
    published boolean not null,
    status varchar not null,
    message varchar,
    started_at timestamp not null,
    finished_at timestamp not null,
    lock_s double precision,
    load_s double precision,
    build_s double precision,
    publish_s double precision
"""

RESTATEMENT_AUDIT = """
    run_id varchar not null,
    job varchar not null,
    restated_by varchar not null,
    restated_at timestamp not null,
    first_day date not null,
    last_day date not null,
    reason varchar not null,
    total_before double precision,
    total_after double precision,
    published boolean not null
"""


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def _ensure(wh: Warehouse, table: str, columns: str) -> str:
    pub = published_schema(wh)
    wh.execute(f"create schema if not exists {pub}")
    wh.execute(f"create table if not exists {pub}.{table} {wh.table_columns(columns)}")
    return f"{pub}.{table}"


def record_run(wh: Warehouse, row: dict) -> None:
    """Append one run's row (keys: the run_audit columns)."""
    table = _ensure(wh, "run_audit", RUN_AUDIT)
    row = {**row, "finished_at": row.get("finished_at") or _now()}
    cols = list(row)
    wh.execute(
        f"insert into {table} ({', '.join(cols)}) values ({', '.join(['%s'] * len(cols))})",
        [row[c] for c in cols],
    )


def record_restatement(
    wh: Warehouse, summary: RunSummary, reason: str, before: float | None, after: float | None
) -> None:
    """Who restated which days of which job, when, why, and the published totals before and after."""
    table = _ensure(wh, "restatement_audit", RESTATEMENT_AUDIT)
    who = os.environ.get("DAYCLOSE_USER") or getpass.getuser()
    first, end = summary.window
    wh.execute(
        f"insert into {table} (run_id, job, restated_by, restated_at, first_day, last_day, reason, "
        "total_before, total_after, published) values (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (
            summary.run_id,
            summary.job,
            who,
            _now(),
            first,
            end - timedelta(days=1),
            reason,
            before,
            after,
            summary.published,
        ),
    )


def audit_row(summary: RunSummary, started: datetime) -> dict:
    """The run_audit row of a run."""
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


def gate_results_json(nodes: list) -> str:
    """The gate tests' outcomes as compact JSON: name, status, failing rows."""
    return json.dumps(
        [
            {"gate": n.name, "status": n.status, "failures": n.failures}
            for n in nodes
            if n.resource_type == "test"
        ]
    )
