"""A small, uniform connection to the warehouse: DuckDB or Postgres.

Only the loader, the run lock and the summaries talk to the warehouse directly;
everything else goes through dbt.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from dayclose.errors import Unavailable, WarehouseBusy
from dayclose.settings import Target, postgres_env, postgres_where


class Warehouse:
    """A connection with `%s` parameters on both engines."""

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
        else:
            twin._conn = postgres_connect("dayclose")
            twin._conn.autocommit = True
        return twin

    # -- statements -----------------------------------------------------------------
    def _sql(self, sql: str) -> str:
        return sql.replace("%s", "?") if self.kind == "duckdb" else sql

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        if self.kind == "duckdb":
            self._conn.execute(self._sql(sql), list(params))
        else:
            with self._conn.cursor() as cur:
                cur.execute(sql, tuple(params))

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        if self.kind == "duckdb":
            return self._conn.execute(self._sql(sql), list(params)).fetchall()
        with self._conn.cursor() as cur:
            cur.execute(sql, tuple(params))
            return cur.fetchall()

    def columns_and_rows(self, sql: str) -> tuple[list[str], list[tuple]]:
        """Column names and rows of a query."""
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
        return f"substring({expression} from '{pattern}')"

    @staticmethod
    def placeholders(n: int) -> str:
        """`%s, %s, ...` for a list of n parameters (`in (...)`)."""
        return ", ".join(["%s"] * n)

    def scalar(self, sql: str, params: Sequence[Any] = ()) -> Any:
        rows = self.query(sql, params)
        return rows[0][0] if rows else None

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """All or nothing: on any exception the work of the block is rolled back."""
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
        return bool(
            self.scalar(
                "select count(*) from information_schema.tables where table_schema = %s and table_name = %s",
                (schema, name),
            )
        )

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._conn.close()

    def __enter__(self) -> Warehouse:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
