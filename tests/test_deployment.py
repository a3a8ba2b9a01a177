"""The Prefect deployment path as an operator runs it: a real local server, the project's
prefect.yaml deployed with `prefect deploy --all`, a process worker.

A night with a missing completeness marker must not crash, must not hold the worker while
it waits, and must come back by itself once the marker appears, then publish.

A night must not depend on the worker that launched it: a worker killed (`kill -9` of its
process group) in the middle of the dbt build leaves its flow run to finish and record its
state; the run lock and the deployment's concurrency slot are free once it ends, and the
next run, under a new worker, runs.

The server, the work pool and the deployments are shared by the module's tests; each test
has its own landing, warehouse and workers.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from pathlib import Path

import pytest

from dayclose.generate import generate_sales, read_sales_truth
from dayclose.runlock import run_lock
from dayclose.settings import PROJECT_DIR, Target, resolve_target
from tests.helpers import table
from tests.prefect_stack import PrefectStack

pytestmark = pytest.mark.xdist_group("deployment")  # one worker builds the module's fixture, once

AS_OF = "2026-11-25T00:30"
SALES = "dayclose-sales-nightly/sales-nightly"


@pytest.fixture(scope="module")
def prefect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrefectStack]:
    """A server, the process work pool and `prefect deploy --all`, for the module's tests."""
    home = tmp_path_factory.mktemp("prefect")
    env = {
        # read by prefect.yaml when deploying (each run passes its own landing)
        "DAYCLOSE_PROJECT_DIR": str(PROJECT_DIR),
        "DAYCLOSE_LANDING": str(home / "landing"),
        "DAYCLOSE_TARGET": "duckdb",
        "DAYCLOSE_TIMEZONE": "UTC",
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
    }
    with PrefectStack(PROJECT_DIR, pool="dayclose", home=home, extra_env=env) as s:
        s.deploy_all()
        yield s


@dataclass
class Night:
    """A test's own landing and warehouse, and the environment of its workers."""

    landing: Path
    env: dict[str, str]
    target: Target


@pytest.fixture
def night(prefect_server: PrefectStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Night]:
    landing = tmp_path / "landing"
    generate_sales(landing, date(2026, 11, 20), 5, shops=10, events_per_day=300, seed=9)
    env = {
        # read by the flows on the worker (and by this test)
        "DAYCLOSE_LANDING": str(landing),
        "DAYCLOSE_TARGET": "duckdb",
        "DAYCLOSE_DUCKDB": str(tmp_path / "warehouse.duckdb"),
        "DAYCLOSE_STATE_DIR": str(tmp_path / "state"),
        "DAYCLOSE_WAIT_FOR_MARKERS_MINUTES": "0.25",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    workers = set(prefect_server.procs) - {"server"}
    try:
        yield Night(landing, env, resolve_target("duckdb"))
    finally:
        for name in set(prefect_server.procs) - {"server"} - workers:
            prefect_server.stop_proc(name)
        prefect_server.end_flow_runs()  # none should be left: a test that fails may leave one


def test_a_night_with_a_missing_marker_waits_and_comes_back_by_itself(
    prefect_server: PrefectStack, night: Night, tmp_path: Path
) -> None:
    stack = prefect_server
    stack.start_worker(env=night.env)
    marker = night.landing / "sales" / "arrived=2026-11-24T14" / "_SUCCESS"
    kept = tmp_path / "kept_SUCCESS"
    shutil.move(marker, kept)
    deployment = stack.deployment(SALES)
    first = stack.run(SALES, {"as_of": AS_OF, "landing": str(night.landing)})
    ended = stack.wait_final(first, timeout=240)
    # not Crashed, not Completed: waiting, with nothing published, and the worker released
    assert (ended["state_type"], ended["state_name"]) == ("CANCELLED", "AwaitingMarkers"), ended["state"]
    assert "2026-11-24T14" in ended["state"]["message"]
    assert stack.errors(first) == []  # waiting is no error: no traceback in its log
    # the follow-up: one run of the same deployment, tagged for the night, its as-of pinned
    follow_ups = [r for r in stack.runs_of(deployment["id"]) if "AwaitingMarkers" in r["tags"]]
    assert [r["state_type"] for r in follow_ups] == ["SCHEDULED"], follow_ups
    assert follow_ups[0]["parameters"]["as_of"] == AS_OF

    shutil.move(kept, marker)  # the producer delivers the marker
    done = stack.wait_final(follow_ups[0]["id"], timeout=300)
    assert done["state_type"] == "COMPLETED", done["state"]

    target = night.target
    audit = table(target, "select status, published from {schema}_published.run_audit order by started_at")
    assert [(s, bool(p)) for s, p in audit] == [
        ("waiting for completeness markers", False),
        ("published", True),
    ]
    assert table(target, "select count(*) from {schema}_published.daily_sales")[0][0] > 0


def wait_for_the_build(stack: PrefectStack, run_id: str, state_dir: Path, timeout: float = 240) -> None:
    """Return once dbt has started building nodes in the flow run (its first START line)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        logs = list(state_dir.glob("*/logs/dbt.log"))
        if logs and " START " in logs[0].read_text(errors="replace"):
            return
        if stack.flow_run(run_id)["state_type"] in {"COMPLETED", "FAILED", "CANCELLED", "CRASHED"}:
            break
        time.sleep(0.05)
    raise AssertionError(f"the run reached no dbt build to interrupt: {stack.logs(run_id)[-20:]}")


def published_by_shop(target: Target) -> dict[tuple[str, str], Decimal]:
    rows = table(target, "select sale_date, shop_id, sales_amount from {schema}_published.daily_sales")
    return {(str(d), shop): Decimal(amount) for d, shop, amount in rows}


def test_a_run_outlives_its_worker_killed_mid_build_and_the_next_run_runs(
    prefect_server: PrefectStack, night: Night
) -> None:
    stack = prefect_server
    stack.start_worker("worker", env=night.env)
    first = stack.run(SALES, {"as_of": AS_OF, "landing": str(night.landing)})
    wait_for_the_build(stack, first, Path(night.env["DAYCLOSE_STATE_DIR"]))
    killed = stack.kill("worker")  # kill -9 of the worker's process group, mid dbt build
    assert stack.flow_run_pid(first) is not None  # its flow run, in a session of its own, goes on
    stack.start_worker("worker-2", env=night.env)  # the operator starts a new worker

    # the run does not depend on its worker: it finishes and records its state
    ended = stack.wait_final(first, timeout=180)
    kill_to_final = time.monotonic() - killed
    assert ended["state_type"] == "COMPLETED", ended["state"]
    print(f"killed mid-build: {ended['state_name']} {kill_to_final:.1f} s after the kill")
    # ... its process exits, its logs reached the API (the dbt build's end included), no error
    stack.wait_flow_run_exit(first, timeout=60)
    assert any("Done. PASS=" in line for line in stack.logs(first)), stack.logs(first)[-20:]
    assert stack.errors(first) == []
    # ... and it holds neither the warehouse's run lock nor the deployment's concurrency slot
    with run_lock(night.target, "sales", timeout=0):
        pass
    assert stack.deployment(SALES)["global_concurrency_limit"]["active_slots"] == 0

    # its numbers are right: the day all of whose sales had arrived by as-of is the truth
    truth = read_sales_truth(night.landing / "truth" / "sales_daily_totals.csv")
    first_numbers = published_by_shop(night.target)
    complete = {key: Decimal(amount) for key, (amount, _) in truth.items() if key[0] == "2026-11-20"}
    assert {k: v for k, v in first_numbers.items() if k[0] == "2026-11-20"} == complete
    assert all(v <= Decimal(truth[k][0]) for k, v in first_numbers.items())

    # the next run of the deployment, under the new worker, runs: same night, same numbers
    second = stack.run(SALES, {"as_of": AS_OF, "landing": str(night.landing)})
    done = stack.wait_final(second, timeout=240)
    assert done["state_type"] == "COMPLETED", done["state"]
    assert published_by_shop(night.target) == first_numbers
    audit = table(night.target, "select run_id, status from {schema}_published.run_audit order by started_at")
    assert audit == [(first, "published"), (second, "published")]
    stack.wait_flow_run_exit(second, timeout=60)
