"""dayclose on Apache Spark (the `spark` target: dbt-spark in this process, parquet tables, an
embedded Derby metastore), against DuckDB on the same landing.

One module fixture runs, on each engine, the nights of sales and units over a landing of a
few generated days plus the contract corpus and lines no text reader takes as they are, then
restates days after a batch was delivered again with a new manifest (tests/engine_runs.py, as
tests/test_postgres_agrees.py does for Postgres; a real local Spark at local[2]: a JVM start
and every dbt invocation cost seconds there); the tests check what those runs left: the same
raw lines, dead letters and published numbers, cell for cell.
Skipped where pyspark or Java is missing; `scripts/test` installs both.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from dayclose.loader.ingest import FileToRead, ensure_landing, ingest_files_spark
from dayclose.settings import Target
from dayclose.warehouse import Warehouse
from tests import contract_oracle as oracle
from tests.engine_runs import GONE_AGAIN, REDELIVERED, EngineRuns, state_in, unequal
from tests.helpers import split_lines, stored_lines
from tests.test_contract import HOUR, RECEIVED_BY, SALES_CORPUS, UNITS_CORPUS

pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("pyspark") is None or shutil.which("java") is None,
        reason="the spark target needs pyspark (pip install 'dayclose[spark]') and Java 17",
    ),
    # one worker runs DuckDB's reference (the session fixture engine_runs) and the engines against it
    pytest.mark.xdist_group("engines"),
]


@pytest.fixture(scope="module")
def built(engine_runs: EngineRuns) -> Iterator[dict]:
    """DuckDB's and Spark's outcomes and relations after the first nights and after the
    restatement."""
    try:
        built = engine_runs.compare("spark")
        with state_in(engine_runs.folder):  # the tests read the warehouses
            yield built
    finally:
        from pyspark.sql import SparkSession

        active = SparkSession.getActiveSession()
        if active is not None:  # the rest of the test session runs without Spark's executors
            active.stop()


def test_spark_runs_the_nights_and_the_restatement_through_the_gates_and_publishes(built: dict) -> None:
    for step in ("first", "again"):
        for spark, duckdb in zip(built["spark", step], built["duckdb", step], strict=True):
            assert spark.published and spark.gate_failures.keys() == duckdb.gate_failures.keys(), (
                spark.lines()
            )
            assert spark.build is not None and not spark.build.failed(), spark.lines()
            assert any(n.is_gate for n in spark.build.nodes)
            assert sorted(n.name for n in spark.build.nodes) == sorted(n.name for n in duckdb.build.nodes)
            assert spark.load.rows_loaded == duckdb.load.rows_loaded


def test_spark_publishes_the_numbers_duckdb_publishes_cell_for_cell(built: dict) -> None:
    for step in ("first rows", "again rows"):
        published = [name for name in built["duckdb", step] if name.startswith("published ")]
        assert {"published daily_sales", "published daily_good_units"} <= set(published)
        spark, duckdb = built["spark", step], built["duckdb", step]
        assert not unequal({n: spark[n] for n in published}, duckdb), step
    # the restatement changed the restated days' numbers, on both engines alike
    before = built["spark", "first rows"]["published daily_sales"]
    assert built["spark", "again rows"]["published daily_sales"] != before


def test_readers_read_views_of_checked_tables_on_spark(built: dict) -> None:
    spark = built["targets"]["spark"]
    pub = f"{spark.schema}_published"
    with Warehouse(spark) as wh:
        tables = {name for _, name, temporary in wh.query(f"show tables in {pub}") if not temporary}
        view = wh.scalar(f"show create table {pub}.daily_sales")
    # one table behind each published view: the tables of earlier publications were dropped
    behind = sorted(t for t in tables if t.startswith("daily_sales__"))
    assert len(behind) == 1, behind
    assert "create view" in view.lower() and behind[0] in view


def test_spark_holds_every_line_exactly_as_duckdb_does(built: dict) -> None:
    spark = built["targets"]["spark"]
    for name, table_name in (("sales", "sale_lines"), ("units", "unit_lines")):
        expected = {
            (file, n): line
            for file, blob in built["files"][name].items()
            for n, line in enumerate(split_lines(blob), start=1)
        }
        assert stored_lines(spark, table_name, HOUR) == expected
    odd = stored_lines(spark, "sale_lines", "2026-11-23T13")
    assert odd[("part-0000.jsonl", 1)] == b'{"event_id": "x\xff"}'
    assert odd[("part-0000.jsonl", 3)].endswith(b"\r")
    for step in ("first rows", "again rows"):
        for relation in ("sale_lines", "unit_lines", "load_ledger"):
            assert built["spark", step][relation] == built["duckdb", step][relation], (step, relation)


def test_spark_gives_every_corpus_line_the_contracts_kind(built: dict) -> None:
    rows = built["spark", "first rows"]
    for name, entity, corpus in (("sales", "sale", SALES_CORPUS), ("units", "unit", UNITS_CORPUS)):
        kinds = {
            (file, int(n)): kind or None
            for batch, file, n, _, kind, *_ in rows[f"int_{entity}_lines_validated"]
            if batch == HOUR
        }
        lines = {
            (file, n): line
            for file, blob in built["files"][name].items()
            for n, line in enumerate(split_lines(blob), start=1)
        }
        assert kinds == {key: oracle.judge(name, line, RECEIVED_BY).kind for key, line in lines.items()}
        for n, (what, _, kind, _) in enumerate(corpus[:-1], start=1):
            assert kinds[("part-0000.jsonl", n)] == kind, what
        assert len({kind for kind in kinds.values() if kind}) >= 10


def test_spark_decodes_reasons_values_and_counts_cell_for_cell_as_duckdb(built: dict) -> None:
    for step in ("first rows", "again rows"):
        spark, duckdb = built["spark", step], built["duckdb", step]
        assert spark.keys() == duckdb.keys()
        assert not unequal(spark, duckdb), step


def test_a_redelivered_batch_replaces_its_lines_and_their_decoding_on_spark(built: dict) -> None:
    before = [r for r in built["spark", "first rows"]["int_sale_lines_validated"] if r[0] == REDELIVERED]
    after = [r for r in built["spark", "again rows"]["int_sale_lines_validated"] if r[0] == REDELIVERED]
    assert (len(before), len(after)) == (5 + len(GONE_AGAIN), 6)
    assert {r[8] for r in after} == {"S-002"}  # shop_id: the new version's, nothing of the old one
    ledger = {r[1]: r for r in built["spark", "again rows"]["load_ledger"] if r[0] == "sales"}
    assert ledger[REDELIVERED][5] == "6"


def test_the_registry_rewrites_the_days_of_revised_and_vanished_sales_on_spark(built: dict) -> None:
    """On Spark the registry is incremental too (first_arrivals rewrites the touched days'
    partitions): after the re-delivery each sale of the new version is registered at its line
    there, sale -0 (no copy left) is gone, and the rest of the registry is as it was."""
    first, again = (built["spark", step]["int_sales_deduplicated"] for step in ("first rows", "again rows"))
    was = {r[0]: r[1:4] for r in first if r[1] == REDELIVERED}
    now = {r[0]: r[1:4] for r in again if r[1] == REDELIVERED}
    assert sorted(was) == [f"{REDELIVERED}-{i}" for i in range(5)]
    assert now == {f"{REDELIVERED}-{i}": (REDELIVERED, "part-0000.jsonl", str(i)) for i in range(1, 7)}
    assert [r for r in first if r[1] != REDELIVERED] == [r for r in again if r[1] != REDELIVERED]
    assert again == built["duckdb", "again rows"]["int_sales_deduplicated"]
    spark = built["targets"]["spark"]
    with Warehouse(spark) as wh:
        partitions = {r[0] for r in wh.query(f"show partitions {spark.schema}.int_sales_deduplicated")}
    assert "sale_date=2026-11-23" in partitions


def test_spark_numbers_the_lines_of_a_file_it_reads_in_several_splits(
    built: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file larger than Spark's split is read by several tasks: each line still gets its
    number in the file (the split's earlier lines counted), in a schema of its own."""
    monkeypatch.setenv("DAYCLOSE_SPARK_DIR", str(built["targets"]["spark"].spark_dir))
    lines = [f'{{"n": {n}, "pad": "{"x" * (n % 37)}"}}' for n in range(1, 2001)]
    big, small = tmp_path / "part-0000.jsonl", tmp_path / "part-0001.jsonl"
    big.write_text("\n".join(lines) + "\n")
    small.write_text("a\nb\n")
    files = [FileToRead("b1", big.name, big, len(lines)), FileToRead("b1", small.name, small, 2)]
    with Warehouse(Target(name="spark", schema="splits")) as wh:
        ensure_landing(wh, ["unit_lines"])
        wh.session.conf.set("spark.sql.files.maxPartitionBytes", "4096")
        try:
            splits = wh.session.read.text(str(big)).rdd.getNumPartitions()
            written, _ = ingest_files_spark(wh, "unit_lines", files, [])
        finally:
            wh.session.conf.unset("spark.sql.files.maxPartitionBytes")
        rows = wh.query("select file_name, line_number, raw_line from splits_landing.unit_lines")
    assert splits > 10
    assert written == {"b1": 2002}
    expected = [(big.name, n, line) for n, line in enumerate(lines, 1)]
    assert sorted(rows) == sorted([*expected, (small.name, 1, "a"), (small.name, 2, "b")])


def test_the_spark_warehouse_and_metastore_live_under_the_state_folder(built: dict) -> None:
    spark = built["targets"]["spark"]
    folder = spark.spark_dir
    assert folder.is_relative_to(built["folder"] / "state")
    assert (folder / "metastore_db").is_dir() and (folder / "warehouse").is_dir()
    assert (folder / "warehouse" / "dayclose_landing.db" / "sale_lines" / f"batch_id={HOUR}").is_dir()
    with Warehouse(spark) as wh:
        assert wh.scalar("select current_timezone()") == "UTC"
    assert json.loads((spark.dbt_target_dir / "run_results.json").read_text())["args"]["target"] == "spark"
    assert not (Path.cwd() / "metastore_db").exists()


def test_rows_of_a_batch_or_day_the_rebuild_no_longer_returns_are_gone_on_every_engine(built: dict) -> None:
    """The re-delivered batch has no dead letters any more, and the restated day 2026-11-23 no
    conflicting copy: their counts and copies go (on Spark, partitions the insert overwrite
    would not touch: the pre_hooks drop them), on both engines alike."""
    for engine in ("duckdb", "spark"):
        first, again = built[engine, "first rows"], built[engine, "again rows"]
        counts = [
            [r for r in rows["sales_dead_letter_counts"] if r[0] == REDELIVERED] for rows in (first, again)
        ]
        assert counts == [[(REDELIVERED, "2026-11-23", "not_json_object", "1")], []], engine
        copies = [
            [r for r in rows["published sales_conflicting_copies"] if REDELIVERED in r]
            for rows in (first, again)
        ]
        assert (len(copies[0]), copies[1]) == (1, []), engine
