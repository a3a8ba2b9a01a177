"""The landing tables, and the engines' own bulk readers putting a file's raw lines into them.

Each source has one raw table in `<schema>_landing` with one row per line of every loaded
batch: the batch, the file, the 1-based line number and the line's text exactly as it came
(`raw_line`; a line whose bytes are not text, invalid UTF-8 or a NUL, keeps its exact bytes
in `raw_line_hex` and a readable copy in `raw_line`, with `byte_error` saying why). Nothing
is decoded here: the dbt models decode and validate (models/intermediate/).

- DuckDB reads the file itself: `read_csv` of one text column, with a delimiter and no
  quote, escape or null marker that could alter a line, numbered by `row_number() over ()`
  (DuckDB keeps a single file's order for an empty OVER clause).
- Spark reads the files with its `text` source (lines split at \\n only) and numbers each
  file's lines in the order of the file (its splits' offsets, then the order within a split);
  the raw table is partitioned by batch, and a group of batches is written by one
  `insert overwrite` of their partitions, which replaces an earlier version of a batch whole.
  The lines Python sanitized are put back in the same statement (a join), since a parquet
  table takes no update.
- Postgres takes it by `COPY ... (format csv)` with delimiter \\x01 and quote \\x02; the
  batch, file and line number come from column defaults (transaction-local settings and a
  sequence reset for each file: one sequence per writer), so a line is never touched by Python.

The loader writes WRITERS groups of batches at once, each on its own connection: the line
numbering is one ordered pass on one core in both engines.

Files that are not clean for these readers (dayclose.loader.prepass) are read from a
sanitized copy, and the replaced lines are put back exactly afterwards.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dayclose.warehouse import Warehouse

LEDGER_COLUMNS = """
    source_name varchar not null,
    batch_id varchar not null,
    status varchar not null,
    manifest_sha256 varchar,
    files integer,
    rows_loaded bigint,
    byte_errors bigint,
    batch_arrived_at timestamp,
    loaded_at timestamp not null,
    message varchar,
    primary key (source_name, batch_id)
"""

# Spark: no constraints or keys on parquet; the ledger partitioned by source (rewritten whole
# for the source's new rows), the raw lines by batch (a batch's partition overwritten whole)
SPARK_LEDGER_COLUMNS = """
    batch_id string,
    status string,
    manifest_sha256 string,
    files int,
    rows_loaded bigint,
    byte_errors bigint,
    batch_arrived_at timestamp,
    loaded_at timestamp,
    message string,
    source_name string
"""
SPARK_LEDGER_ORDER = [c.split()[0] for c in SPARK_LEDGER_COLUMNS.strip().split(",\n")]

DUCKDB_LINES = (
    "columns = {'line': 'VARCHAR'}, header = false, delim = e'\\x01', quote = '', escape = '', "
    "auto_detect = false, new_line = '\\n', max_line_size = 20000000, force_not_null = ['line']"
)
# groups of batches written at once, each in its own transaction on its own connection
# (dayclose.loader.load). Both engines number a read's lines in one ordered pass on one core:
# DuckDB `row_number() over ()`, Postgres a sequence (one per writer), so two writers keep
# two cores busy.
WRITERS = 2
POSTGRES_COPY = (
    "copy {table} (raw_line) from stdin with (format csv, delimiter e'\\x01', quote e'\\x02', "
    "force_not_null (raw_line))"
)


class BatchUnreadable(ValueError):
    """The engine did not read back all the lines of a batch: the batch is refused, not half loaded."""


def ensure_landing(wh: Warehouse, tables: Sequence[str]) -> None:
    """The landing schema, the load ledger and a raw table per source (idempotent)."""
    schema = wh.target.landing_schema
    wh.execute(f"create schema if not exists {schema}")
    if wh.kind == "spark":
        wh.execute(
            f"create table if not exists {schema}.load_ledger ({SPARK_LEDGER_COLUMNS}) "
            "using parquet partitioned by (source_name)"
        )
        for table in tables:
            wh.execute(
                f"create table if not exists {schema}.{table} (file_name string, line_number bigint, "
                "raw_line string, raw_line_hex string, byte_error string, batch_id string) "
                "using parquet partitioned by (batch_id)"
            )
        return
    wh.execute(f"create table if not exists {schema}.load_ledger ({LEDGER_COLUMNS})")
    numbering = _postgres_line_numbering(wh, schema) if wh.kind == "postgres" else ""
    compression = _raw_line_compression(wh)  # the file's, the same for every table
    for table in tables:
        if wh.kind == "postgres":
            batch = "default current_setting('dayclose.batch_id')"
            file = "default current_setting('dayclose.file_name')"
            line = f"default {numbering}"
        else:
            batch = file = line = ""
        wh.execute(
            f"create table if not exists {schema}.{table} (\n"
            f"    batch_id varchar not null {batch},\n"
            f"    file_name varchar not null {file},\n"
            f"    line_number bigint not null {line},\n"
            f"    raw_line varchar not null{compression},\n"
            "    raw_line_hex varchar,\n"
            "    byte_error varchar\n)"
        )
        if wh.kind == "postgres":
            _set_line_numbering(wh, schema, table, numbering)
            # the models read new batches by batch_id. Batches arrive in order, so a BRIN index
            # (block ranges) finds them at next to no cost a line; a btree cost the loader 20%.
            wh.execute(f"drop index if exists {schema}.{table}_batch_idx")  # the btree of before
            wh.execute(
                f"create index if not exists {table}_batch_brin on {schema}.{table} using brin (batch_id)"
            )


def _raw_line_compression(wh: Warehouse) -> str:
    """DuckDB: the raw lines compressed by zstd where the file's storage format has it for
    text (v1.2.0 and later; DuckDB 2.0 makes new files in v2.0.0, 1.x in v1.0.0, where the
    column keeps DuckDB's own choice). Its choice, per segment (dictionary and FSST), costs
    the load more than the lines' zstd, and makes a larger file; reading zstd back costs the
    build a few percent."""
    if wh.kind != "duckdb":
        return ""
    tags = wh.scalar("select tags from duckdb_databases() where database_name = current_database()")
    found = re.match(r"v(\d+)\.(\d+)", (tags or {}).get("storage_version", ""))
    return " using compression zstd" if found and (int(found[1]), int(found[2])) >= (1, 2) else ""


def _line_sequence(schema: str, writer: int) -> str:
    """The Postgres sequence that numbers the lines a writer copies (the first: `line_numbers`)."""
    return f"{schema}.line_numbers" + (f"_{writer}" if writer else "")


def _postgres_line_numbering(wh: Warehouse, schema: str) -> str:
    """The sequences, one per writer, and the default that picks the copying writer's
    (`dayclose.writer`, set per transaction; unset: the first writer's). A `case` of
    constant sequence names: a name cast to a sequence for each line cost 30% more."""
    for writer in range(WRITERS):
        wh.execute(f"create sequence if not exists {_line_sequence(schema, writer)}")
    branches = " ".join(f"when '{w}' then nextval('{_line_sequence(schema, w)}')" for w in range(1, WRITERS))
    fallback = f"nextval('{_line_sequence(schema, 0)}')"
    return (
        f"(case current_setting('dayclose.writer', true) {branches} else {fallback} end)"
        if branches
        else fallback
    )


def _set_line_numbering(wh: Warehouse, schema: str, table: str, numbering: str) -> None:
    """Give a raw table built before (one sequence for every writer) the default of now."""
    current = wh.scalar(
        "select column_default from information_schema.columns "
        "where table_schema = %s and table_name = %s and column_name = 'line_number'",
        (schema, table),
    )
    if f"line_numbers_{WRITERS - 1}'" not in (current or ""):  # shown with its schema or without
        wh.execute(f"alter table {schema}.{table} alter column line_number set default {numbering}")


@dataclass(frozen=True)
class FileToRead:
    """A clean file of a batch (or its sanitized copy), and its exact number of lines."""

    batch_id: str
    file_name: str
    path: Path
    lines: int


def ingest_files(wh: Warehouse, table: str, files: Sequence[FileToRead]) -> dict[str, int]:
    """Append every line of the files to the raw table, each file's lines numbered from 1;
    the lines the engine wrote, per batch (for the caller to hold against the manifest).

    DuckDB reads all of them in one `read_csv` (the per-statement cost, not the lines, is
    what a small batch pays): `row_number() over ()` numbers the lines of the whole scan in
    file order (the order a single file's lines already rely on), and each file's first
    number, known from its line count, is taken off by a join on the file name. Postgres
    takes each file by its own COPY, which says how many rows it wrote, numbered by the
    sequence of the connection's writer (`wh.writer`).
    """
    relation = f"{wh.target.landing_schema}.{table}"
    files = [f for f in files if f.lines]
    written: dict[str, int] = {}
    if not files:
        return written
    if wh.kind == "duckdb":
        values, params, first = [], [], 0
        for f in files:
            values.append("(?, ?, ?, ?)")
            params += [str(f.path), f.batch_id, f.file_name, first]
            first += f.lines
        wh.execute(
            f"insert into {relation} (batch_id, file_name, line_number, raw_line) "
            f"with scanned as (select filename, line, row_number() over () as n "
            f"from read_csv(?, {DUCKDB_LINES}, filename = true)), "
            f"files (path, batch_id, file_name, first) as (values {', '.join(values)}) "
            "select files.batch_id, files.file_name, scanned.n - files.first, scanned.line "
            "from scanned inner join files on scanned.filename = files.path",
            [[str(f.path) for f in files], *params],
        )
        ids = sorted({f.batch_id for f in files})
        among = wh.placeholders(len(ids))
        counted = f"select batch_id, count(*) from {relation} where batch_id in ({among}) group by 1"
        return dict(wh.query(counted, ids))
    sequence = _line_sequence(wh.target.landing_schema, wh.writer)
    for f in files:
        wh.execute(
            "select set_config('dayclose.batch_id', %s, true), set_config('dayclose.file_name', %s, true), "
            f"set_config('dayclose.writer', %s, true), setval('{sequence}', 1, false)",
            (f.batch_id, f.file_name, str(wh.writer)),
        )
        with open(f.path, "rb") as fh:
            rows = wh.copy_from(POSTGRES_COPY.format(table=relation), fh)
        written[f.batch_id] = written.get(f.batch_id, 0) + rows
    return written


def ingest_files_spark(
    wh: Warehouse, table: str, files: Sequence[FileToRead], fixes: Sequence[tuple[str, str, int, bytes]]
) -> tuple[dict[str, int], dict[str, int]]:
    """Spark: write the batches of `files` into their partitions of the raw table, each file's
    lines numbered from 1, with the original bytes of the sanitized lines (`fixes`: batch,
    file, line number, bytes) put back in the same statement; the lines written per batch,
    and per batch the lines that are not text.

    Spark's text source splits lines at \\n only (a \\r stays in its line) and gives each line
    its file and the offset of its split. A split's lines come in the file's order with
    consecutive ids (monotonically_increasing_id: the task's number, then the row's place in
    the task), so a line's number is the lines of its file's earlier splits plus its id less its
    split's first id, plus one: from a count per split, without sorting the lines."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    spark = wh.session
    relation = f"{wh.target.landing_schema}.{table}"
    files = [f for f in files if f.lines]
    if not files:
        return {}, {}
    located = [(str(f.path.absolute()), f.batch_id, f.file_name) for f in files]
    scanned = (
        spark.read.option("lineSep", "\n")
        .text([_literal_path(path) for path, _, _ in located])
        .select(
            F.col("value").alias("raw_line"),
            # the path as Spark writes it (a URI, percent-encoded, `+` left as it is)
            F.expr(
                "regexp_replace(url_decode(regexp_replace(_metadata.file_path, '[+]', '%2B')), '^file:', '')"
            ).alias("path"),
            F.col("_metadata.file_block_start").alias("split_start"),
            F.monotonically_increasing_id().alias("seq"),
        )
    )
    scanned.createOrReplaceTempView("dayclose_scanned")
    text = StringType()
    spark.createDataFrame(
        located, StructType([StructField(n, text) for n in ("path", "batch_id", "file_name")])
    ).createOrReplaceTempView("dayclose_files")
    fixed, errors = [], {}
    for batch_id, file_name, number, original in fixes:
        problem = _byte_error(original)
        readable = original.decode("utf-8", errors="replace").replace("\x00", "\ufffd")
        fixed.append((batch_id, file_name, number, readable, original.hex() if problem else None, problem))
        errors[batch_id] = errors.get(batch_id, 0) + (problem is not None)
    fix_schema = StructType(
        [
            StructField("batch_id", text),
            StructField("file_name", text),
            StructField("line_number", LongType()),
            StructField("raw_line", text),
            StructField("raw_line_hex", text),
            StructField("byte_error", text),
        ]
    )
    spark.createDataFrame(fixed, fix_schema).createOrReplaceTempView("dayclose_put_back")
    spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
    wh.execute(
        "with splits as (select path, split_start, min(seq) as first_seq, count(*) as split_lines "
        "from dayclose_scanned group by path, split_start), "
        "numbered_splits as (select path, split_start, first_seq, coalesce(sum(split_lines) over "
        "(partition by path order by split_start rows between unbounded preceding and 1 preceding), 0) "
        "as earlier_lines from splits), "
        # the splits and files joined to each line where it is read (no shuffle of the lines)
        "lines as (select /*+ broadcast(splits, files) */ files.batch_id, files.file_name, scanned.raw_line, "
        "splits.earlier_lines + scanned.seq - splits.first_seq + 1 as line_number "
        "from dayclose_scanned as scanned "
        "inner join numbered_splits as splits "
        "on scanned.path = splits.path and scanned.split_start = splits.split_start "
        "inner join dayclose_files as files on scanned.path = files.path) "
        f"insert overwrite table {relation} partition (batch_id) "
        "select lines.file_name, lines.line_number, coalesce(fix.raw_line, lines.raw_line), "
        "fix.raw_line_hex, fix.byte_error, lines.batch_id "
        "from lines left join dayclose_put_back as fix on fix.batch_id = lines.batch_id "
        "and fix.file_name = lines.file_name and fix.line_number = lines.line_number"
    )
    for view in ("dayclose_scanned", "dayclose_files", "dayclose_put_back"):
        spark.catalog.dropTempView(view)
    ids = sorted({f.batch_id for f in files})
    among = wh.placeholders(len(ids))
    counted = f"select batch_id, count(*) from {relation} where batch_id in ({among}) group by 1"
    return dict(wh.query(counted, ids)), errors


def _literal_path(path: str) -> str:
    """A path for Spark's reader, which expands Hadoop's glob characters: those escaped."""
    return re.sub(r"([\\\[\]{}*?])", r"\\\1", path)


def put_back(
    wh: Warehouse,
    table: str,
    batch_id: str,
    file_name: str,
    replaced: list[tuple[int, bytes]],
    spool: Path,
) -> int:
    """Put the original bytes of sanitized lines back; returns how many are not text.

    The lines go through a CSV of hex text (nothing in it can be misread), into a temporary
    table, and one UPDATE joins them in. A line that is valid UTF-8 without NUL is restored
    as text exactly; any other keeps a readable copy in raw_line and its bytes in hex.
    """
    errors = 0
    with open(spool, "w", newline="", encoding="ascii") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        for number, original in replaced:
            problem = _byte_error(original)
            text = original.decode("utf-8", errors="replace").replace("\x00", "\ufffd")
            writer.writerow(
                [number, text.encode("utf-8").hex(), original.hex() if problem else "", problem or ""]
            )
            errors += problem is not None
    relation = f"{wh.target.landing_schema}.{table}"
    wh.execute("drop table if exists dayclose_put_back")
    wh.execute(
        "create temporary table dayclose_put_back (line_number bigint, text_hex varchar, "
        "bytes_hex varchar, byte_error varchar)"
    )
    if wh.kind == "duckdb":
        # DuckDB's reader returns no row, silently, for a line over its max_line_size
        longest = 4 * max(len(original) for _, original in replaced) + 1024
        wh.execute(
            "insert into dayclose_put_back select * from read_csv(?, header = false, auto_detect = false, "
            "columns = {'line_number': 'BIGINT', 'text_hex': 'VARCHAR', 'bytes_hex': 'VARCHAR', "
            f"'byte_error': 'VARCHAR'}}, max_line_size = {max(longest, 2_000_000)})",
            (str(spool),),
        )
        text = "decode(unhex(fix.text_hex))"
    else:
        with open(spool, "rb") as fh:
            wh.copy_from("copy dayclose_put_back from stdin with (format csv)", fh)
        text = "convert_from(decode(fix.text_hex, 'hex'), 'UTF8')"
    staged = wh.scalar("select count(*) from dayclose_put_back")
    if staged != len(replaced):
        raise RuntimeError(
            f"{staged} of {len(replaced)} sanitized lines of {file_name} read back for their bytes"
        )
    wh.execute(
        f"update {relation} set raw_line = {text}, raw_line_hex = nullif(fix.bytes_hex, ''), "
        "byte_error = nullif(fix.byte_error, '') from dayclose_put_back as fix "
        f"where {relation}.batch_id = %s and {relation}.file_name = %s "
        f"and {relation}.line_number = fix.line_number",
        (batch_id, file_name),
    )
    wh.execute("drop table dayclose_put_back")
    return errors


def _byte_error(line: bytes) -> str | None:
    """Why a line's bytes cannot be kept as text, or None."""
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"not valid UTF-8 (byte {exc.start + 1} is 0x{line[exc.start]:02x})"
    nul = line.find(b"\x00")
    if nul >= 0:
        return f"contains a NUL byte (byte {nul + 1})"
    return None
