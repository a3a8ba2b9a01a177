"""The loader on both engines, without dbt: batches written together, and alone when one fails."""

from __future__ import annotations

import hashlib
import json
import shutil
import threading
import time
from pathlib import Path

import pytest

from dayclose import jobs
from dayclose.loader import check as check_module
from dayclose.loader import ensure_landing, load_source, prepass
from dayclose.loader import load as load_module
from dayclose.settings import Target
from dayclose.sources import source
from dayclose.warehouse import Warehouse
from tests.helpers import sale, ts, write_batch, write_raw_batch

HOURS = [f"2026-11-23T{h:02d}" for h in range(1, 8)]


def test_batches_are_written_together_numbered_per_file_and_a_failing_one_is_refused_alone(
    engine: Target, landing: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for k, hour in enumerate(HOURS):  # each line says which batch it is and its line number
        lines = [
            sale(f"{hour}/{i}", "S-001", f"{hour}:00:00Z", f"{hour}:01:00Z") for i in range(1, 3 + 40 * k)
        ]
        write_batch(landing, hour, lines)
    real_check, real_ingest = load_module.check_batch, load_module.ingest_files
    calls: list[set[str]] = []

    def check_then_change(batch, spool):  # T04's file changes after its check: one line more
        checked = real_check(batch, spool)
        if batch.batch_id == HOURS[3]:
            checked.files[0].scan.lines -= 1
        return checked

    def ingest(wh, table, files):
        calls.append({f.batch_id for f in files})
        return real_ingest(wh, table, files)

    monkeypatch.setattr(load_module, "check_batch", check_then_change)
    monkeypatch.setattr(load_module, "ingest_files", ingest)
    with Warehouse(engine) as wh:
        report = load_source(wh, source("sales"), landing, ts("2026-11-24T00:30"), progress=None)
        schema = engine.landing_schema
        rows = wh.query(f"select batch_id, line_number, raw_line from {schema}.sale_lines")
        ledger = dict(wh.query(f"select batch_id, status from {schema}.load_ledger"))
    assert calls[0] == set(HOURS)  # one group first, then each batch alone
    assert [len(c) for c in calls[1:]] == [1] * len(HOURS)
    status = {r.batch_id: r.status for r in report.results}
    assert status == {h: "refused" if h == HOURS[3] else "loaded" for h in HOURS} == ledger
    [refused] = report.refused
    assert "122 lines read from the files, 121 checked against _SUCCESS" in refused.message
    assert sorted((b, n) for b, n, _ in rows) == sorted(
        (h, i) for k, h in enumerate(HOURS) if h != HOURS[3] for i in range(1, 3 + 40 * k)
    )
    for batch_id, number, line in rows:
        assert json.loads(line)["event_id"] == f"{batch_id}/{number}"


def test_a_load_that_dies_after_writing_leaves_nothing_and_its_retry_holds_each_line_once(
    engine: Target, landing: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Incident 004's 2.1x: a load writes its rows, then dies (a serialization failure, a lost
    session); the scheduler's retry loads again. Nothing of the dead load stays, and the retry
    holds every line once (its Prefect retry: tests/test_orchestration.py)."""
    for k, hour in enumerate(HOURS[:3]):
        write_batch(
            landing,
            hour,
            [sale(f"{hour}/{i}", "S-001", f"{hour}:00:00Z", f"{hour}:01:00Z") for i in range(5 + k)],
        )
    real_ingest = load_module.ingest_files

    def ingest_then_die(wh, table_name, files):
        real_ingest(wh, table_name, files)  # the rows are written ...
        raise RuntimeError("serializable isolation violation (injected)")  # ... then the load dies

    def lines() -> list[tuple]:
        with Warehouse(engine) as wh:
            return wh.query(f"select batch_id, line_number from {engine.landing_schema}.sale_lines")

    monkeypatch.setattr(load_module, "ingest_files", ingest_then_die)
    with pytest.raises(RuntimeError, match="injected"):
        jobs.load_step(engine, "sales", landing, ts("2026-11-24T00:30"), None)
    with Warehouse(engine) as wh:
        written = wh.relation_exists(engine.landing_schema, "sale_lines")
    assert not written or lines() == []
    monkeypatch.setattr(load_module, "ingest_files", real_ingest)
    for _ in range(2):  # the retry, and the next night's load
        report = jobs.load_step(engine, "sales", landing, ts("2026-11-24T00:30"), None)
    assert report.loaded == [] and report.already_loaded == 3
    assert sorted(lines()) == sorted((h, i) for k, h in enumerate(HOURS[:3]) for i in range(1, 6 + k))


def test_groups_are_written_two_at_a_time_each_numbering_its_own_lines(
    engine: Target, landing: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both engines number a read's lines on one core, so the loader writes two groups at once,
    each in its own transaction on its own connection (Postgres: each with its own sequence,
    also in a landing built when one sequence served every load). Each batch once, its lines
    numbered per file, a batch refused at its check, a re-delivered batch replaced."""
    hours = [f"2026-11-23T{h:02d}" for h in range(1, 10)]
    for k, hour in enumerate(hours):
        write_batch(
            landing,
            hour,
            [sale(f"{hour}/{i}", "S-001", f"{hour}:00:00Z", f"{hour}:01:00Z") for i in range(1, 5 + k)],
        )
    broken = landing / "sales" / f"arrived={hours[4]}"
    [data] = [f for f in broken.iterdir() if f.name != "_SUCCESS"]
    with data.open("a") as fh:  # a line more than _SUCCESS says: refused at its check
        fh.write(sale("extra", "S-001", "2026-11-23T05:00:00Z", "2026-11-23T05:01:00Z") + "\n")
    writers = load_module.WRITERS
    if engine.name == "postgres":  # the landing of before: one sequence numbered every COPY
        with Warehouse(engine) as wh:
            ensure_landing(wh, ["sale_lines", "unit_lines"])
            schema = engine.landing_schema
            before = f"nextval('{schema}.line_numbers')"
            wh.execute(f"alter table {schema}.sale_lines alter column line_number set default {before}")
    monkeypatch.setattr(load_module, "GROUP_BATCHES", 2)
    real_ingest = load_module.ingest_files
    lock, meet = threading.Lock(), threading.Barrier(writers, timeout=30)
    seen = {"active": 0, "peak": 0, "calls": 0, "connections": set()}

    def ingest(wh, table, files):
        with lock:
            seen["active"] += 1
            seen["peak"] = max(seen["peak"], seen["active"])
            seen["calls"] += 1
            seen["connections"].add(id(wh))
            first = seen["calls"] <= writers
        try:
            if first:  # the first groups meet here: on DuckDB, two must be under way at once
                meet.wait()
            return real_ingest(wh, table, files)
        finally:
            with lock:
                seen["active"] -= 1

    monkeypatch.setattr(load_module, "ingest_files", ingest)

    def load() -> tuple[dict[str, str], list[tuple[str, int, str]]]:
        with Warehouse(engine) as wh:
            report = load_source(wh, source("sales"), landing, ts("2026-11-24T00:30"), progress=None)
            rows = wh.query(f"select batch_id, line_number, raw_line from {engine.landing_schema}.sale_lines")
        return {r.batch_id: r.status for r in report.results}, rows

    status, rows = load()
    assert seen["peak"] == writers == len(seen["connections"]) == 2
    assert status == {h: "refused" if h == hours[4] else "loaded" for h in hours}
    expected = {(h, i) for k, h in enumerate(hours) if h != hours[4] for i in range(1, 5 + k)}
    assert sorted((b, n) for b, n, _ in rows) == sorted(expected)
    assert all(json.loads(line)["event_id"] == f"{b}/{n}" for b, n, line in rows)

    # the broken batch re-delivered whole, and another one corrected: both written, the rest skipped
    for hour, count in ((hours[4], 6), (hours[7], 2)):
        shutil.rmtree(landing / "sales" / f"arrived={hour}")
        write_batch(
            landing,
            hour,
            [sale(f"{hour}/{i}", "S-001", f"{hour}:00:00Z", f"{hour}:01:00Z") for i in range(1, count + 1)],
        )
    status, rows = load()
    assert status == {hours[4]: "loaded", hours[7]: "replaced"}
    expected = {(b, n) for b, n in expected if b != hours[7]}
    expected |= {(hours[4], i) for i in range(1, 7)} | {(hours[7], 1), (hours[7], 2)}
    assert sorted((b, n) for b, n, _ in rows) == sorted(expected)
    assert all(json.loads(line)["event_id"] == f"{b}/{n}" for b, n, line in rows)


def test_many_batches_are_checked_by_a_child_process_and_load_as_those_checked_here(
    engine: Target, landing: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From CHECK_PROCESS_FROM batches a child process checks them (a thread waits for Python's
    lock while dbt parses beside the load): the same lines, numbers and kept bytes of the lines
    the engine cannot read, the same refusal and ledger, as when they are checked here."""
    hours = [f"2026-11-2{1 + k // 24}T{k % 24:02d}" for k in range(2 * check_module.CHUNK + 5)]
    for k, hour in enumerate(hours):
        times = f"{hour}:00:00Z", f"{hour}:01:00Z"
        lines = [sale(f"{hour}/{i}", "S-001", *times) for i in range(1, 2 + k % 4)]
        if k % 9 == 4:  # lines the engine's reader cannot take: sanitized, then put back
            blob = "\n".join(lines).encode() + b"\n\xff\xfe not text\nnul \x00 inside\r\n{}\r\n"
            write_raw_batch(landing, "sales", hour, {"part-0000.jsonl": blob})
        else:
            write_batch(landing, hour, lines)
    broken = landing / "sales" / f"arrived={hours[20]}"
    [data] = [f for f in broken.iterdir() if f.name != "_SUCCESS"]
    with data.open("a") as fh:  # a line more than _SUCCESS says: refused at its check
        fh.write("{}\n")
    schema = engine.landing_schema

    def load(process_from: int) -> tuple[list, list, list]:
        monkeypatch.setattr(load_module, "CHECK_PROCESS_FROM", process_from)
        with Warehouse(engine) as wh:
            report = load_source(wh, source("sales"), landing, ts("2026-11-24T00:30"), progress=None)
            rows = wh.query(
                f"select batch_id, file_name, line_number, raw_line, raw_line_hex, byte_error "
                f"from {schema}.sale_lines order by 1, 2, 3"
            )
            ledger = wh.query(
                "select batch_id, status, manifest_sha256, files, rows_loaded, byte_errors, message "
                f"from {schema}.load_ledger order by 1"
            )
            wh.execute(f"delete from {schema}.sale_lines")
            wh.execute(f"delete from {schema}.load_ledger")
        results = [(r.batch_id, r.status, r.rows, r.byte_errors, r.message) for r in report.results]
        return results, rows, ledger

    here = load(len(hours) + 1)

    def not_here(batch, spool):
        raise AssertionError(f"{batch.batch_id} checked in the loading process")

    monkeypatch.setattr(load_module, "check_batch", not_here)
    assert load(len(hours)) == here
    results, rows, _ = here
    assert [r[0] for r in results] == hours
    assert [r[1] for r in results].count("refused") == 1 and results[20][1] == "refused"
    assert "has 2 lines, _SUCCESS says 1" in results[20][4]  # 1 + 20 % 4 lines, and the one added
    assert {r[0] for r in rows if r[4]} == {h for k, h in enumerate(hours) if k % 9 == 4}  # bytes kept
    assert sum(r[3] for r in results) == 2 * len([k for k in range(len(hours)) if k % 9 == 4])


def checked_by(program: str, landing: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch of one line per hour of HOURS, checked by a child process running `program`
    (check.SERVE) in requests of two batches."""
    for hour in HOURS:
        write_batch(landing, hour, [sale(f"{hour}/1", "S-001", f"{hour}:00:00Z", f"{hour}:01:00Z")])
    monkeypatch.setattr(load_module, "CHECK_PROCESS_FROM", 1)
    monkeypatch.setattr(check_module, "CHUNK", 2)
    monkeypatch.setattr(check_module, "SERVE", program)


ANSWER_ONCE_THEN_EXIT = """
import json, sys
from pathlib import Path
from dayclose.loader.check import _batch_from, _checked_json, check_batch
batches = [_batch_from(b) for b in json.loads(sys.stdin.buffer.readline())]
answer = ["checked", [_checked_json(check_batch(b, Path(sys.argv[1]))) for b in batches]]
sys.stdout.write(json.dumps(answer) + "\\n")
sys.stdout.flush()
sys.exit(5)
"""
FAIL_WHILE_CHECKING = """
from dayclose.loader import check
real = check.check_batch
def on_fire(batch, spool):
    if batch.batch_id == "2026-11-23T03":  # in the second request, sent before the first is read
        raise ValueError(f"disk on fire at {batch.batch_id}")
    return real(batch, spool)
check.check_batch = on_fire
check.serve()
"""


@pytest.mark.parametrize(
    ("program", "message"),
    [
        ("import sys; sys.exit(3)", r"ended \(exit code 3\) before answering for 2026-11-23T01 and after"),
        (ANSWER_ONCE_THEN_EXIT, r"ended \(exit code 5\) before answering for 2026-11-23T03 and after"),
        (FAIL_WHILE_CHECKING, r"batches from 2026-11-23T03:\n(?s:.*)disk on fire at 2026-11-23T03"),
    ],
    ids=["ends at once", "ends after an answer", "fails while checking"],
)
def test_a_check_process_that_fails_or_ends_stops_the_load_before_anything_is_written(
    engine: Target, landing: Path, monkeypatch: pytest.MonkeyPatch, program: str, message: str
) -> None:
    """The error names the batches left unanswered (and the child's own error); the batches
    answered before are not written either: a load stopped by an error writes nothing more."""
    checked_by(program, landing, monkeypatch)
    with Warehouse(engine) as wh:
        with pytest.raises(check_module.CheckProcessFailed, match=message):
            load_source(wh, source("sales"), landing, ts("2026-11-24T00:30"), progress=None)
        assert wh.scalar(f"select count(*) from {engine.landing_schema}.load_ledger") == 0
        assert wh.scalar(f"select count(*) from {engine.landing_schema}.sale_lines") == 0


def test_the_check_process_error_reaches_the_loader_after_more_requests_were_sent(
    engine: Target, landing: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loader, slowed by its writers, sends a request after the one the child failed on:
    the child reads it to the end rather than leave the pipe broken, so the loader still gets
    the child's error (not "ended (exit code 0)")."""
    # the third request fails; the loader, one batch at a time through one slow writer, sends
    # the fourth only once the child has answered it
    checked_by(FAIL_WHILE_CHECKING.replace("2026-11-23T03", "2026-11-23T05"), landing, monkeypatch)
    for name, value in (("GROUP_BATCHES", 1), ("LOOK_AHEAD", 1), ("WRITERS", 1)):
        monkeypatch.setattr(load_module, name, value)
    real_ingest = load_module.ingest_files

    def slow_ingest(wh, table, files):
        time.sleep(0.5)
        return real_ingest(wh, table, files)

    monkeypatch.setattr(load_module, "ingest_files", slow_ingest)
    failed = pytest.raises(check_module.CheckProcessFailed, match="disk on fire at 2026-11-23T05")
    with Warehouse(engine) as wh, failed:
        load_source(wh, source("sales"), landing, ts("2026-11-24T00:30"), progress=None)


PRINT_WHILE_CHECKING = """
from dayclose.loader import check
real = check.check_batch
def noisy(batch, spool):
    print("checking", batch.batch_id)
    return real(batch, spool)
check.check_batch = noisy
check.serve()
"""


def test_what_the_check_process_prints_does_not_mix_with_its_answers(
    engine: Target, landing: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    checked_by(PRINT_WHILE_CHECKING, landing, monkeypatch)
    with Warehouse(engine) as wh:
        report = load_source(wh, source("sales"), landing, ts("2026-11-24T00:30"), progress=None)
    assert [r.batch_id for r in report.loaded] == HOURS
    assert capfd.readouterr().err.split("\n")[: len(HOURS)] == [f"checking {h}" for h in HOURS]


@pytest.mark.parametrize("configured", [None, "512MiB"])
def test_duckdb_writes_under_the_loaders_memory_cap_and_gets_its_setting_back(
    engine: Target, landing: Path, monkeypatch: pytest.MonkeyPatch, configured: str | None
) -> None:
    """DuckDB runs in the loading process and caches what it writes up to its memory limit
    (by default 80% of the machine): every write of a load runs under the loader's cap
    (256MB, or DAYCLOSE_LOADER_MEMORY_LIMIT), and the warehouse's own setting comes back after."""
    if engine.name != "duckdb":
        pytest.skip("Postgres loads in its own server: the loading process holds no cache")
    if configured:
        monkeypatch.setenv("DAYCLOSE_LOADER_MEMORY_LIMIT", configured)
    else:
        monkeypatch.delenv("DAYCLOSE_LOADER_MEMORY_LIMIT", raising=False)
    for hour in HOURS[:3]:
        write_batch(landing, hour, [sale(f"{hour}/1", "S-001", f"{hour}:00:00Z", f"{hour}:01:00Z")])
    limit = "select current_setting('memory_limit')"
    real_ingest = load_module.ingest_files
    seen: list[str] = []

    def ingest(wh, table, files):
        seen.append(wh.scalar(limit))
        return real_ingest(wh, table, files)

    monkeypatch.setattr(load_module, "ingest_files", ingest)
    with Warehouse(engine) as wh:
        before = wh.scalar(limit)
        report = load_source(wh, source("sales"), landing, ts("2026-11-24T00:30"), progress=None)
        after = wh.scalar(limit)
    assert report.rows_loaded == 3
    expected = "512.0 MiB" if configured else "244.1 MiB"  # 256MB = 256,000,000 bytes
    assert seen and set(seen) == {expected}
    assert after == before != expected


@pytest.mark.parametrize("chunk", [4, 5, 7, 64, prepass.CHUNK])
def test_the_prepass_counts_lines_and_finds_the_end_marker_across_chunk_borders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    """The file check reads large chunks (8 MB): its line count and its search for COPY's end
    marker (a line that is exactly '\\.') must not depend on where a chunk ends."""
    monkeypatch.setattr(prepass, "CHUNK", chunk)
    cases = [b"x" * pad + b"\n\\.\n{}" for pad in range(12)]  # the marker at every offset
    cases += [b"\\.\n{}\n", b'{"a":"\\\\."}\n\\.x\n.\\\n', b'{"a":"b\\\\"}\n' * 9, b"", b"\n", b"{}"]
    for k, data in enumerate(cases):
        path = tmp_path / f"{k}.jsonl"
        path.write_bytes(data)
        found = prepass.scan(path)
        lines = data.count(b"\n") + (not data.endswith(b"\n") and len(data) > 0)
        assert (found.lines, found.size, found.sha256) == (lines, len(data), hashlib.sha256(data).hexdigest())
        assert ("eod" in found.problems) == (b"\n\\.\n" in b"\n" + data), data


@pytest.mark.parametrize("storage", ["v1.2.0", "v1.0.0"])
def test_duckdb_keeps_raw_lines_by_zstd_where_the_files_format_has_it(
    engine: Target, landing: Path, storage: str
) -> None:
    """The raw lines are compressed by zstd in a file whose storage format has it for text
    (v1.2.0 and later; DuckDB 2.0 makes new files in v2.0.0); an older file keeps DuckDB's
    own choice (forcing zstd there fails or stores the lines uncompressed). The same lines."""
    if engine.name != "duckdb":
        pytest.skip("a DuckDB storage choice")
    import duckdb

    assert engine.duckdb_path is not None
    # a file in that storage format, as a DuckDB of that version makes it
    duckdb.connect(str(engine.duckdb_path), config={"storage_compatibility_version": storage}).close()
    lines = [
        sale(f"{hour}/{i}", "S-001", f"{hour}:00:00Z", f"{hour}:01:00Z") for hour in HOURS for i in range(300)
    ]
    for hour in HOURS:
        write_batch(landing, hour, [line for line in lines if f'"{hour}/' in line])
    with Warehouse(engine) as wh:
        report = load_source(wh, source("sales"), landing, ts("2026-11-24T00:30"), progress=None)
        wh.execute("checkpoint")
        relation = f"{engine.landing_schema}.sale_lines"
        methods = {
            m
            for (m,) in wh.query(
                f"select distinct compression from pragma_storage_info('{relation}') "
                "where column_name = 'raw_line' and compression <> 'Constant'"
            )
        }
        loaded = sorted(line for (line,) in wh.query(f"select raw_line from {relation}"))
    assert report.rows_loaded == len(lines) and loaded == sorted(lines)
    assert (methods == {"ZSTD"}) if storage == "v1.2.0" else ("ZSTD" not in methods and methods)
