"""Write-audit-publish: the last step, after every gate has passed.

dbt builds the models in the target schema (the write side), where the gates
test them; dashboard readers read only `<schema>_published`. Publishing copies
the days the run rebuilt (and the small status tables whole) into the published
relations in one transaction, checks the copy, and commits: a reader sees the old
numbers or the new ones, never a mix, never an empty window. The check before commit
compares the row counts of the published days with the built ones. Nothing reaches the
published schema from a run whose gates failed, because this step is not called.

On Postgres a role (DAYCLOSE_READER_ROLE, default dayclose_reader) may read the
published schema and nothing else. DuckDB has no roles, and a reader's connection to the
warehouse file would lock out the writer: DuckDB readers read a copy of the published
schema in a file of their own, replaced whole after every run (export_for_readers).

Spark has no transactions (and its parquet tables no delete or update): each published
relation is a view, and a publication writes a new table per relation (the days kept from
the current one and the run's days from the write side), checks every one of them, and only
then points the views at the new tables, one statement each; the tables they left are
dropped. A reader sees the old relation or the new one; a publication that fails a check
changes no view.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path

from dayclose.dates import utc_now
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
    path = target.dbt_target_dir / "manifest.json"
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


def _days(column: str, start: date, end: date, held: frozenset[date]) -> tuple[str, tuple]:
    """SQL condition and parameters: `column` in [start, end) and not one of the held days."""
    where, params = f"{column} >= %s and {column} < %s", [start, end]
    if held:
        where += f" and {column} not in ({', '.join(['%s'] * len(held))})"
        params += sorted(held)
    return where, tuple(params)


def publish(
    wh: Warehouse, job: str, start: date, end: date, as_of: datetime, held: frozenset[date] = frozenset()
) -> dict[str, int]:
    """Publish the job's relations for days [start, end) but the `held` ones, atomically.

    Returns the rows published by relation. Refuses (PublishMismatch, nothing published)
    when a run with a later as-of instant has already published any of these days: a rerun
    of an older night must not overwrite newer numbers. Days before `start` that readers
    were told can still change are marked final: no nightly run will rebuild them.
    """
    pub = published_schema(wh)
    src = wh.target.schema
    wh.execute(f"create schema if not exists {pub}")
    counts: dict[str, int] = {}
    relations = published_relations(wh.target, job)
    if wh.kind == "spark":
        return _publish_by_swapping_views(wh, relations, start, end, as_of, held)
    with wh.transaction():
        for rel in relations:
            target, source = f"{pub}.{rel.name}", f"{src}.{rel.name}"
            if not wh.relation_exists(pub, rel.name):
                # empty first, so that only the days this run built and gated are published
                wh.execute(f"create table {target} as select * from {source} where 1 = 0")
            if rel.date_column is None:
                wh.execute(f"delete from {target}")
                wh.execute(f"insert into {target} select * from {source}")
                counts[rel.name] = _check_copy(wh, target, source, "1 = 1", ())
                continue
            where, params = _days(rel.date_column, start, end, held)
            if rel.as_of_stamped:
                _refuse_older(wh, target, where, params, as_of)
            wh.execute(f"delete from {target} where {where}", params)
            wh.execute(f"insert into {target} select * from {source} where {where}", params)
            counts[rel.name] = _check_copy(wh, target, source, where, params)
            if rel.as_of_stamped:
                wh.execute(
                    f"update {target} set can_still_change = false "
                    f"where {rel.date_column} < %s and can_still_change",
                    (start,),
                )
    if wh.kind == "postgres":
        grant_reader(wh)
    return counts


def _publish_by_swapping_views(
    wh: Warehouse,
    relations: list[Published],
    start: date,
    end: date,
    as_of: datetime,
    held: frozenset[date],
) -> dict[str, int]:
    """Spark: a new table per relation, every one checked, then the views swapped to them."""
    pub, src = published_schema(wh), wh.target.schema
    stamp = utc_now().strftime("%Y%m%d%H%M%S%f")
    counts: dict[str, int] = {}
    swaps: list[tuple[str, str]] = []
    try:
        for rel in relations:
            view, source, table = f"{pub}.{rel.name}", f"{src}.{rel.name}", f"{pub}.{rel.name}__{stamp}"
            exists = wh.relation_exists(pub, rel.name)
            swaps.append((view, table))
            if rel.date_column is None:
                wh.execute(f"create table {table} using parquet as select * from {source}")
                counts[rel.name] = _check_copy(wh, table, source, "1 = 1", ())
                continue
            where, params = _days(rel.date_column, start, end, held)
            columns, _ = wh.columns_and_rows(f"select * from {source} limit 0")
            if exists and rel.as_of_stamped:
                _refuse_older(wh, view, where, params, as_of)
            kept = [
                # days before the run's that readers were told can still change are final now
                f"{c} and {rel.date_column} >= %s as {c}"
                if c == "can_still_change" and rel.as_of_stamped
                else c
                for c in columns
            ]
            kept_params = (start,) if rel.as_of_stamped and "can_still_change" in columns else ()
            old = f"select {', '.join(kept)} from {view} where not ({where}) union all " if exists else ""
            wh.execute(
                f"create table {table} using parquet as {old}"
                f"select {', '.join(columns)} from {source} where {where}",
                (*kept_params, *params, *params) if exists else params,
            )
            counts[rel.name] = _check_copy(wh, table, source, where, params)
    except BaseException:
        for _, table in swaps:
            wh.execute(f"drop table if exists {table}")
        raise
    for view, table in swaps:  # every new table checked: the readers' views now
        schema, name = view.split(".")
        before = _view_table(wh, schema, name)
        if before is None and wh.relation_exists(schema, name):
            wh.execute(f"drop table {view}")  # a relation of another kind in its place
        wh.execute(f"create or replace view {view} as select * from {table}")
        if before is not None:
            wh.execute(f"drop table if exists {before}")
    return counts


def _view_table(wh: Warehouse, schema: str, name: str) -> str | None:
    """Spark: the published table a published view reads, if it is one of ours."""
    rows = wh.query(f"show tables in {schema} like '{name}__*'")
    tables = sorted(row[1] for row in rows if not row[2])  # (namespace, name, is_temporary)
    if not tables or not wh.relation_exists(schema, name):
        return None
    text = wh.scalar(f"show create table {schema}.{name}") or ""
    return next((f"{schema}.{t}" for t in tables if t in text), None)


def _refuse_older(wh: Warehouse, target: str, where: str, params: tuple, as_of: datetime) -> None:
    newest = wh.scalar(f"select max(built_as_of) from {target} where {where}", params)
    if newest is not None and newest > as_of:
        raise PublishMismatch(
            f"{target}: days {params[0]}..{params[1]} were published by a run as of {newest}, later "
            f"than this run's {as_of}; not overwriting newer numbers"
        )


def _check_copy(wh: Warehouse, target: str, source: str, where: str, params: tuple) -> int:
    theirs = wh.scalar(f"select count(*) from {source} where {where}", params)
    ours = wh.scalar(f"select count(*) from {target} where {where}", params)
    if theirs != ours:
        raise PublishMismatch(f"{target}: {ours} rows published, {theirs} built ({where} {params})")
    return int(ours)


def readers_file(target: Target) -> Path | None:
    """Where DuckDB readers read: a copy of the published schema, replaced whole after each run."""
    if target.duckdb_path is None:
        return None
    configured = os.environ.get("DAYCLOSE_PUBLISHED_DUCKDB")
    return Path(configured) if configured else target.duckdb_path.with_suffix(".published.duckdb")


def export_for_readers(target: Target) -> Path | None:
    """DuckDB: copy the published schema into the readers' file, atomically.

    DuckDB lets one process write a database file, and a reader's connection, even a
    read-only one, locks it: a dashboard on the warehouse file would stop the nightly
    run. Readers therefore get their own file, written beside it under a temporary name
    and renamed over the old one (atomic): a reader keeps the copy it opened, sees the new
    one when it connects again, and never holds a lock the writer needs.

    The file holds the tables under the warehouse's name for them (`main_published.daily_sales`),
    so one query runs on both; views of the same names in its default schema serve the
    bare names (`daily_sales`).
    """
    path = readers_file(target)
    if path is None:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    fresh = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fresh.unlink(missing_ok=True)
    with Warehouse(target) as wh:
        pub = published_schema(wh)
        tables = [
            name
            for (name,) in wh.query(
                "select table_name from information_schema.tables where table_schema = %s order by 1", (pub,)
            )
        ]
        wh.execute(f"attach '{fresh}' as readers_copy")
        try:
            wh.execute(f"create schema readers_copy.{pub}")
            for name in tables:
                wh.execute(f"create table readers_copy.{pub}.{name} as select * from {pub}.{name}")
                wh.execute(f"create view readers_copy.main.{name} as select * from {pub}.{name}")
        finally:
            wh.execute("detach readers_copy")
    os.replace(fresh, path)
    return path


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


def forget_unpublished_versions(target: Target, run_id: str, days: frozenset[date] | None = None) -> None:
    """Published-value versions exist only for values that were published: drop a run's others
    (all of them, or those of the days held back)."""
    with Warehouse(target) as wh:
        if not wh.relation_exists(target.schema, "daily_good_units_versions"):
            return
        where, params = "run_id = %s", (run_id,)
        if days is not None:
            if not days:
                return
            where += f" and production_date in ({', '.join(['%s'] * len(days))})"
            params += tuple(sorted(days))
        wh.delete(f"{target.schema}.daily_good_units_versions", where, params)
