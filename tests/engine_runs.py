"""One landing run on two engines and what each left, for comparing the engines cell for cell.

The landing: two generated days of each source (late events, resends, duplicates, garbage),
the contract corpus of each (one batch each), a few ordinary batches, a batch whose bytes no
text reader takes as they are, and a batch delivered again with a new manifest, after which
days are restated. DuckDB is the reference, run once; tests/test_postgres_agrees.py and
tests/test_spark.py compare Postgres and Spark against it (fixture engine_runs, tests/conftest.py).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
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
from tests.helpers import sale, table, unit, write_batch, write_raw_batch
from tests.test_contract import HOUR, SALES_CORPUS, UNITS_CORPUS, corpus_files

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
    ordinary batches (with a conflicting copy of a sale and of a unit), and a batch whose bytes
    no text reader takes as they are (invalid UTF-8, NUL, a carriage return)."""
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
            ]
            # and a copy of an earlier batch's unit with another verdict (a reused sequence number)
            + (
                [unit("L-001-1", 1100, "2026-11-23T11:00:00Z", f"{hour}:00:40Z", "reject")]
                if hour == REDELIVERED
                else []
            ),
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
            with Warehouse(target) as wh:
                names, _ = wh.columns_and_rows(
                    f"select * from {relation.format(schema=target.schema)} limit 0"
                )
            kept = sorted(c for c in names if c not in VOLATILE)
            found[f"published {rel.name}"] = rows(f"select {', '.join(kept)} from {relation}")
    return found


def differences(other: list[tuple], duckdb: list[tuple]) -> tuple:
    """The first rows that differ, and how many rows each has."""
    rows = [(a, b) for a, b in zip(other, duckdb, strict=False) if a != b][:1]
    return len(other), len(duckdb), rows


def unequal(other: dict[str, list[tuple]], duckdb: dict[str, list[tuple]]) -> dict[str, tuple]:
    """The relations of two snapshots that differ, each with its first differing rows."""
    return {name: differences(other[name], duckdb[name]) for name in other if other[name] != duckdb[name]}


@contextmanager
def state_in(folder: Path) -> Iterator[None]:
    """The environment of the engines' runs: a state folder and a DuckDB file of their own."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("DAYCLOSE_STATE_DIR", str(folder / "state"))
        env.setenv("DAYCLOSE_DUCKDB", str(folder / "warehouse.duckdb"))
        env.delenv("DBT_PROFILES_DIR", raising=False)
        yield


class EngineRuns:
    """The landing, written once, and each engine's runs of it, each on a copy of its own: the
    first nights, then the batch delivered again and the restatement. DuckDB's, the reference,
    run when the landing is written (once per pytest worker: the modules that compare an
    engine with it share a session fixture and an xdist group).

    `compare(name)` runs the engine (configured by the caller's environment) and returns
    {(engine, "first" | "again"): [RunSummary], (engine, "first rows" | "again rows"): snapshot,
    "files": the corpus files, "folder": the folder of states and landings, "targets": {engine:
    Target}} for DuckDB and that engine.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.files = write_landing(folder / "landing")
        self.runs: dict = {}
        self.targets: dict[str, Target] = {}
        with state_in(folder):
            self._run("duckdb", resolve_target("duckdb"))

    def compare(self, name: str) -> dict:
        if name not in self.targets:
            with state_in(self.folder):
                self._run(name, resolve_target(name))
        return {
            **{key: value for key, value in self.runs.items() if key[0] in ("duckdb", name)},
            "files": self.files,
            "folder": self.folder,
            "targets": {engine: self.targets[engine] for engine in ("duckdb", name)},
        }

    def _run(self, name: str, target: Target) -> None:
        landing = self.folder / f"landing-{name}"
        shutil.copytree(self.folder / "landing", landing)
        started = time.monotonic()
        self.runs[name, "first"] = night(target, landing)
        self.runs[name, "first rows"] = snapshot(target)
        night_seconds = time.monotonic() - started
        redeliver(landing)
        started = time.monotonic()
        self.runs[name, "again"] = [restatement(target, landing)]
        self.runs[name, "again rows"] = snapshot(target)
        print(f"{name}: night {night_seconds:.1f} s, restatement {time.monotonic() - started:.1f} s")
        self.targets[name] = target
