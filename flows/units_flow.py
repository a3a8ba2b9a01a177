"""Prefect flow: the nightly brewery units job (incident 003)."""

from __future__ import annotations

from prefect import flow
from prefect.states import State

from dayclose.prefect_tasks import nightly_flow_body


@flow(name="dayclose-units-nightly", log_prints=True)
def units_nightly(
    as_of: str | None = None,
    target: str | None = None,
    landing: str = "landing",
    require_complete: bool = True,
    lock_timeout_seconds: float = 3600,
) -> State:
    """Load the units batches complete by as-of (default: now), build and gate the window, publish."""
    return nightly_flow_body("units", as_of, target, landing, require_complete, lock_timeout_seconds)
