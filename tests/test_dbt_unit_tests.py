"""The dbt unit tests (`unit_tests:` in the models' YAML) of the rules that matter most and
are small and pure: dead-letter precedence, stuck-sensor runs, percentile picks. dbt needs the
models' parents in the warehouse to type the inputs, so a run of each job comes first."""

from __future__ import annotations

from pathlib import Path

from dayclose import dbt_runner as dbt
from dayclose.jobs import run_nightly
from dayclose.settings import Target
from tests.helpers import sale, steady_production, ts, write_batch


def test_dbt_unit_tests_pass(engine: Target, landing: Path) -> None:
    write_batch(
        landing, "2026-11-23T10", [sale("a", "S-001", "2026-11-23T10:00:00Z", "2026-11-23T10:01:00Z")]
    )
    steady_production(landing, ["L-001-1"], "2026-11-22", 2)
    for job in ("sales", "units"):
        assert run_nightly(job, engine, landing, ts("2026-11-24T00:30"), quiet=True).ok
    outcome = dbt.run_command(engine, ["test", "--select", "test_type:unit"])
    units = [n for n in outcome.nodes if n.resource_type == "unit_test"]
    assert {n.name for n in units} == {
        "sale_dead_letters_take_the_first_rule_broken",
        "stuck_sensor_runs_count_each_unit_once",
        "lateness_percentiles_pick_the_shortest_delay",
    }
    assert outcome.success and all(n.status == "pass" for n in units), [(n.name, n.message) for n in units]
