"""The body shared by the nightly flows (one flow module per job, one body)."""

from __future__ import annotations

from pathlib import Path

from prefect.states import State

from flows.cli import parse_as_of
from flows.jobs import run_nightly
from flows.prefect_steps import dbt_invoker, final_state, flow_run_id, task_step
from flows.settings import resolve_target


def nightly_flow_body(
    job: str,
    as_of: str | None,
    target: str | None,
    landing: str,
    require_complete: bool,
    lock_timeout_seconds: float,
) -> State:
    resolved = resolve_target(target)
    summary = run_nightly(
        job,
        resolved,
        Path(landing),
        parse_as_of(as_of),
        invoker=dbt_invoker(resolved),
        quiet=True,
        lock_timeout=lock_timeout_seconds,
        require_complete=require_complete,
        step=task_step,
        run_id=flow_run_id(),
    )
    return final_state(summary)
