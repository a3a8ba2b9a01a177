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

import json
import os
from dataclasses import dataclass
from datetime import date, datetime

from dayclose.settings import Target
from dayclose.sources import Source
from dayclose.warehouse import Warehouse


@dataclass(frozen=True)
class Published:
    """A relation readers see: replaced for the run's days (date_column) or whole."""

    name: str
    date_column: str | None = None
    as_of_stamped: bool = False  # its rows carry built_as_of: a newer run's days are never overwritten


def published_relations(target: Target, job: str) -> list[Published]:
    """The relations a job publishes, as the dbt project declares them (meta `publish`).

    A model with `meta: {publish: {by_day: <date column>}}` is published for the run's days,
    one with `meta: {publish: whole}` whole; a job publishes the models tagged with its
    source and the shared ones. Read from the manifest of the run's own dbt build.
    """
    path = target.state_dir / "target" / "manifest.json"
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise PublishMismatch(
            f"no dbt manifest to read the published relations from ({path}: {exc})"
        ) from None
    relations = []
    for node in manifest["nodes"].values():
        rule = node.get("config", {}).get("meta", {}).get("publish")
        tags = node.get("tags", [])
        if node["resource_type"] != "model" or rule is None or not (job in tags or "shared" in tags):
            continue
        by_day = rule.get("by_day") if isinstance(rule, dict) else None
        if rule != "whole" and by_day is None:
            raise PublishMismatch(
                f"model {node['name']}: meta publish must be 'whole' or {{by_day: <column>}}"
            )
        relations.append(Published(node["name"], by_day, "built_as_of" in node.get("columns", {})))
    return sorted(relations, key=lambda r: r.name)


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
    relations = published_relations(wh.target, job)
    with wh.transaction():
        for rel in relations:
            target, source = f"{pub}.{rel.name}", f"{src}.{rel.name}"
            if not wh.relation_exists(pub, rel.name):
                # empty first, so that only the days this run built and gated are published
                wh.execute(f"create table {target} as select * from {source} where 1 = 0")
            elif rel.date_column and rel.as_of_stamped:
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


def published_total(target: Target, src: Source, window: tuple[date, date]) -> float | None:
    """The source's published headline total over the window: what readers saw (None before any publish)."""
    published = f"{target.schema}_published"
    with Warehouse(target) as wh:
        if not wh.relation_exists(published, src.mart):
            return None
        value = wh.scalar(
            f"select {src.value_sql} from {published}.{src.mart} "
            f"where {src.date_column} >= %s and {src.date_column} < %s",
            window,
        )
    return None if value is None else float(value)


def forget_unpublished_versions(target: Target, run_id: str) -> None:
    """Published-value versions exist only for values that were published: drop a run's others."""
    with Warehouse(target) as wh:
        if wh.relation_exists(target.schema, "daily_good_units_versions"):
            wh.execute(f"delete from {target.schema}.daily_good_units_versions where run_id = %s", (run_id,))
