"""The one loader, parameterised by source: complete batches into the raw tables, idempotent.

The loader's promises:
- a batch without _SUCCESS is not loaded (it waits for a later run);
- every file of a batch is checked against the manifest (its line count and sha256, no file
  missing or extra) before anything of the batch is written; a batch that disagrees is
  refused whole, with a message naming the batch and the mismatch, and the other batches
  still load;
- every line of a loaded batch lands in the source's raw table exactly as it came, with its
  file and line number: the engine reads the files itself (dayclose.loader.ingest), Python
  only reads each file's bytes once to check them (dayclose.loader.prepass). Decoding and
  validation are the dbt models' work; nothing is dropped here;
- a batch is written in one transaction with its ledger row (delete an earlier version of
  it, insert its lines, check their count, record it in the load ledger), so loading it
  twice, or retrying after a failure half way, leaves exactly one copy. Small batches share
  a transaction (up to GROUP_LINES lines or GROUP_BATCHES batches): a statement costs
  milliseconds whatever its size, which made 3,700-line batches load at a tenth of the
  engine's speed. When a shared transaction fails on one batch, nothing of it stays and each
  of its batches is written alone, so only that one is refused. Two groups are written at
  once (WRITERS), each its own transaction on its own connection.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import shutil
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from dayclose.console import progress as console_progress
from dayclose.dates import utc_now
from dayclose.errors import EXIT_CONFIG, DaycloseError
from dayclose.loader.check import CheckedBatch, check_batch, checked_in_a_process
from dayclose.loader.contract import Batch, ManifestMismatch, discover, marker_sha
from dayclose.loader.ingest import (
    SPARK_LEDGER_ORDER,
    WRITERS,
    BatchUnreadable,
    FileToRead,
    ensure_landing,
    ingest_files,
    ingest_files_spark,
    put_back,
)
from dayclose.sources import Source, sources
from dayclose.warehouse import Warehouse

RECHECK_DAYS = 35  # loaded batches younger than this are checked for a changed manifest
GROUP_LINES = 500_000  # batches written in one transaction: up to this many lines ...
GROUP_BATCHES = 256  # ... or this many batches
LOOK_AHEAD = GROUP_BATCHES  # checked batches waiting for their writer, at most
CHECK_PROCESS_FROM = 48  # batches to load from which a child process checks them (_checks)


@dataclass
class BatchResult:
    batch_id: str
    status: str  # loaded | replaced | refused
    rows: int = 0
    byte_errors: int = 0
    message: str = ""


@dataclass
class LoadReport:
    source: str
    as_of: datetime
    results: list[BatchResult] = field(default_factory=list)
    already_loaded: int = 0
    waiting: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0
    missing_folder: str | None = None  # the landing has no folder for this source at all

    @property
    def loaded(self) -> list[BatchResult]:
        return [r for r in self.results if r.status in ("loaded", "replaced")]

    @property
    def refused(self) -> list[BatchResult]:
        return [r for r in self.results if r.status == "refused"]

    @property
    def rows_loaded(self) -> int:
        return sum(r.rows for r in self.loaded)


def write_batch(
    wh: Warehouse, source: Source, checked: CheckedBatch, previous_sha: str | None
) -> BatchResult:
    """Write a checked batch in one transaction (replacing any earlier copy), or refuse it."""
    batch = checked.batch
    if checked.problem is not None:
        return _refuse(wh, source, batch, checked.sha, checked.problem, previous_sha)
    try:
        [byte_errors] = _write(wh, source, [(checked, previous_sha)])
    except (ManifestMismatch, BatchUnreadable) as exc:
        return _refuse(wh, source, batch, checked.sha, str(exc), previous_sha)
    except wh.data_errors as exc:  # the engine refused the bytes: this batch waits, the others load
        reason = f"the {wh.kind} reader failed: " + " ".join(str(exc).split())[:500]
        return _refuse(wh, source, batch, checked.sha, reason, previous_sha)
    return _written(checked, previous_sha, byte_errors)


def write_batches(
    wh: Warehouse, source: Source, group: list[tuple[CheckedBatch, str | None]]
) -> list[BatchResult]:
    """Write checked batches (none with a problem) in one transaction, each with its ledger row.

    A batch costs a few statements whatever its size, so small batches are written together:
    one delete, one read of all their files (DuckDB), one count, one ledger insert. When the
    group fails on one batch (a file changed since it was checked, bytes the engine refuses),
    nothing of it stays, and each batch is written alone, so that only that one is refused.
    """
    if len(group) > 1:
        try:
            byte_errors = _write(wh, source, group)
        except (ManifestMismatch, BatchUnreadable, *wh.data_errors):
            pass
        else:
            return [_written(c, prev, n) for (c, prev), n in zip(group, byte_errors, strict=True)]
    return [write_batch(wh, source, checked, previous) for checked, previous in group]


def _written(checked: CheckedBatch, previous_sha: str | None, byte_errors: int) -> BatchResult:
    status = "replaced" if previous_sha is not None else "loaded"
    return BatchResult(checked.batch.batch_id, status, checked.rows, byte_errors, _message(previous_sha))


def _message(previous_sha: str | None) -> str:
    return "manifest changed since the last load; batch replaced" if previous_sha else ""


def _write(wh: Warehouse, source: Source, group: list[tuple[CheckedBatch, str | None]]) -> list[int]:
    """The batches' lines and ledger rows in one transaction; per batch, its lines that are not text."""
    if wh.kind == "spark":
        return _write_spark(wh, source, group)
    relation = f"{wh.target.landing_schema}.{source.table}"
    byte_errors = []
    # the lines of an earlier version of a batch go first; a batch without one has none, since
    # a batch's lines and its "loaded" ledger row are only ever written together
    replaced = [checked.batch.batch_id for checked, previous in group if previous is not None]
    with wh.transaction():
        if replaced:
            wh.execute(
                f"delete from {relation} where batch_id in ({wh.placeholders(len(replaced))})", replaced
            )
        files = [
            FileToRead(checked.batch.batch_id, file.name, file.read_path, file.scan.lines)
            for checked, _ in group
            for file in checked.files
        ]
        written = ingest_files(wh, source.table, files)
        for checked, _ in group:
            errors = 0
            for file in checked.files:
                if file.replaced and file.scan.lines:
                    spool = file.read_path.with_name(file.read_path.name + ".put-back.csv")
                    errors += put_back(
                        wh, source.table, checked.batch.batch_id, file.name, file.replaced, spool
                    )
            byte_errors.append(errors)
        for checked, _ in group:
            if written.get(checked.batch.batch_id, 0) != checked.rows:  # a file changed since it was checked
                raise ManifestMismatch(
                    f"{written.get(checked.batch.batch_id, 0)} lines read from the files, "
                    f"{checked.rows} checked against _SUCCESS"
                )
        ledger_rows: list[LedgerRow] = [
            (c.batch, "loaded", c.sha, len(c.files), c.rows, errors, _message(prev))
            for (c, prev), errors in zip(group, byte_errors, strict=True)
        ]
        _record(wh, source, ledger_rows)
    return byte_errors


def _write_spark(wh: Warehouse, source: Source, group: list[tuple[CheckedBatch, str | None]]) -> list[int]:
    """Spark, which has no transactions: the batches' partitions of the raw table overwritten
    whole (an earlier version of a batch goes first), their line counts checked, then the
    ledger rows. A failure half way leaves batches without their ledger row, which the next
    run writes again whole, so a retry still leaves one copy."""
    relation = f"{wh.target.landing_schema}.{source.table}"
    for checked, previous in group:
        if previous is not None:  # its new version may have fewer files, or no lines at all
            wh.execute(
                f"alter table {relation} drop if exists partition (batch_id = '{checked.batch.batch_id}')"
            )
    files = [
        FileToRead(checked.batch.batch_id, file.name, file.read_path, file.scan.lines)
        for checked, _ in group
        for file in checked.files
    ]
    fixes = [
        (checked.batch.batch_id, file.name, number, original)
        for checked, _ in group
        for file in checked.files
        if file.scan.lines
        for number, original in file.replaced
    ]
    written, errors = ingest_files_spark(wh, source.table, files, fixes)
    for checked, _ in group:
        if written.get(checked.batch.batch_id, 0) != checked.rows:  # a file changed since it was checked
            raise ManifestMismatch(
                f"{written.get(checked.batch.batch_id, 0)} lines read from the files, "
                f"{checked.rows} checked against _SUCCESS"
            )
    byte_errors = [errors.get(checked.batch.batch_id, 0) for checked, _ in group]
    _record(
        wh,
        source,
        [
            (c.batch, "loaded", c.sha, len(c.files), c.rows, n, _message(prev))
            for (c, prev), n in zip(group, byte_errors, strict=True)
        ],
    )
    return byte_errors


# batch, status, manifest sha256, files, rows, byte errors, message
LedgerRow = tuple[Batch, str, "str | None", int, int, int, str]


def _record(wh: Warehouse, source: Source, rows: list[LedgerRow]) -> None:
    ledger = f"{wh.target.landing_schema}.load_ledger"
    ids = [batch.batch_id for batch, *_ in rows]
    if wh.kind == "spark":
        _record_spark(wh, ledger, source, rows, ids)
        return
    wh.execute(
        f"delete from {ledger} where source_name = %s and batch_id in ({wh.placeholders(len(ids))})",
        [source.name, *ids],
    )
    now = utc_now()
    values, params = [], []
    for batch, status, sha, files, count, byte_errors, message in rows:
        values.append("(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)")
        params += [source.name, batch.batch_id, status, sha, files, count, byte_errors, batch.arrived_at, now]
        params.append(message)
    wh.execute(
        f"insert into {ledger} (source_name, batch_id, status, manifest_sha256, files, "
        f"rows_loaded, byte_errors, batch_arrived_at, loaded_at, message) values {', '.join(values)}",
        params,
    )


def _record_spark(wh: Warehouse, ledger: str, source: Source, rows: list[LedgerRow], ids: list[str]) -> None:
    """Spark: the source's partition of the ledger rewritten with these rows in place of any
    earlier rows of their batches (a parquet table takes no delete)."""
    now = utc_now()
    values, params = [], []
    for batch, status, sha, files, count, byte_errors, message in rows:
        values.append(
            "select %s, %s, %s, cast(%s as int), cast(%s as bigint), cast(%s as bigint), "
            "cast(%s as timestamp), cast(%s as timestamp), %s, %s"
        )
        params += [batch.batch_id, status, sha, files, count, byte_errors, batch.arrived_at, now, message]
        params.append(source.name)
    columns = ", ".join(SPARK_LEDGER_ORDER)
    wh.session.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
    wh.execute(
        f"insert overwrite table {ledger} partition (source_name) "
        f"select {columns} from {ledger} where source_name = %s "
        f"and batch_id not in ({wh.placeholders(len(ids))}) union all {' union all '.join(values)}",
        [source.name, *ids, *params],
    )


def _refuse(
    wh: Warehouse, source: Source, batch: Batch, sha: str | None, reason: str, previous_sha: str | None
) -> BatchResult:
    message = f"{source.name} batch arrived={batch.batch_id} refused: {reason}"
    if previous_sha is not None:
        # a bad re-delivery of a batch loaded before: keep the loaded version and its ledger row
        return BatchResult(batch.batch_id, "refused", message=message + "; the version loaded before stays")
    with wh.transaction():
        _record(wh, source, [(batch, "refused", sha, 0, 0, 0, message)])
    return BatchResult(batch.batch_id, "refused", message=message)


def _checks(batches: list[Batch], spool: Path) -> Iterator[CheckedBatch]:
    """check_batch of each batch, in order: by a child process from CHECK_PROCESS_FROM batches
    (dayclose.loader.check: a thread checking them would wait for Python's lock while dbt
    parses the project beside the load), else here."""
    if len(batches) >= CHECK_PROCESS_FROM:
        yield from checked_in_a_process(batches, spool)
        return
    for batch in batches:
        yield check_batch(batch, spool)


def _checked_in_order(
    todo: list[tuple[Batch, str | None]], spool: Path
) -> Iterator[tuple[CheckedBatch, str | None]]:
    """The batches checked oldest first, by a thread that stays ahead of the writer by at most
    GROUP_LINES lines and LOOK_AHEAD batches: enough to check the next group while one is
    written, and few enough that sanitized copies in the spool stay bounded by lines, not
    by how many batches are waiting (a check process, _checks, works at most
    CHUNK * (IN_FLIGHT + 1) - 1 batches further ahead)."""
    ready: deque[tuple[CheckedBatch, str | None]] = deque()
    cond = threading.Condition()
    state: dict = {"lines": 0, "done": False, "stop": False, "error": None}

    def full() -> bool:
        return len(ready) >= LOOK_AHEAD or state["lines"] >= GROUP_LINES

    def work() -> None:
        try:
            with contextlib.closing(_checks([batch for batch, _ in todo], spool)) as checks:
                for (_, previous), checked in zip(todo, checks, strict=True):
                    with cond:
                        while not state["stop"] and full():
                            cond.wait()
                        if state["stop"]:
                            return
                        ready.append((checked, previous))
                        state["lines"] += checked.rows
                        cond.notify_all()
        except BaseException as exc:  # handed to the writer, which raises it
            state["error"] = exc
        finally:
            with cond:
                state["done"] = True
                cond.notify_all()

    thread = threading.Thread(target=work, name="dayclose-check", daemon=True)
    thread.start()
    try:
        while True:
            with cond:
                while not ready and not state["done"]:
                    cond.wait()
                if not ready:
                    if state["error"] is not None:
                        raise state["error"]
                    return
                item = ready.popleft()
                state["lines"] -= item[0].rows
                cond.notify_all()
            yield item
    finally:
        with cond:
            state["stop"] = True
            cond.notify_all()
        thread.join()


def _drop_copies(checked: CheckedBatch) -> None:
    """Remove the sanitized copies of a batch's files once it is written (or refused)."""
    for file in checked.files:
        if file.read_path != checked.batch.path / file.name:
            file.read_path.unlink(missing_ok=True)


class _Writers:
    """Groups of checked batches written by up to `n` transactions at once, each on its own
    connection (the loader's and n - 1 siblings), in threads; `collect` gets each group's
    results in the order the groups were submitted. Each group is one transaction with its
    ledger rows, so groups written at once never see each other's lines half written, and a
    batch's sanitized copies go once its group is written."""

    def __init__(
        self, wh: Warehouse, source: Source, n: int, collect: Callable[[list[BatchResult]], None]
    ) -> None:
        self.wh, self.source, self.n, self.collect = wh, source, n, collect
        self.siblings: list[Warehouse] = []
        self.idle: queue.SimpleQueue[Warehouse] = queue.SimpleQueue()
        self.pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="dayclose-write")
        self.pending: deque[Future[list[BatchResult]]] = deque()

    def __enter__(self) -> _Writers:
        try:
            self.siblings = [self.wh.sibling(writer) for writer in range(1, self.n)]
        except BaseException:
            self.__exit__(None)
            raise
        for conn in (self.wh, *self.siblings):
            self.idle.put(conn)
        return self

    def _write(self, group: list[tuple[CheckedBatch, str | None]]) -> list[BatchResult]:
        conn = self.idle.get_nowait()  # as many connections as threads
        try:
            return write_batches(conn, self.source, group)
        finally:
            self.idle.put(conn)
            for checked, _ in group:
                _drop_copies(checked)

    def submit(self, group: list[tuple[CheckedBatch, str | None]]) -> None:
        """Start writing `group`; first, while `n` groups are being written, wait for the oldest."""
        while len(self.pending) >= self.n:
            self.collect(self.pending.popleft().result())
        self.pending.append(self.pool.submit(self._write, list(group)))

    def __exit__(self, exc_type: object, *exc: object) -> None:
        try:
            while self.pending:
                future = self.pending.popleft()
                if exc_type is None:
                    self.collect(future.result())
                else:  # failing already: let the groups under way end, keep the first error
                    with contextlib.suppress(Exception):
                        future.result()
        finally:
            self.pool.shutdown(wait=True)
            for conn in self.siblings:
                conn.close()


@contextlib.contextmanager
def _bounded_memory(wh: Warehouse) -> Iterator[None]:
    """On DuckDB, cap its buffer pool while loading (DAYCLOSE_LOADER_MEMORY_LIMIT, default 256MB).

    DuckDB runs inside this process and by default keeps the pages it wrote cached up to 80%
    of the machine's memory, so the loading process would grow with the size of the day.
    A batch needs far less: each file is read, numbered and appended in a streaming pass, so
    the cap only bounds that cache: the loader is as fast under it, and its peak memory no
    longer grows with the day (bench.run's memory case, docs/benchmarks.md).
    """
    if wh.kind != "duckdb":
        yield
        return
    limit = os.environ.get("DAYCLOSE_LOADER_MEMORY_LIMIT", "256MB").strip()
    if not re.fullmatch(r"[0-9]+(\.[0-9]+)? ?[KMGT]i?B", limit):
        raise DaycloseError(
            f"DAYCLOSE_LOADER_MEMORY_LIMIT={limit!r} is not a memory size (for example 1GB or 512MiB)",
            EXIT_CONFIG,
        )
    wh.execute(f"set memory_limit = '{limit}'")
    try:
        yield
    finally:
        # DuckDB's default again (dayclose sets no other limit); setting back the value read
        # before would round it (current_setting gives "18.8 GiB" for 18.77 GiB)
        wh.execute("reset memory_limit")


def load_source(
    wh: Warehouse,
    source: Source,
    landing: Path,
    as_of: datetime,
    progress: Callable[[str], None] = console_progress,
    recheck_days: int | None = RECHECK_DAYS,
) -> LoadReport:
    """Load every complete, not yet loaded batch of `source` that had arrived by `as_of`.

    A loaded batch whose manifest changed (an upstream re-delivery) is replaced; manifests
    are re-read for the batches of the last `recheck_days` days (None: all), so the
    nightly cost does not grow with the landing's history.
    """
    started = time.monotonic()
    ensure_landing(wh, [s.table for s in sources().values()])
    report = LoadReport(source.name, as_of)
    if not (landing / source.name).is_dir():  # a mistyped path, an unmounted share: never a quiet night
        report.missing_folder = str(landing / source.name)
    batches, report.problems = discover(landing, source.name, as_of)
    loaded = dict(
        wh.query(
            f"select batch_id, manifest_sha256 from {wh.target.landing_schema}.load_ledger "
            "where source_name = %s and status = 'loaded'",
            (source.name,),
        )
    )
    todo: list[tuple[Batch, str | None]] = []
    settled_before = None if recheck_days is None else as_of - timedelta(days=recheck_days)
    for batch in batches:
        previous = loaded.get(batch.batch_id)
        if previous is not None and settled_before is not None and batch.arrived_at < settled_before:
            report.already_loaded += 1  # loaded and settled: its folder is not looked at again
            continue
        if not batch.marker.exists():
            report.waiting.append(batch.batch_id)
            continue
        if previous is not None and previous == marker_sha(batch):
            report.already_loaded += 1
            continue
        todo.append((batch, previous))
    spool = Path(
        tempfile.mkdtemp(prefix=f"dayclose-{source.name}-", dir=os.environ.get("DAYCLOSE_SPOOL_DIR"))
    )
    group: list[tuple[CheckedBatch, str | None]] = []

    def collect(results: list[BatchResult]) -> None:
        before = len(report.results) // 24
        report.results.extend(results)
        done = len(report.results)
        if progress and (done // 24 > before or done == len(todo)):
            progress(f"{source.name}: {done}/{len(todo)} batches, {report.rows_loaded:,} lines loaded")

    try:
        with (
            _bounded_memory(wh),
            # Spark: one writer, its statements use the session's cores
            _Writers(wh, source, 1 if wh.kind == "spark" else WRITERS, collect) as writers,
            contextlib.closing(_checked_in_order(todo, spool)) as checked_batches,
        ):
            for checked, previous in checked_batches:
                if checked.problem is not None:  # refused alone
                    if group:
                        writers.submit(group)
                        group = []
                    writers.submit([(checked, previous)])
                    continue
                group.append((checked, previous))
                if sum(c.rows for c, _ in group) >= GROUP_LINES or len(group) >= GROUP_BATCHES:
                    writers.submit(group)
                    group = []
            if group:
                writers.submit(group)
    finally:
        shutil.rmtree(spool, ignore_errors=True)
    if wh.kind == "postgres" and report.loaded:
        relation = f"{wh.target.landing_schema}.{source.table}"
        wh.execute(f"analyze {relation}")  # plans for the new rows
        wh.execute("select brin_summarize_new_values(%s::regclass)", (f"{relation}_batch_brin",))
    report.seconds = time.monotonic() - started
    return report
