"""The landing contract and the one loader, parameterised by source.

Layout: <landing>/<source>/arrived=YYYY-MM-DDTHH/part-NNNN.jsonl, completed by a
_SUCCESS manifest: {"source": ..., "batch": ..., "files": [{"name", "rows", "sha256"}]}.

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
import json
import multiprocessing
import os
import re
import shutil
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from pathlib import Path

from flows.warehouse import Warehouse

MARKER = "_SUCCESS"
RECHECK_DAYS = 35  # loaded batches younger than this are checked for a changed manifest
BATCH_DIR = re.compile(r"^arrived=(\d{4}-\d{2}-\d{2}T\d{2})$")
NULL = "\\N"


# -- source specifications ---------------------------------------------------------------
@dataclass(frozen=True)
class Field:
    """One field of a landing line: its JSON name and how it is decoded."""

    name: str
    kind: str  # text | timestamp | decimal | integer | number

    @property
    def sql_type(self) -> str:
        return {
            "text": "varchar",
            "timestamp": "timestamp",
            "decimal": "decimal(18, 2)",
            "integer": "bigint",
            "number": "double precision",
        }[self.kind]


@dataclass(frozen=True)
class SourceSpec:
    """A landing source: where its batches live, its raw table, its fields."""

    name: str
    table: str
    fields: tuple[Field, ...]
    event_time: str
    arrival_time: str = "received_at"

    @property
    def columns(self) -> list[tuple[str, str]]:
        meta = [
            ("batch_id", "varchar"),
            ("batch_arrived_at", "timestamp"),
            ("batch_completed_at", "timestamp"),
            ("file_name", "varchar"),
            ("line_number", "integer"),
            ("raw_line", "varchar"),
            ("decode_error", "varchar"),
        ]
        return meta + [(f.name, f.sql_type) for f in self.fields]


SALES = SourceSpec(
    name="sales",
    table="sale_lines",
    fields=(
        Field("event_id", "text"),
        Field("shop_id", "text"),
        Field("sold_at", "timestamp"),
        Field("received_at", "timestamp"),
        Field("amount", "decimal"),
    ),
    event_time="sold_at",
)

UNITS = SourceSpec(
    name="units",
    table="unit_lines",
    fields=(
        Field("line_id", "text"),
        Field("plc_seq", "integer"),
        Field("sku", "text"),
        Field("event_at", "timestamp"),
        Field("received_at", "timestamp"),
        Field("verdict", "text"),
        Field("fill_level_ml", "number"),
        Field("capper_torque_nm", "number"),
        Field("temperature_c", "number"),
    ),
    event_time="event_at",
)

SOURCES: dict[str, SourceSpec] = {SALES.name: SALES, UNITS.name: UNITS}

# Decoded amounts must fit decimal(18, 2); business limits ("absurd amount") are dbt's.
MAX_DECIMAL = Decimal("1e15")


# -- decoding ------------------------------------------------------------------------------
_CANONICAL_DECIMAL = re.compile(r"-?[0-9]{1,15}(\.[0-9]{1,2})?")


def _timestamp(value: object) -> str:
    # fast path for the common canonical form 'YYYY-MM-DDTHH:MM:SS[.ffffff]Z'
    if isinstance(value, str) and value[-1:] == "Z" and len(value) in (20, 24, 27) and value[10] == "T":
        try:
            datetime.fromisoformat(value[:-1])  # validates the calendar and clock
            return value[:10] + " " + value[11:-1]
        except ValueError:
            raise ValueError(f"unparsable timestamp {value!r}") from None
    if not isinstance(value, str):
        raise ValueError(f"not an RFC 3339 string: {value!r}")
    text = value[:-1] + "+00:00" if value.endswith(("Z", "z")) else value
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"unparsable timestamp {value!r}") from None
    if "T" not in text.upper() or parsed.tzinfo is None:
        raise ValueError(f"not an RFC 3339 timestamp with a time zone: {value!r}")
    return parsed.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


def _decimal(value: object) -> str:
    if isinstance(value, str) and _CANONICAL_DECIMAL.fullmatch(value):
        return value
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"not a decimal number: {value!r}")
    try:
        number = Decimal(str(value).strip())
    except InvalidOperation:
        raise ValueError(f"not a decimal number: {value!r}") from None
    if not number.is_finite() or abs(number) >= MAX_DECIMAL:
        raise ValueError(f"out of range: {value!r}")
    if number != number.quantize(Decimal("0.01")):
        raise ValueError(f"more than 2 decimal places: {value!r}")
    return str(number)


def _integer(value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"not an integer: {value!r}")
    if not -(2**63) <= value < 2**63:
        raise ValueError(f"out of range: {value!r}")
    return str(value)


def _number(value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"not a number: {value!r}")
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"not a finite number: {value!r}")
    return repr(float(value))


def _text(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"not a non-empty string: {value!r}")
    return value


DECODERS: dict[str, Callable[[object], str]] = {
    "text": _text,
    "timestamp": _timestamp,
    "decimal": _decimal,
    "integer": _integer,
    "number": _number,
}


def decode_line(spec: SourceSpec, text: str) -> tuple[list[str], str | None]:
    """Typed values (as load text, NULL as \\N) and the decode error, if any."""
    nulls = [NULL] * len(spec.fields)
    if not text.strip():
        return nulls, "empty line"
    try:
        obj = json.loads(text)
    except ValueError as exc:
        return nulls, f"invalid JSON: {getattr(exc, 'msg', exc)}"
    if not isinstance(obj, dict):
        return nulls, "not a JSON object"
    values: list[str] = []
    errors: list[str] = []
    for f in spec.fields:
        raw = obj.get(f.name)
        if raw is None:
            errors.append(f"missing field {f.name}")
            values.append(NULL)
            continue
        try:
            values.append(DECODERS[f.kind](raw))
        except ValueError as exc:
            errors.append(f"{f.name}: {exc}")
            values.append(NULL)
    return values, ("; ".join(errors) if errors else None)


# -- batches and manifests ---------------------------------------------------------------
@dataclass(frozen=True)
class Batch:
    source: str
    batch_id: str  # YYYY-MM-DDTHH, the arrival hour
    path: Path

    @property
    def arrived_at(self) -> datetime:
        return datetime.strptime(self.batch_id, "%Y-%m-%dT%H")

    @property
    def completed_at(self) -> datetime:
        """A batch holds one arrival hour, so it can be complete only when the hour is over."""
        return self.arrived_at + timedelta(hours=1)

    @property
    def marker(self) -> Path:
        return self.path / MARKER


class ManifestMismatch(ValueError):
    """A batch's files disagree with its _SUCCESS manifest."""


def discover(landing: Path, source: str, as_of: datetime) -> tuple[list[Batch], list[str]]:
    """Batches whose arrival hour had ended by `as_of`, oldest first, and folder problems."""
    root = landing / source
    batches: list[Batch] = []
    problems: list[str] = []
    if not root.is_dir():
        return batches, problems
    for entry in sorted(root.iterdir()):
        if not entry.is_dir():
            continue
        m = BATCH_DIR.match(entry.name)
        if not m:
            problems.append(f"{entry}: not a batch folder (expected arrived=YYYY-MM-DDTHH)")
            continue
        try:
            batch = Batch(source, m.group(1), entry)
            if batch.completed_at <= as_of:
                batches.append(batch)
        except ValueError:
            problems.append(f"{entry}: not a valid arrival hour")
    return batches, problems


def read_manifest(batch: Batch) -> tuple[dict[str, dict], str]:
    """The manifest's files by name, and the manifest's own sha256."""
    blob = batch.marker.read_bytes()
    try:
        doc = json.loads(blob)
        files = {f["name"]: {"rows": int(f["rows"]), "sha256": str(f["sha256"])} for f in doc["files"]}
    except (ValueError, KeyError, TypeError) as exc:
        raise ManifestMismatch(f"_SUCCESS is not a valid manifest ({exc})") from None
    if doc.get("source", batch.source) != batch.source or doc.get("batch", batch.batch_id) != batch.batch_id:
        raise ManifestMismatch(f"_SUCCESS names source {doc.get('source')!r} batch {doc.get('batch')!r}")
    return files, hashlib.sha256(blob).hexdigest()


def data_files(batch: Batch) -> list[str]:
    return sorted(p.name for p in batch.path.iterdir() if p.is_file() and p.name != MARKER)


# -- the loader ----------------------------------------------------------------------------
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


def _spool_batch(spec: SourceSpec, batch: Batch, manifest: dict[str, dict], spool) -> tuple[int, int]:
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
    spec: SourceSpec,
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


def spool_batch(spec: SourceSpec, batch: Batch, spool_dir: str | None = None) -> Spooled:
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
    wh: Warehouse, spec: SourceSpec, batch: Batch, spooled: Spooled, previous_sha: str | None
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
    wh: Warehouse, spec: SourceSpec, todo: list[tuple[Batch, str | None]]
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
    wh: Warehouse, spec: SourceSpec, batch: Batch, sha: str | None, reason: str, previous_sha: str | None
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
    spec: SourceSpec,
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
        if previous is not None and (settled or previous == _marker_sha(batch)):
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


def _marker_sha(batch: Batch) -> str:
    return hashlib.sha256(batch.marker.read_bytes()).hexdigest()


def pending_summary(batches: Iterable[str]) -> str:
    items = list(batches)
    if len(items) <= 4:
        return ", ".join(items)
    return f"{items[0]} ... {items[-1]} ({len(items)} batches)"
