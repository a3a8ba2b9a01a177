"""The Prefect deployment path as an operator runs it: a real local server, the project's
prefect.yaml deployed with `prefect deploy --all`, a process worker.

A night with a missing completeness marker must not crash, must not hold the worker while
it waits, and must come back by itself once the marker appears, then publish.
"""

from __future__ import annotations

import shutil
from datetime import date
from pathlib import Path

import pytest

from dayclose.generate import generate_sales
from dayclose.settings import PROJECT_DIR
from tests.helpers import table
from tests.prefect_stack import PrefectStack

AS_OF = "2026-11-25T00:30"


@pytest.fixture
def stack(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    landing = tmp_path / "landing"
    generate_sales(landing, date(2026, 11, 20), 5, shops=10, events_per_day=300, seed=9)
    env = {
        # read by prefect.yaml when deploying, and by the flows on the worker
        "DAYCLOSE_PROJECT_DIR": str(PROJECT_DIR),
        "DAYCLOSE_LANDING": str(landing),
        "DAYCLOSE_TARGET": "duckdb",
        "DAYCLOSE_TIMEZONE": "UTC",
        "DAYCLOSE_DUCKDB": str(tmp_path / "warehouse.duckdb"),
        "DAYCLOSE_STATE_DIR": str(tmp_path / "state"),
        "DAYCLOSE_WAIT_FOR_MARKERS_MINUTES": "0.25",
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with PrefectStack(PROJECT_DIR, pool="dayclose", home=tmp_path / "prefect", extra_env=env) as s:
        s.deploy_all()
        s.start_worker()
        s.landing = landing  # type: ignore[attr-defined]
        yield s


def test_a_night_with_a_missing_marker_waits_and_comes_back_by_itself(
    stack: PrefectStack, tmp_path: Path
) -> None:
    marker = stack.landing / "sales" / "arrived=2026-11-24T14" / "_SUCCESS"  # type: ignore[attr-defined]
    kept = tmp_path / "kept_SUCCESS"
    shutil.move(marker, kept)
    deployment = stack.deployment("dayclose-sales-nightly/sales-nightly")
    first = stack.run("dayclose-sales-nightly/sales-nightly", {"as_of": AS_OF})
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

    from dayclose.settings import resolve_target

    target = resolve_target("duckdb")
    audit = table(target, "select status, published from {schema}_published.run_audit order by started_at")
    assert [(s, bool(p)) for s, p in audit] == [
        ("waiting for completeness markers", False),
        ("published", True),
    ]
    assert table(target, "select count(*) from {schema}_published.daily_sales")[0][0] > 0
