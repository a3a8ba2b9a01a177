"""Prefect flow: restate closed days through the same gates, audited."""

from __future__ import annotations

from pathlib import Path

from prefect import flow
from prefect.states import State

from flows.cli import parse_as_of
from flows.generate import parse_date
from flows.jobs import restate
from flows.prefect_steps import dbt_invoker, final_state, flow_run_id, task_step
from flows.settings import resolve_target


@flow(name="dayclose-restate", log_prints=True)
def restate_days(
    job: str,
    start: str,
    end: str,
    reason: str,
    landing: str | None = None,
    as_of: str | None = None,
    target: str | None = None,
    lock_timeout_seconds: float = 3600,
) -> State:
    """Rebuild days start..end of a job (sales or units), gate, publish, and audit who, why, before, after."""
    resolved = resolve_target(target)
    summary = restate(
        job,
        resolved,
        parse_date(start),
        parse_date(end),
        reason,
        landing=Path(landing) if landing else None,
        as_of=parse_as_of(as_of) if as_of else None,
        invoker=dbt_invoker(resolved),
        quiet=True,
        lock_timeout=lock_timeout_seconds,
        step=task_step,
        run_id=flow_run_id(),
    )
    return final_state(summary)
