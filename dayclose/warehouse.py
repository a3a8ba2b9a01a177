"""A small, uniform connection to the warehouse: DuckDB, Postgres or Spark.

Only the loader, the run lock and the summaries talk to the warehouse directly;
everything else goes through dbt.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Iterator, Sequence
from datetime import date, datetime
from pathlib import Path
from typing import IO, Any

from dayclose.errors import DaycloseError, Unavailable, WarehouseBusy
from dayclose.settings import Target, postgres_env, postgres_where, spark_settings


class Warehouse:
    """A connection with `%s` parameters on every engine.

    Spark: the in-process SparkSession that dbt-spark uses too (spark_session), with no
    transactions (`transaction` only groups statements; the loader and the publication make
    their writes all-or-nothing by other means: a partition overwritten whole, a view swapped)."""

    def __init__(self, target: Target):
        self.target = target
        self.kind = target.name
        self.writer = 0  # which of the loader's connections writing at once (sibling)
        if self.kind == "duckdb":
            import duckdb

            assert target.duckdb_path is not None
            target.duckdb_path.parent.mkdir(parents=True, exist_ok=True)
            try:
                self._conn = duckdb.connect(str(target.duckdb_path))
                self._conn.execute("set enable_progress_bar = false")  # it would print into summaries
            except duckdb.IOException as exc:  # the file lock of another process
                raise WarehouseBusy(
                    f"the DuckDB file {target.duckdb_path} is in use by another process "
                    f"(another dayclose run?): {exc}"
                ) from exc
        elif self.kind == "spark":
            self._conn = spark_session(target)
        else:
            self._conn = postgres_connect("dayclose")
            self._conn.autocommit = True

    def sibling(self, writer: int) -> Warehouse:
        """Another connection to the same warehouse, for work in another thread at the same time
        (DuckDB: a connection to the same open database; Postgres: a new session)."""
        twin = object.__new__(Warehouse)
        twin.target, twin.kind, twin.writer = self.target, self.kind, writer
        if self.kind == "duckdb":
            twin._conn = self._conn.cursor()
            twin._conn.execute("set enable_progress_bar = false")
        elif self.kind == "spark":
            twin._conn = self._conn  # one session per process
        else:
            twin._conn = postgres_connect("dayclose")
            twin._conn.autocommit = True
        return twin

    @property
    def session(self):
        """Spark: the SparkSession (for its DataFrame reader)."""
        return self._conn

    # -- statements -----------------------------------------------------------------
    def _sql(self, sql: str) -> str:
        return sql.replace("%s", "?") if self.kind in ("duckdb", "spark") else sql

    def _spark(self, sql: str, params: Sequence[Any]):
        """A Spark DataFrame of the statement (commands run at once), `%s` parameters bound as
        `?`, but times and days, written as typed literals: Spark's own conversion of a Python
        datetime would read it in this process's time zone."""
        parts = sql.split("%s")
        if len(parts) != len(params) + 1:
            raise ValueError(f"{len(params)} parameters for {len(parts) - 1} markers: {sql}")
        text, args = parts[0], []
        for param, rest in zip(params, parts[1:], strict=True):
            if isinstance(param, datetime):
                text += f"timestamp'{param.isoformat(sep=' ')}'"
            elif isinstance(param, date):
                text += f"date'{param.isoformat()}'"
            else:
                text += "?"
                args.append(param)
            text += rest
        return self._conn.sql(text, args=args or None)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        if self.kind == "spark":
            self._spark(sql, params).collect()
        elif self.kind == "duckdb":
            self._conn.execute(self._sql(sql), list(params))
        else:
            with self._conn.cursor() as cur:
                cur.execute(sql, tuple(params))

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        if self.kind == "spark":
            return [tuple(row) for row in self._spark(sql, params).collect()]
        if self.kind == "duckdb":
            return self._conn.execute(self._sql(sql), list(params)).fetchall()
        with self._conn.cursor() as cur:
            cur.execute(sql, tuple(params))
            return cur.fetchall()

    def columns_and_rows(self, sql: str) -> tuple[list[str], list[tuple]]:
        """Column names and rows of a query."""
        if self.kind == "spark":
            frame = self._spark(sql, ())
            return list(frame.columns), [tuple(row) for row in frame.collect()]
        if self.kind == "duckdb":
            cur = self._conn.execute(sql)
            return [d[0] for d in cur.description], cur.fetchall()
        with self._conn.cursor() as cur:
            cur.execute(sql)
            return [d[0] for d in cur.description], cur.fetchall()

    def regexp_extract(self, expression: str, pattern: str) -> str:
        """SQL: the first capture group of `pattern` in `expression` (null when it does not match)."""
        if self.kind == "duckdb":
            return f"nullif(regexp_extract({expression}, '{pattern}', 1), '')"
        if self.kind == "spark":  # a string literal's backslashes are escapes there
            return f"nullif(regexp_extract({expression}, '{pattern.replace(chr(92), chr(92) * 2)}', 1), '')"
        return f"substring({expression} from '{pattern}')"

    def delete(self, relation: str, where: str, params: Sequence[Any] = ()) -> None:
        """Delete the rows of `relation` where `where` holds. Spark's parquet tables take no
        delete: there the rows kept are copied aside and written back (not atomic; for the
        small bookkeeping tables only)."""
        if self.kind != "spark":
            self.execute(f"delete from {relation} where {where}", params)
            return
        aside = f"{relation}__kept"
        self.execute(f"drop table if exists {aside}")
        self.execute(
            f"create table {aside} using parquet as select * from {relation} where not ({where})", params
        )
        self.execute(f"insert overwrite table {relation} select * from {aside}")
        self.execute(f"drop table {aside}")

    def table_columns(self, columns: str) -> str:
        """A `create table`'s column list (Postgres' and DuckDB's types, constraints) in the
        engine's words: on Spark, parquet columns with no constraints or keys."""
        if self.kind != "spark":
            return f"({columns})"
        kept = []
        for column in columns.strip().split(",\n"):
            column = column.strip()
            if column.startswith("primary key"):
                continue
            column = column.replace(" not null", "").replace("double precision", "double")
            kept.append(re.sub(r"\bvarchar\b", "string", column))
        return "(" + ", ".join(kept) + ") using parquet"

    @staticmethod
    def placeholders(n: int) -> str:
        """`%s, %s, ...` for a list of n parameters (`in (...)`)."""
        return ", ".join(["%s"] * n)

    def scalar(self, sql: str, params: Sequence[Any] = ()) -> Any:
        rows = self.query(sql, params)
        return rows[0][0] if rows else None

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """All or nothing: on any exception the work of the block is rolled back. Spark has no
        transactions: there the block's statements run as they come."""
        if self.kind == "spark":
            yield
            return
        self.execute("begin")
        try:
            yield
        except BaseException:
            self.execute("rollback")
            raise
        self.execute("commit")

    @property
    def data_errors(self) -> tuple[type[Exception], ...]:
        """The engine's errors about the data a statement read (not about the engine or the connection)."""
        if self.kind == "duckdb":
            import duckdb

            return (duckdb.InvalidInputException, duckdb.ConversionException)
        if self.kind == "spark":  # its text reader takes any bytes
            return ()
        import psycopg2

        return (psycopg2.DataError,)

    def copy_from(self, sql: str, fileobj: IO[bytes]) -> int:
        """Postgres COPY ... FROM STDIN, streaming `fileobj` (its bytes go to the server as they
        are); the number of rows it wrote."""
        with self._conn.cursor() as cur:
            cur.copy_expert(sql, fileobj, size=1 << 20)
            return cur.rowcount

    # -- catalogue ------------------------------------------------------------------
    def relation_exists(self, schema: str, name: str) -> bool:
        if self.kind == "spark":
            if not self._conn.catalog.databaseExists(schema):
                return False
            return bool(self._conn.catalog.tableExists(f"{schema}.{name}"))
        return bool(
            self.scalar(
                "select count(*) from information_schema.tables where table_schema = %s and table_name = %s",
                (schema, name),
            )
        )

    def close(self) -> None:
        if self.kind == "spark":  # the process's session stays, for dbt and the next step
            return
        with contextlib.suppress(Exception):
            self._conn.close()

    def __enter__(self) -> Warehouse:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def spark_session(target: Target):
    """The process's SparkSession, with Hive's catalogue (an embedded Derby metastore) and the
    settings of profiles.yml.example's `spark` output (dayclose.settings.spark_settings):
    created here or by dbt-spark, whichever asks first, and shared (one JVM); Unavailable
    when pyspark or Java is missing."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise Unavailable("the spark target needs pyspark: pip install 'dayclose[spark]'") from None
    settings = spark_settings(target)
    target.spark_dir.mkdir(parents=True, exist_ok=True)
    builder = SparkSession.builder.enableHiveSupport()
    for key, value in settings.items():
        builder = builder.config(key, value)
    try:
        session = builder.getOrCreate()
    except Exception as exc:  # no Java, or a JVM that did not start
        detail = " ".join(str(exc).split())[:300]
        raise Unavailable(
            f"cannot start Spark ({settings['spark.master']}): {detail}; needs Java 17"
        ) from None
    running = session.conf.get("spark.sql.warehouse.dir")
    if running.removeprefix("file:").rstrip("/") != settings["spark.sql.warehouse.dir"].rstrip("/"):
        # a static setting: a process's Spark has one warehouse, from its start
        raise DaycloseError(
            f"this process's Spark runs on the warehouse {running}, not {settings['spark.sql.warehouse.dir']}"
        )
    session.sparkContext.setLogLevel("ERROR")
    return session


def postgres_connect(application_name: str):
    """A psycopg2 connection to the Postgres of the run (dayclose.settings.postgres_env: the
    libpq variables, else the defaults dbt's profile names too), or Unavailable naming it when
    nothing answers there."""
    import psycopg2

    env = postgres_env()
    try:
        return psycopg2.connect(
            "",
            host=env["PGHOST"],
            port=env["PGPORT"],
            user=env["PGUSER"],
            dbname=env["PGDATABASE"],
            application_name=application_name,
            connect_timeout=int(os.environ.get("PGCONNECT_TIMEOUT", "10")),
        )
    except psycopg2.OperationalError as exc:
        detail = " ".join(str(exc).split())
        raise Unavailable(
            f"cannot connect to Postgres at {postgres_where()}: {detail}; "
            "set PGHOST, PGPORT, PGUSER, PGPASSWORD and PGDATABASE"
        ) from None


# What libpq and the server say when a session ends under a statement (a failover, an admin's
# pg_terminate_backend, a restart), as psycopg2 and dbt's node messages carry it.
CONNECTION_LOST = (
    "terminating connection",
    "server closed the connection",
    "connection already closed",
    "connection not open",
    "could not receive data from server",
    "could not send data to server",
    "no connection to the server",
    "the database system is shutting down",
    "the database system is starting up",
    "ssl connection has been closed",
    "connection to server at",
)


def connection_lost(error: BaseException | str) -> bool:
    """Whether `error` (an exception, or a dbt node's message) says the Postgres session
    ended: a connection exception (SQLSTATE class 08), the server's operator intervention
    (57P01-57P03), or a connection libpq found closed. Not a cancelled statement or a lock
    timeout: the server answered those."""
    if isinstance(error, str):
        text = error.lower()
        return any(sign in text for sign in CONNECTION_LOST)
    if "psycopg2" not in sys.modules:
        return False
    import psycopg2

    if isinstance(error, psycopg2.InterfaceError):
        return True
    if not isinstance(error, psycopg2.OperationalError):
        return False
    code = error.pgcode or ""
    return code.startswith(("08", "57P")) or (not code and connection_lost(str(error)))


def lost_connection_message(step: str, error: BaseException | str) -> str:
    """One line: the step, the server, what it said."""
    detail = " ".join(str(error).split())
    if len(detail) > 160:
        detail = detail[:157] + "..."
    return f"{step}: lost the connection to Postgres at {postgres_where()} ({detail})"


def fresh_warehouse(
    target_name: str | None, duckdb_path: Path, schema: str, extra: tuple[str, ...] = ()
) -> None:
    """Point the environment at a warehouse of its own and empty it: a DuckDB file (and its
    siblings) or a Postgres schema and its siblings (`extra`: more schemas to drop). For the
    demos, which replay past nights: the user's warehouse is never touched."""
    from dayclose.settings import resolve_target

    if (target_name or os.environ.get("DAYCLOSE_TARGET", "duckdb")) == "duckdb":
        for stale in duckdb_path.parent.glob(duckdb_path.stem + ".*"):
            stale.unlink()
        os.environ["DAYCLOSE_DUCKDB"] = str(duckdb_path)
        return
    os.environ["DAYCLOSE_SCHEMA"] = schema
    with Warehouse(resolve_target(target_name)) as wh:
        for suffix in ("", "_landing", "_reference", "_published", "_dbt_test__audit"):
            wh.execute(f"drop schema if exists {schema}{suffix} cascade")
        for name in extra:
            wh.execute(f"drop schema if exists {name} cascade")
