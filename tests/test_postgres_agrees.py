"""Postgres leaves what DuckDB leaves: the same landing, nights and restatement on both
(tests/engine_runs.py), every relation compared cell for cell.

The scenario tests of the sales and units paths check their outcomes on DuckDB, the reference
engine; a scenario runs on Postgres too where Postgres has code of its own in it (the loader's
writes, indexes and statistics, locks, sessions, publication, roles, the decoding macros of
the contract corpus, event hashes). What the models compute from the lines is the same SQL on
both engines but for the dispatched macros, and this module holds it to the same result on a
landing of every kind of line: late events, resends, duplicates, garbage, the contract corpus,
bytes no text reader takes, conflicting copies, a batch delivered again and a restatement.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.engine_runs import REDELIVERED, EngineRuns, state_in, unequal
from tests.helpers import fresh_database, table

# one worker runs DuckDB's reference (the session fixture engine_runs) and the engines against it
pytestmark = pytest.mark.xdist_group("engines")


@pytest.fixture(scope="module")
def built(engine_runs: EngineRuns, postgres_server: dict[str, str]) -> Iterator[dict]:
    """DuckDB's and Postgres's outcomes and relations after the first nights and after the
    restatement."""
    with pytest.MonkeyPatch.context() as env, fresh_database(postgres_server, env):
        built = engine_runs.compare("postgres")
        with state_in(engine_runs.folder):  # the tests read the warehouses
            yield built


def test_postgres_runs_the_nights_and_the_restatement_through_the_same_gates(built: dict) -> None:
    for step in ("first", "again"):
        for postgres, duckdb in zip(built["postgres", step], built["duckdb", step], strict=True):
            assert postgres.published and duckdb.published, postgres.lines()
            assert postgres.gate_failures.keys() == duckdb.gate_failures.keys(), postgres.lines()
            assert postgres.build is not None and not postgres.build.failed(), postgres.lines()
            assert sorted(n.name for n in postgres.build.nodes) == sorted(n.name for n in duckdb.build.nodes)
            assert postgres.load.rows_loaded == duckdb.load.rows_loaded
            assert postgres.dead_letters == duckdb.dead_letters


def test_postgres_leaves_every_relation_as_duckdb_does_cell_for_cell(built: dict) -> None:
    """Raw lines, the load ledger, the registries, every line's verdict and decoded values, the
    dead letters and their counts, new fields and every published relation."""
    for step in ("first rows", "again rows"):
        postgres, duckdb = built["postgres", step], built["duckdb", step]
        assert postgres.keys() == duckdb.keys()
        assert {"published daily_sales", "published daily_good_units"} <= set(duckdb)
        assert not unequal(postgres, duckdb), step
    # the landing holds what the scenario tests check on DuckDB alone: dead letters of many
    # kinds, copies that disagree with their first arrival, a restatement that changed numbers
    first, again = built["duckdb", "first rows"], built["duckdb", "again rows"]
    assert len({r[4] for r in first["int_unit_lines_validated"] if r[4]}) >= 10
    assert len({r[4] for r in first["int_sale_lines_validated"] if r[4]}) >= 10
    assert first["published sales_conflicting_copies"] and first["published units_conflicting_copies"]
    assert again["published daily_sales"] != first["published daily_sales"]


def test_the_redelivered_batch_and_the_restated_days_leave_nothing_of_their_old_rows(built: dict) -> None:
    first, again = built["postgres", "first rows"], built["postgres", "again rows"]
    counts = [[r for r in rows["sales_dead_letter_counts"] if r[0] == REDELIVERED] for rows in (first, again)]
    assert counts == [[(REDELIVERED, "2026-11-23", "not_json_object", "1")], []]
    was = {r[0] for r in first["int_sales_deduplicated"] if r[1] == REDELIVERED}
    now = {r[0] for r in again["int_sales_deduplicated"] if r[1] == REDELIVERED}
    assert (sorted(was), sorted(now)) == (
        [f"{REDELIVERED}-{i}" for i in range(5)],
        [f"{REDELIVERED}-{i}" for i in range(1, 7)],
    )


def test_the_restatement_is_audited_alike(built: dict) -> None:
    """The restatement's audit row (written by dayclose, not dbt): who, which days, why, the
    totals before and after, published."""
    audits = {
        name: [
            tuple(str(v) for v in row)
            for row in table(
                built["targets"][name],
                "select restated_by, first_day, last_day, reason, total_before, total_after, published "
                "from {schema}_published.restatement_audit",
            )
        ]
        for name in ("duckdb", "postgres")
    }
    [(_, first, last, reason, before, after, published)] = audits["duckdb"]
    assert (first, last, reason, published) == (
        "2026-11-23",
        "2026-11-24",
        "a till's batch delivered again",
        "True",
    )
    assert before != after
    assert audits["postgres"] == audits["duckdb"]
