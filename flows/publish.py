"""Write-audit-publish: the last step, after every gate has passed.

dbt builds the models in the target schema (the write side), where the gates
test them; dashboard readers read only `<schema>_published`. Publishing copies
the days the run rebuilt (and the small status tables whole) into the published
relations in one transaction, checks the copy, and commits: a reader sees the old
numbers or the new ones, never a mix, never an empty window. The check before commit
compares the row counts of the published days with the built ones. Nothing reaches the
published schema from a run whose gates failed, because this step is not called.

On Postgres a role (DAYCLOSE_READER_ROLE, default dayclose_reader) may read the
published schema and nothing else. DuckDB has no roles: give readers the published
schema through a read-only connection, or export it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import date, datetime

from flows.warehouse import Warehouse


@dataclass(frozen=True)
class Published:
    """A relation readers see: replaced for the run's days (date_column) or whole."""

    name: str
    date_column: str | None = None


PUBLISHED: dict[str, tuple[Published, ...]] = {
    "sales": (
        Published("daily_sales", "sale_date"),
        Published("arrival_lateness"),
        Published("sales_late_arrivals"),
    ),
    "units": (
        Published("daily_good_units", "production_date"),
        Published("line_daily_units", "production_date"),
        Published("daily_good_units_versions"),
        Published("units_restatements"),
        Published("arrival_lateness"),
        Published("units_late_arrivals"),
    ),
}


AS_OF_STAMPED = ("daily_sales", "daily_good_units")  # marts with built_as_of per row


class PublishMismatch(RuntimeError):
    """The published copy disagrees with what the gates passed; nothing was published."""


def published_schema(wh: Warehouse) -> str:
    return f"{wh.target.schema}_published"


def publish(wh: Warehouse, job: str, start: date, end: date, as_of: datetime) -> dict[str, int]:
    """Publish the job's relations for days [start, end) atomically; rows published by relation.

    Refuses (PublishMismatch, nothing published) when a run with a later as-of instant has
    already published any of these days: a rerun of an older night must not overwrite
    newer numbers.
    """
    pub = published_schema(wh)
    src = wh.target.schema
    wh.execute(f"create schema if not exists {pub}")
    counts: dict[str, int] = {}
    with wh.transaction():
        for rel in PUBLISHED[job]:
            target, source = f"{pub}.{rel.name}", f"{src}.{rel.name}"
            if not wh.relation_exists(pub, rel.name):
                # empty first, so that only the days this run built and gated are published
                wh.execute(f"create table {target} as select * from {source} where 1 = 0")
            elif rel.date_column and rel.name in AS_OF_STAMPED:
                newest = wh.scalar(
                    f"select max(built_as_of) from {target} "
                    f"where {rel.date_column} >= %s and {rel.date_column} < %s",
                    (start, end),
                )
                if newest is not None and newest > as_of:
                    raise PublishMismatch(
                        f"{target}: days {start}..{end} were published by a run as of {newest}, later "
                        f"than this run's {as_of}; not overwriting newer numbers"
                    )
            if rel.date_column is None:
                wh.execute(f"delete from {target}")
                wh.execute(f"insert into {target} select * from {source}")
            else:
                where = f"{rel.date_column} >= %s and {rel.date_column} < %s"
                wh.execute(f"delete from {target} where {where}", (start, end))
                wh.execute(f"insert into {target} select * from {source} where {where}", (start, end))
            counts[rel.name] = _check_copy(wh, rel, target, source, start, end)
    if wh.kind == "postgres":
        grant_reader(wh)
    return counts


def _check_copy(wh: Warehouse, rel: Published, target: str, source: str, start: date, end: date) -> int:
    where, params = "", ()
    if rel.date_column:
        where, params = f" where {rel.date_column} >= %s and {rel.date_column} < %s", (start, end)
    theirs = wh.scalar(f"select count(*) from {source}{where}", params)
    ours = wh.scalar(f"select count(*) from {target}{where}", params)
    if theirs != ours:
        raise PublishMismatch(f"{target}: {ours} rows published for {start}..{end}, {theirs} built")
    return int(ours)


def reader_role() -> str:
    return os.environ.get("DAYCLOSE_READER_ROLE", "dayclose_reader")


def grant_reader(wh: Warehouse) -> None:
    """The readers' role: usage of the published schema and select on its tables, nothing else."""
    role, pub = reader_role(), published_schema(wh)
    wh.execute(
        "do $$ begin if not exists (select from pg_roles where rolname = %s) then "
        f"create role {role} nologin; end if; end $$".replace("%s", "'" + role.replace("'", "''") + "'")
    )
    wh.execute(f"grant usage on schema {pub} to {role}")
    wh.execute(f"grant select on all tables in schema {pub} to {role}")
    wh.execute(f"alter default privileges in schema {pub} grant select on tables to {role}")
