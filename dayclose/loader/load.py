"""The one loader, parameterised by source (the contract: dayclose.loader.contract).

The loader's promises:
- a batch without _SUCCESS is not loaded (it waits for a later run);
- a batch whose files disagree with its manifest is refused whole, with a message
  naming the batch and the mismatch; the other batches still load;
- every line of a loaded batch lands in the source's raw table, decoded into typed
  columns or, when it cannot be decoded, with a `decode_error`; dbt then routes
  every invalid line to the dead-letter model. Nothing is dropped here;
- a batch is written in one transaction (delete the batch, insert it, record it in
  the load ledger), so loading it twice, or retrying after a failure half way,
  leaves exactly one copy.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import multiprocessing
import os
import re
import shutil
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from dayclose.loader.contract import Batch, ManifestMismatch, data_files, discover, marker_sha, read_manifest
from dayclose.loader.decode import NULL, decode_line
from dayclose.sources import SOURCES, Source
from dayclose.warehouse import Warehouse

RECHECK_DAYS = 35  # loaded batches younger than this are checked for a changed manifest


@dataclass
class BatchResult:
    batch_id: str
    status: str  # loaded | replaced | refused
    rows: int = 0
    decode_errors: int = 0
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

    @property
    def loaded(self) -> list[BatchResult]:
        return [r for r in self.results if r.status in ("loaded", "replaced")]

    @property
    def refused(self) -> list[BatchResult]:
        return [r for r in self.results if r.status == "refused"]

    @property
    def rows_loaded(self) -> int:
        return sum(r.rows for r in self.loaded)


LEDGER_COLUMNS = """
    source_name varchar not null,
    batch_id varchar not null,
    status varchar not null,
    manifest_sha256 varchar,
    files integer,
    rows_loaded bigint,
    decode_errors bigint,
    batch_arrived_at timestamp,
    loaded_at timestamp not null,
    message varchar,
    primary key (source_name, batch_id)
"""


def ensure_landing(wh: Warehouse) -> None:
    """Create the landing schema, every source's raw table and the shared load ledger.

    All sources at once: the lateness models read every source, so a warehouse that has
    only ever loaded sales still has an (empty) units table.
    """
    schema = wh.target.landing_schema
    wh.execute(f"create schema if not exists {schema}")
    wh.execute(f"create table if not exists {schema}.load_ledger ({LEDGER_COLUMNS})")
    for spec in SOURCES.values():
        cols = ",\n    ".join(f"{name} {sqltype}" for name, sqltype in spec.columns)
        wh.execute(f"create table if not exists {schema}.{spec.table} (\n    {cols}\n)")
        if wh.kind == "postgres":
            # The nightly window reads by event time, the lateness models by arrival time:
            # both must stay proportional to the window, not to the history.
            for col in (spec.event_time, spec.arrival_time, "batch_id"):
                wh.execute(
                    f"create index if not exists {spec.table}_{col}_idx on {schema}.{spec.table} ({col})"
                )


def _iter_lines(path: Path, digest: hashlib._Hash) -> Iterator[tuple[int, str, str | None]]:
    """(line number, text, encoding error) for each line, hashing the bytes as they pass."""
    with open(path, "rb") as fh:
        for number, raw in enumerate(fh, start=1):
            digest.update(raw)
            body = raw[:-1] if raw.endswith(b"\n") else raw
            if body.endswith(b"\r"):
                body = body[:-1]
            try:
                text = body.decode("utf-8")
                problem = None
            except UnicodeDecodeError:
                text = body.decode("utf-8", errors="replace")
                problem = "not valid UTF-8"
            if "\x00" in text:
                text = text.replace("\x00", "\ufffd")
                problem = "contains a NUL byte"
            yield number, text, problem


def _spool_batch(spec: Source, batch: Batch, manifest: dict[str, dict], spool) -> tuple[int, int]:
    """Decode every line of the batch into the CSV spool; check files against the manifest."""
    present = data_files(batch)
    missing = sorted(set(manifest) - set(present))
    extra = sorted(set(present) - set(manifest))
    if missing:
        raise ManifestMismatch(f"{', '.join(missing)} listed in _SUCCESS but not in the folder")
    if extra:
        raise ManifestMismatch(f"{', '.join(extra)} in the folder but not listed in _SUCCESS")
    writer = csv.writer(spool, lineterminator="\n")
    arrived = batch.arrived_at.strftime("%Y-%m-%d %H:%M:%S")
    completed = batch.completed_at.strftime("%Y-%m-%d %H:%M:%S")
    rows = errors = 0
    for name in present:
        digest = hashlib.sha256()
        count = 0
        for number, text, problem in _iter_lines(batch.path / name, digest):
            values, error = (
                decode_line(spec, text) if problem is None else ([NULL] * len(spec.fields), problem)
            )
            if error is not None:
                errors += 1
            writer.writerow(
                [
                    batch.batch_id,
                    arrived,
                    completed,
                    name,
                    number,
                    text,
                    NULL if error is None else error,
                    *values,
                ]
            )
            count = number
        expected = manifest[name]
        if count != expected["rows"]:
            raise ManifestMismatch(f"{name} has {count} lines, _SUCCESS says {expected['rows']}")
        if digest.hexdigest() != expected["sha256"]:
            raise ManifestMismatch(f"{name} sha256 {digest.hexdigest()[:12]}... differs from _SUCCESS")
        rows += count
    return rows, errors


def _record(
    wh: Warehouse,
    spec: Source,
    batch: Batch,
    status: str,
    sha: str | None,
    files: int,
    rows: int,
    errors: int,
    message: str,
) -> None:
    ledger = f"{wh.target.landing_schema}.load_ledger"
    wh.execute(f"delete from {ledger} where source_name = %s and batch_id = %s", (spec.name, batch.batch_id))
    wh.execute(
        f"insert into {ledger} (source_name, batch_id, status, manifest_sha256, files, "
        "rows_loaded, decode_errors, batch_arrived_at, loaded_at, message) "
        "values (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (
            spec.name,
            batch.batch_id,
            status,
            sha,
            files,
            rows,
            errors,
            batch.arrived_at,
            datetime.now(UTC).replace(tzinfo=None),
            message,
        ),
    )


@dataclass(frozen=True)
class Spooled:
    """A batch decoded into a CSV spool file, or the reason it is refused."""

    path: str | None
    sha: str | None
    files: int = 0
    rows: int = 0
    errors: int = 0
    problem: str | None = None


def spool_batch(spec: Source, batch: Batch, spool_dir: str | None = None) -> Spooled:
    """Check a complete batch against its manifest and decode it into a spool file.

    Pure file work, no warehouse: the loader runs it in worker processes, several
    batches at a time, while it writes the batches already decoded.
    """
    try:
        manifest, sha = read_manifest(batch)
    except (ManifestMismatch, OSError) as exc:
        return Spooled(None, None, problem=str(exc))
    fd, path = tempfile.mkstemp(prefix=f"{spec.name}-{batch.batch_id}-", suffix=".csv", dir=spool_dir)
    try:
        with open(fd, "w", encoding="utf-8", newline="") as fh:
            rows, errors = _spool_batch(spec, batch, manifest, fh)
    except (ManifestMismatch, OSError) as exc:
        os.unlink(path)
        return Spooled(None, sha, len(manifest), problem=str(exc))
    except BaseException:
        os.unlink(path)
        raise
    return Spooled(path, sha, len(manifest), rows, errors)


def write_batch(
    wh: Warehouse, spec: Source, batch: Batch, spooled: Spooled, previous_sha: str | None
) -> BatchResult:
    """Write a spooled batch in one transaction (replacing any earlier copy), or refuse it."""
    if spooled.path is None:
        return _refuse(wh, spec, batch, spooled.sha, spooled.problem or "unreadable", previous_sha)
    schema = wh.target.landing_schema
    try:
        with wh.transaction():
            wh.execute(f"delete from {schema}.{spec.table} where batch_id = %s", (batch.batch_id,))
            wh.copy_csv(f"{schema}.{spec.table}", spec.columns, Path(spooled.path))
            status = "replaced" if previous_sha is not None else "loaded"
            message = "manifest changed since the last load; batch replaced" if previous_sha else ""
            _record(
                wh, spec, batch, "loaded", spooled.sha, spooled.files, spooled.rows, spooled.errors, message
            )
    finally:
        os.unlink(spooled.path)
    return BatchResult(batch.batch_id, status, spooled.rows, spooled.errors, message)


def _spool_dir() -> str | None:
    return os.environ.get("DAYCLOSE_SPOOL_DIR")


def load_workers() -> int:
    """Decoding processes: DAYCLOSE_LOAD_WORKERS, else one per CPU (at most 4); 1 decodes inline."""
    configured = os.environ.get("DAYCLOSE_LOAD_WORKERS")
    if configured:
        if not configured.strip().isdigit():
            raise ValueError(f"DAYCLOSE_LOAD_WORKERS={configured!r}: expected a whole number (1: no workers)")
        return max(1, int(configured))
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(cpus or 1, 4))


def _load_in_order(
    wh: Warehouse, spec: Source, todo: list[tuple[Batch, str | None]]
) -> Iterator[BatchResult]:
    """Load batches oldest first; decode ahead in worker processes when there are several."""
    workers = min(load_workers(), len(todo))
    # one spool folder per load, removed at the end whatever happened (a worker killed half
    # way through a file, a failed write, a cancelled run)
    spool_dir = tempfile.mkdtemp(prefix=f"dayclose-{spec.name}-", dir=_spool_dir())
    # spawn, not fork: the parent holds a warehouse connection (and DuckDB its threads)
    spawn = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(workers, mp_context=spawn) if workers > 1 else None
    queue: deque[tuple[Batch, str | None, Future[Spooled] | None]] = deque()
    items = iter(todo)

    def submit() -> None:
        item = next(items, None)
        if item is None:
            return
        future = None
        if pool is not None:
            with contextlib.suppress(BrokenProcessPool):  # then decoded here, at its turn
                future = pool.submit(spool_batch, spec, item[0], spool_dir)
        queue.append((*item, future))

    try:
        for _ in range(workers + 1):  # bounded look-ahead: workers + 1 batches decoded ahead
            submit()
        while queue:
            batch, previous, future = queue.popleft()
            # no worker, or it could not start (a script without an `if __name__ == "__main__":`
            # guard, under spawn) or died: decode the batch in this process
            spooled = _decoded(future) or spool_batch(spec, batch, spool_dir)
            submit()
            yield write_batch(wh, spec, batch, spooled, previous)
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        shutil.rmtree(spool_dir, ignore_errors=True)


def _decoded(future: Future[Spooled] | None) -> Spooled | None:
    """A worker's result; None when there is no worker or the pool broke."""
    if future is None:
        return None
    try:
        return future.result()
    except BrokenProcessPool:
        return None


def _refuse(
    wh: Warehouse, spec: Source, batch: Batch, sha: str | None, reason: str, previous_sha: str | None
) -> BatchResult:
    message = f"{spec.name} batch arrived={batch.batch_id} refused: {reason}"
    if previous_sha is not None:
        # a bad re-delivery of a batch loaded before: keep the loaded version and its ledger row
        return BatchResult(batch.batch_id, "refused", message=message + "; the version loaded before stays")
    with wh.transaction():
        _record(wh, spec, batch, "refused", sha, 0, 0, 0, message)
    return BatchResult(batch.batch_id, "refused", message=message)


def load_source(
    wh: Warehouse,
    spec: Source,
    landing: Path,
    as_of: datetime,
    progress: Callable[[str], None] | None = None,
    recheck_days: int | None = RECHECK_DAYS,
) -> LoadReport:
    """Load every complete, not yet loaded batch of `spec` that had arrived by `as_of`.

    A loaded batch whose manifest changed (an upstream re-delivery) is replaced; manifests
    are re-read for the batches of the last `recheck_days` days (None: all), so the
    nightly cost does not grow with the landing's history.
    """
    started = time.monotonic()
    ensure_landing(wh)
    report = LoadReport(spec.name, as_of)
    batches, report.problems = discover(landing, spec.name, as_of)
    loaded = {
        batch_id: sha
        for batch_id, sha in wh.query(
            f"select batch_id, manifest_sha256 from {wh.target.landing_schema}.load_ledger "
            "where source_name = %s and status = 'loaded'",
            (spec.name,),
        )
    }
    todo: list[tuple[Batch, str | None]] = []
    for batch in batches:
        if not batch.marker.exists():
            report.waiting.append(batch.batch_id)
            continue
        previous = loaded.get(batch.batch_id)
        settled = recheck_days is not None and batch.arrived_at < as_of - timedelta(days=recheck_days)
        if previous is not None and (settled or previous == marker_sha(batch)):
            report.already_loaded += 1
            continue
        todo.append((batch, previous))
    with _duckdb_memory_limit(wh), contextlib.closing(_load_in_order(wh, spec, todo)) as results:
        for result in results:
            report.results.append(result)
            if progress:
                progress(f"{spec.name} arrived={result.batch_id}: {result.status} {result.rows} rows")
    if wh.kind == "postgres" and report.loaded:
        wh.execute(f"analyze {wh.target.landing_schema}.{spec.table}")  # plans for the new rows
    report.seconds = time.monotonic() - started
    return report


@contextlib.contextmanager
def _duckdb_memory_limit(wh: Warehouse) -> Iterator[None]:
    """Bound DuckDB's buffer pool while loading (DAYCLOSE_LOADER_MEMORY_LIMIT, default 1GB).

    DuckDB may otherwise cache up to 80% of RAM of the table it appends to; the loader
    streams, so it needs little. The limit is the database's, reset after the load.
    """
    if wh.kind != "duckdb":
        yield
        return
    limit = os.environ.get("DAYCLOSE_LOADER_MEMORY_LIMIT", "1GB")
    if not re.fullmatch(r"\d+(\.\d+)?\s*[KMGT]i?B", limit, re.IGNORECASE):
        raise ValueError(f"DAYCLOSE_LOADER_MEMORY_LIMIT={limit!r}: expected a size such as 1GB or 512MB")
    wh.execute(f"set memory_limit = '{limit}'")
    try:
        yield
    finally:
        with contextlib.suppress(Exception):  # never hide the load's own error
            wh.execute("reset memory_limit")
