"""dayclose on Apache Spark (the `spark` target: dbt-spark in this process, parquet tables, an
embedded Derby metastore), against DuckDB on the same landing.

One module fixture runs, on each engine, the nights of sales and units over a landing of a
few generated days plus the contract corpus and lines no text reader takes as they are, then
restates days after a batch was delivered again with a new manifest (a real local Spark at
local[2]: a JVM start and every dbt invocation cost seconds there); the tests check what those
runs left: the same raw lines, dead letters and published numbers, cell for cell.
Skipped where pyspark or Java is missing; `scripts/test` installs both.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import time
from collections.abc import Iterator
from datetime import date, datetime
from pathlib import Path

import pytest

from dayclose.generate import generate_sales, generate_units
from dayclose.jobs import restate, run_nightly
from dayclose.publish import published_relations
from dayclose.settings import Target, resolve_target
from dayclose.summary import RunSummary
from dayclose.warehouse import Warehouse
from tests import contract_oracle as oracle
from tests.helpers import sale, split_lines, stored_lines, table, unit, write_batch, write_raw_batch
from tests.test_contract import HOUR, RECEIVED_BY, SALES_CORPUS, UNITS_CORPUS, corpus_files

pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("pyspark") is None or shutil.which("java") is None,
        reason="the spark target needs pyspark (pip install 'dayclose[spark]') and Java 17",
    ),
    pytest.mark.xdist_group("spark"),  # one worker builds the module's fixture, once
]

AS_OF = datetime(2026, 11, 26, 0, 30)
REDELIVERED = "2026-11-23T12"  # a batch loaded, then delivered again with a new manifest
RESTATED = (date(2026, 11, 23), date(2026, 11, 24))
GONE_AGAIN = [
    "not a sale",
    sale("2026-11-23T11-0", "S-001", "2026-11-23T11:00:00Z", "2026-11-23T12:30:00Z", "99.25"),
]
# columns that say when or by which run, not what: they differ between any two runs
VOLATILE = {"batch_loaded_at", "loaded_at", "run_id", "recorded_at"}


def write_landing(landing: Path) -> dict[str, dict[str, bytes]]:
    """Two generated days of each source, the contract corpus of each (one batch each), a few
    ordinary batches, and a batch whose bytes no text reader takes as they are (invalid
    UTF-8, NUL, a carriage return)."""
    generate_sales(landing, date(2026, 11, 24), 2, shops=6, seed=3)
    generate_units(landing, date(2026, 11, 24), 2, plants=2, units_per_day=1500, seed=3)
    files = {"sales": corpus_files(SALES_CORPUS), "units": corpus_files(UNITS_CORPUS)}
    for name, blob in files.items():
        write_raw_batch(landing, name, HOUR, blob)
    for hour in ("2026-11-23T11", REDELIVERED):
        write_batch(
            landing,
            hour,
            [
                sale(f"{hour}-{i}", "S-001", f"{hour}:0{i}:00Z", f"{hour}:0{i}:30Z", f"{i}.25")
                for i in range(5)
            ]
            # REDELIVERED's first version also has a dead letter and a conflicting copy (of an
            # earlier batch's sale, on 2026-11-23), which its second version no longer has
            + (GONE_AGAIN if hour == REDELIVERED else []),
        )
        write_batch(
            landing,
            hour,
            [
                unit("L-001-1", 100 * int(hour[-2:]) + i, f"{hour}:00:0{i}Z", f"{hour}:00:3{i}Z")
                for i in range(5)
            ],
            source="units",
        )
    odd = [
        b'{"event_id": "x\xff"}',
        b'{"event_id": "nul\x00"}',
        sale("cr", "S-001", HOUR + ":00:00Z", HOUR + ":01:00Z").encode() + b"\r",
    ]
    write_raw_batch(landing, "sales", "2026-11-23T13", {"part-0000.jsonl": b"\n".join(odd) + b"\n"})
    return files


def redeliver(landing: Path) -> None:
    """REDELIVERED again, with other lines (sale -0 gone, whose first arrival then vanishes from
    the registry; -1 .. -4 changed; -5 and -6 new; no dead letter, no conflicting copy): a new
    manifest."""
    folder = landing / "sales" / f"arrived={REDELIVERED}"
    shutil.rmtree(folder)
    lines = [
        sale(f"{REDELIVERED}-{i}", "S-002", f"{REDELIVERED}:1{i}:00Z", f"{REDELIVERED}:1{i}:30Z")
        for i in range(1, 7)
    ]
    write_raw_batch(landing, "sales", REDELIVERED, {"part-0000.jsonl": "\n".join(lines).encode() + b"\n"})


def night(target: Target, landing: Path) -> list[RunSummary]:
    return [run_nightly(job, target, landing, AS_OF, quiet=True) for job in ("sales", "units")]


def restatement(target: Target, landing: Path) -> RunSummary:
    return restate("sales", target, *RESTATED, "a till's batch delivered again", landing, AS_OF, quiet=True)


def snapshot(target: Target) -> dict[str, list[tuple]]:
    """What the compared relations hold, rows sorted, times and numbers as text."""

    def rows(sql: str) -> list[tuple]:
        return sorted(tuple("" if v is None else str(v) for v in row) for row in table(target, sql))

    lines = "batch_id, file_name, line_number, raw_line, raw_line_hex, byte_error"
    ledger = (
        "source_name, batch_id, status, manifest_sha256, files, rows_loaded, byte_errors, batch_arrived_at"
    )
    found = {
        "sale_lines": rows(f"select {lines} from {{landing}}.sale_lines"),
        "unit_lines": rows(f"select {lines} from {{landing}}.unit_lines"),
        "load_ledger": rows(f"select {ledger} from {{landing}}.load_ledger"),
    }
    for entity, name, key in (("sale", "sales", "event_id"), ("unit", "units", "line_id, plc_seq")):
        registry = f"int_{name}_deduplicated"
        columns = f"{key}, batch_id, file_name, line_number, event_hash"
        found[registry] = rows(f"select {columns} from {{schema}}.{registry}")
        fields = ", ".join(oracle.FIELDS[name])
        found[f"int_{entity}_lines_validated"] = rows(
            "select batch_id, file_name, line_number, is_valid, dead_letter_kind, dead_letter_reason, "
            f"new_fields, {fields} from {{schema}}.int_{entity}_lines_validated"
        )
        found[f"{name}_dead_letter_counts"] = rows(
            "select batch_id, arrival_date, dead_letter_kind, dead_letters "
            f"from {{schema}}.{name}_dead_letter_counts"
        )
        found[f"{name}_new_fields"] = rows(
            f"select batch_id, arrival_date, new_fields, batch_completed_at, line_count, decoded_line_count "
            f"from {{schema}}.{name}_new_fields"
        )
        found[f"{name}_dead_letters"] = rows(
            f"select batch_id, file_name, line_number, dead_letter_kind, dead_letter_reason "
            f"from {{schema}}.{name}_dead_letters"
        )
    for job in ("sales", "units"):
        for rel in published_relations(target, job):
            relation = f"{{schema}}_published.{rel.name}"
            names, _ = (None, None)
            with Warehouse(target) as wh:
                names, _ = wh.columns_and_rows(
                    f"select * from {relation.format(schema=target.schema)} limit 0"
                )
            kept = sorted(c for c in names if c not in VOLATILE)
            found[f"published {rel.name}"] = rows(f"select {', '.join(kept)} from {relation}")
    return found


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """Each engine's outcomes and relations after a first build and after a re-delivered batch."""
    folder = tmp_path_factory.mktemp("spark")
    landing = folder / "landing"
    files = write_landing(landing)
    saved = {k: os.environ.get(k) for k in ("DAYCLOSE_STATE_DIR", "DAYCLOSE_DUCKDB", "DBT_PROFILES_DIR")}
    os.environ["DAYCLOSE_STATE_DIR"] = str(folder / "state")
    os.environ["DAYCLOSE_DUCKDB"] = str(folder / "warehouse.duckdb")
    os.environ.pop("DBT_PROFILES_DIR", None)
    result: dict = {"files": files, "folder": folder}
    try:
        targets = {"duckdb": resolve_target("duckdb"), "spark": resolve_target("spark")}
        result["targets"] = targets
        for name, target in targets.items():
            started = time.monotonic()
            result[name, "first"] = night(target, landing)
            result[name, "first rows"] = snapshot(target)
            result[name, "night seconds"] = time.monotonic() - started
        redeliver(landing)
        for name, target in targets.items():
            started = time.monotonic()
            result[name, "again"] = [restatement(target, landing)]
            result[name, "again rows"] = snapshot(target)
            result[name, "restatement seconds"] = time.monotonic() - started
        print(
            "spark vs duckdb seconds: "
            + ", ".join(f"{k[0]} {k[1]} {v:.1f}" for k, v in result.items() if "seconds" in str(k))
        )
        yield result
    finally:
        from pyspark.sql import SparkSession

        active = SparkSession.getActiveSession()
        if active is not None:  # the rest of the test session runs without Spark's executors
            active.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


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
        unequal = {
            name: differences(spark[name], duckdb[name]) for name in published if spark[name] != duckdb[name]
        }
        assert not unequal, (step, unequal)
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


def differences(spark: list[tuple], duckdb: list[tuple]) -> tuple:
    """The first rows that differ, and how many rows each has."""
    rows = [(a, b) for a, b in zip(spark, duckdb, strict=False) if a != b][:1]
    return len(spark), len(duckdb), rows


def test_spark_decodes_reasons_values_and_counts_cell_for_cell_as_duckdb(built: dict) -> None:
    for step in ("first rows", "again rows"):
        spark, duckdb = built["spark", step], built["duckdb", step]
        assert spark.keys() == duckdb.keys()
        unequal = {
            name: differences(spark[name], duckdb[name]) for name in spark if spark[name] != duckdb[name]
        }
        assert not unequal, (step, unequal)


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
