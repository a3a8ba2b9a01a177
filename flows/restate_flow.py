"""Prefect flow: restate closed days through the same gates, audited."""

from __future__ import annotations

from prefect import flow
from prefect.states import State

from dayclose.prefect_tasks import restate_flow_body


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
    return restate_flow_body(job, start, end, reason, landing, as_of, target, lock_timeout_seconds)
