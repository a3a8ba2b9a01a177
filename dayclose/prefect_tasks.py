"""What the Prefect flows (flows/) add to the shared job code: tasks, retries, dbt node tasks, states.

The flows call dayclose.jobs exactly as the CLI does; they pass
- a step runner that makes each step a Prefect task (load and build retry with
  exponential backoff and jitter; every step is idempotent, so a retry can never
  double a number), and
- prefect-dbt's PrefectDbtRunner as the dbt runner, so each dbt node is a task
  with its own logs.
A run that finds completeness markers missing books a follow-up run of its own deployment
(same parameters, the night's as-of pinned) DAYCLOSE_WAIT_FOR_MARKERS_MINUTES later and
ends Cancelled, named AwaitingMarkers: its process exits, so no worker is held while it
waits, and the follow-up runs like any scheduled run. After
DAYCLOSE_WAIT_FOR_MARKERS_MAX_CHECKS follow-ups of the same night it ends Failed. (A flow
cannot return Scheduled: under a worker that ends Crashed, and flow retries sleep in the
worker's process.) A run whose gates fail ends Failed, naming the gate.

Prefect's engine raises the CancelledRun of a Cancelled state its flow returns, and its flow
run logger records that as an ERROR with a traceback ("Engine execution exited with
unexpected exception"). A night waiting for its markers is no error: a logging filter on that
logger (the standard library's API) turns that one record into an INFO line naming the state.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.context import get_run_context
from prefect.exceptions import CancelledRun
from prefect.states import Cancelled, Completed, Failed, State
from prefect.tasks import exponential_backoff

from dayclose.dates import parse_as_of, parse_date
from dayclose.jobs import restate, run_nightly
from dayclose.loader import pending_summary
from dayclose.settings import PROJECT_DIR, Target, profiles_dir, resolve_target
from dayclose.summary import RunSummary

RETRIED_STEPS = ("load", "build")
RETRIES = int(os.environ.get("DAYCLOSE_TASK_RETRIES", "3"))
BACKOFF_SECONDS = float(os.environ.get("DAYCLOSE_RETRY_BACKOFF_SECONDS", "10"))
WAIT_MINUTES = float(os.environ.get("DAYCLOSE_WAIT_FOR_MARKERS_MINUTES", "15"))
MAX_CHECKS = int(os.environ.get("DAYCLOSE_WAIT_FOR_MARKERS_MAX_CHECKS", "24"))
AWAITING = "AwaitingMarkers"
WAITING = "waiting for _SUCCESS"  # how an AwaitingMarkers state's message starts


class AwaitingMarkersIsNoError(logging.Filter):
    """The engine's ERROR record of the CancelledRun of an AwaitingMarkers state, as an INFO line."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, CancelledRun) and str(error).startswith(WAITING):
            record.levelno, record.levelname = logging.INFO, "INFO"
            record.msg, record.args = f"the run ends Cancelled ({AWAITING}): {error}", None
            record.exc_info = record.exc_text = None
        return True


logging.getLogger("prefect.flow_runs").addFilter(AwaitingMarkersIsNoError())


def task_step(name: str, fn: Callable[..., Any], *args: Any) -> Any:
    """Run one job step as a Prefect task (retried with backoff and jitter where safe)."""
    options: dict[str, Any] = {"name": name, "cache_policy": NO_CACHE}
    if name in RETRIED_STEPS:
        options.update(
            retries=RETRIES,
            retry_delay_seconds=exponential_backoff(backoff_factor=BACKOFF_SECONDS),
            retry_jitter_factor=0.5,
        )
    return task(fn, **options)(*args)


def dbt_runner(target: Target) -> Callable[[Any], Callable[[list[str]], Any]]:
    """prefect-dbt's runner on the run's parsed manifest: each dbt node a task of the flow run."""
    from prefect_dbt import PrefectDbtRunner, PrefectDbtSettings

    settings = PrefectDbtSettings(
        project_dir=PROJECT_DIR, profiles_dir=profiles_dir(target), target_path=target.dbt_target_dir
    )

    def runner(manifest: Any) -> Callable[[list[str]], Any]:
        return PrefectDbtRunner(settings=settings, manifest=manifest, raise_on_failure=False).invoke

    return runner


def flow_run_id() -> str | None:
    try:
        return str(get_run_context().flow_run.id)
    except Exception:  # outside a flow run
        return None


def final_state(summary: RunSummary) -> State:
    """The flow run's state: never a success that did not publish."""
    logger = get_run_logger()
    for line in summary.lines():
        logger.info(line)
    if summary.missing_markers:
        return _awaiting_markers(summary)
    if not summary.ok:
        failed = [n for n in (summary.build.failed() if summary.build else [])]
        detail = "; ".join(
            f"{n.name}: " + (" | ".join(summary.gate_failures.get(n.name, [])[:3]) or n.message)
            for n in failed
        )
        refused = "; ".join(r.message for r in summary.load.refused)
        return Failed(message=f"{summary.status}. {detail} {refused}".strip())
    return Completed(message=f"published days {summary.days_text()}", data=summary.run_id)


def nightly_flow_body(
    job: str,
    as_of: str | None,
    target: str | None,
    landing: str,
    require_complete: bool,
    lock_timeout_seconds: float,
) -> State:
    """The body of a nightly flow (flows/<job>_flow.py): the CLI's job, as tasks."""
    resolved = resolve_target(target)
    summary = run_nightly(
        job,
        resolved,
        Path(landing),
        parse_as_of(as_of),
        runner=dbt_runner(resolved),
        quiet=True,
        lock_timeout=lock_timeout_seconds,
        require_complete=require_complete,
        step=task_step,
        run_id=flow_run_id(),
    )
    return final_state(summary)


def restate_flow_body(
    job: str,
    start: str,
    end: str,
    reason: str,
    landing: str | None,
    as_of: str | None,
    target: str | None,
    lock_timeout_seconds: float,
) -> State:
    """The body of the restatement flow (flows/restate_flow.py)."""
    resolved = resolve_target(target)
    summary = restate(
        job,
        resolved,
        parse_date(start, "start"),
        parse_date(end, "end"),
        reason,
        landing=Path(landing) if landing else None,
        as_of=parse_as_of(as_of, "as_of") if as_of else None,
        runner=dbt_runner(resolved),
        quiet=True,
        lock_timeout=lock_timeout_seconds,
        step=task_step,
        run_id=flow_run_id(),
    )
    return final_state(summary)


def _awaiting_markers(summary: RunSummary) -> State:
    """Book the night's follow-up run (at most one waiting) and end the run as waiting."""
    import prefect.runtime.flow_run

    waiting = (
        f"{WAITING} of {len(summary.missing_markers)} arrival hours "
        f"({pending_summary(summary.missing_markers)}); nothing built or published"
    )
    night = f"{summary.kind}-{summary.job}-{summary.as_of:%Y%m%dT%H%M}"
    parameters = {**prefect.runtime.flow_run.parameters, "as_of": summary.as_of.isoformat(timespec="minutes")}
    booked = book_follow_up(night, parameters, timedelta(minutes=WAIT_MINUTES), MAX_CHECKS)
    if booked is None:
        return Cancelled(name=AWAITING, message=f"{waiting}; not a deployment run: run it again later")
    if booked == "exhausted":
        return Failed(message=f"{waiting} after {MAX_CHECKS} checks; giving up, nothing published")
    return Cancelled(
        name=AWAITING,
        message=(
            f"{waiting}; checking again at {booked:%Y-%m-%d %H:%M:%S} UTC (at least {WAIT_MINUTES:g} "
            f"minutes on, rounded up to a multiple of {WAIT_MINUTES:g} minutes)"
        ),
    )


def book_follow_up(
    night: str, parameters: dict[str, Any], wait: timedelta, max_checks: int
) -> datetime | str | None:
    """Schedule one follow-up run of this run's deployment for `night`: its expected start.

    None outside a deployment run; "exhausted" once the night had `max_checks` follow-ups.
    A follow-up already waiting for the night (by its tag) is not booked twice, and the
    idempotency key (deployment, night, time slot) makes a repeated call return the same run.
    """
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterDeploymentId,
        FlowRunFilterId,
        FlowRunFilterState,
        FlowRunFilterStateType,
        FlowRunFilterTags,
    )
    from prefect.client.schemas.objects import StateType
    from prefect.context import FlowRunContext
    from prefect.deployments import run_deployment

    context = FlowRunContext.get()
    this = context.flow_run if context else None
    if this is None or this.deployment_id is None:
        return None
    tag = f"night:{night}"
    mine = FlowRunFilterDeploymentId(any_=[this.deployment_id])
    with get_client(sync_client=True) as client:
        waiting = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                deployment_id=mine,
                tags=FlowRunFilterTags(all_=[tag]),
                id=FlowRunFilterId(not_any_=[this.id]),
                state=FlowRunFilterState(
                    type=FlowRunFilterStateType(any_=[StateType.SCHEDULED, StateType.PENDING])
                ),
            ),
            limit=1,
        )
        if waiting:
            return waiting[0].expected_start_time
        checks = client.count_flow_runs(
            flow_run_filter=FlowRunFilter(deployment_id=mine, tags=FlowRunFilterTags(all_=[tag]))
        )
    if checks >= max_checks:
        return "exhausted"
    step = max(wait.total_seconds(), 1.0)
    slot = datetime.fromtimestamp(math.ceil((datetime.now(UTC) + wait).timestamp() / step) * step, UTC)
    run = run_deployment(
        this.deployment_id,
        parameters=parameters,
        scheduled_time=slot,
        timeout=0,  # book it, do not wait for it
        as_subflow=False,  # a subflow would be cancelled with this run
        idempotency_key=f"{AWAITING}/{this.deployment_id}/{night}/{slot:%Y%m%dT%H%M%S}",
        tags=[AWAITING, tag],
        flow_run_name=f"{night}-check-{slot:%H%M%S}",
    )
    return run.expected_start_time or slot
