"""At most one dayclose run per warehouse at a time, whoever starts it.

Prefect's deployment concurrency limit keeps scheduled runs apart; this lock also
covers a `dayclose run` from a terminal, a backfill script, or a retry that starts
while the previous attempt still works. It is held for the whole run and released
by the operating system or the server if the process dies:

- Postgres: a session advisory lock, keyed by the database and schema;
- DuckDB: an exclusive lock (flock) on `<file>.lock` beside the database file
  (DuckDB's own file lock is taken and released per step, so it cannot span a run).

One lock per warehouse, not per job: the sales and units jobs share models (the
lateness models, the seeds), so they must not build at the same time either.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

from dayclose.errors import Unavailable, WarehouseBusy
from dayclose.settings import Target
from dayclose.warehouse import lost_connection_message, postgres_connect

LockCheck = Callable[[str], None]


def _holder_text(job: str) -> str:
    return json.dumps(
        {"pid": os.getpid(), "job": job, "since": datetime.now(UTC).isoformat(timespec="seconds")}
    )


@contextlib.contextmanager
def run_lock(target: Target, job: str, timeout: float = 0.0, poll: float = 0.5) -> Iterator[LockCheck]:
    """Hold the warehouse's run lock; wait up to `timeout` seconds, then raise WarehouseBusy.

    Yields a check to call before a step that must not run without the lock (publication),
    and to tell a failed step from a lost server: it raises Unavailable, naming the step,
    when the lock was lost under the run. A Postgres session that ended (a failover, an
    admin) took its advisory lock with it, and another run may have started since; a file
    lock (DuckDB, Spark in the process) cannot be lost while its process lives.
    """
    if target.duckdb_path is not None or target.name == "spark":
        with _file_lock(target, job, timeout, poll):
            yield lambda step: None
    else:
        with _advisory_lock(target, job, timeout, poll) as check:
            yield check


@contextlib.contextmanager
def _file_lock(target: Target, job: str, timeout: float, poll: float) -> Iterator[None]:
    if target.duckdb_path is not None:
        path = target.duckdb_path.with_name(target.duckdb_path.name + ".lock")
    else:  # Spark in this process: its warehouse folder's
        path = target.spark_dir / "run.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout
    fh = open(path, "a+")  # noqa: SIM115 - held for the run
    acquired = False
    try:
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    fh.seek(0)
                    holder = fh.read().strip() or "unknown"
                    raise WarehouseBusy(
                        f"another dayclose run holds {path} ({holder}); this {job} run did not start. "
                        "It will be safe to run once that one has finished."
                    ) from None
                time.sleep(poll)
        acquired = True
        fh.seek(0)
        fh.truncate()
        fh.write(_holder_text(job))
        fh.flush()
        yield
    finally:
        if acquired:  # a runner that did not get the lock leaves the holder's note alone
            with contextlib.suppress(OSError):
                fh.truncate(0)
        fh.close()  # closing releases the flock


@contextlib.contextmanager
def _advisory_lock(target: Target, job: str, timeout: float, poll: float) -> Iterator[LockCheck]:
    import psycopg2

    conn = postgres_connect(f"dayclose {job} run lock")
    conn.autocommit = True
    key = int(hashlib.sha1(f"dayclose:{target.schema}".encode()).hexdigest()[:15], 16)
    deadline = time.monotonic() + timeout
    try:
        cur = conn.cursor()  # closed with its connection
        while True:
            cur.execute("select pg_try_advisory_lock(%s)", (key,))
            if cur.fetchone()[0]:
                break
            if time.monotonic() >= deadline:
                cur.execute(
                    "select a.pid, a.application_name, a.backend_start from pg_locks l "
                    "join pg_stat_activity a on a.pid = l.pid "
                    "where l.locktype = 'advisory' and l.granted and l.database = "
                    "(select oid from pg_database where datname = current_database()) and "
                    "(l.classid::bigint << 32 | l.objid::bigint) = %s",
                    (key,),
                )
                holder = cur.fetchone()
                who = (
                    f"backend pid {holder[0]} ({holder[1]}, since {holder[2]:%Y-%m-%d %H:%M:%S})"
                    if holder
                    else "?"
                )
                raise WarehouseBusy(
                    f"another dayclose run holds the run lock of schema {target.schema} "
                    f"in database {conn.info.dbname}: {who}; this {job} run did not start."
                )
            time.sleep(poll)

        def check(step: str) -> None:
            try:
                cur.execute(
                    "select count(*) from pg_locks where pid = pg_backend_pid() and locktype = 'advisory' "
                    "and granted and (classid::bigint << 32 | objid::bigint) = %s",
                    (key,),
                )
                held = cur.fetchone()[0] > 0
            except psycopg2.Error as exc:
                raise Unavailable(lost_connection_message(step, exc)) from exc
            if not held:
                raise Unavailable(f"{step}: the run lock of schema {target.schema} is no longer held")

        try:
            yield check
        finally:
            # a session that ended under the run (a failover, an admin) took its lock with it
            with contextlib.suppress(psycopg2.Error):
                cur.execute("select pg_advisory_unlock(%s)", (key,))
    finally:
        conn.close()
