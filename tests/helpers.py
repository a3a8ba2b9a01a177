"""Small builders for hand-written landing batches and read-backs of published tables."""

from __future__ import annotations

import calendar
import hashlib
import json
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import psycopg2
import pytest

from dayclose.generate import BatchWriter
from dayclose.settings import Target
from dayclose.warehouse import Warehouse


@contextmanager
def fresh_database(
    settings: dict[str, str], env: pytest.MonkeyPatch, name: str | None = None
) -> Iterator[str]:
    """A new, empty database on the test Postgres (libpq `settings`), dropped afterwards: its
    name, `name` (dropped first if a test before left it) or a new one. Meanwhile `env` points
    the libpq variables and dayclose's schema at it."""
    name = name or f"dayclose_test_{uuid.uuid4().hex[:10]}"
    admin = psycopg2.connect(
        host=settings["PGHOST"],
        port=settings.get("PGPORT", "5432"),
        user=settings.get("PGUSER"),
        password=settings.get("PGPASSWORD"),
        dbname="postgres",
    )
    admin.autocommit = True
    try:
        with admin.cursor() as cur:
            cur.execute(f"drop database if exists {name} with (force)")
            cur.execute(f"create database {name}")
        for key, value in settings.items():
            env.setenv(key, value)
        env.setenv("PGDATABASE", name)
        env.setenv("DAYCLOSE_SCHEMA", "dayclose")
        yield name
    finally:
        with admin.cursor() as cur:
            cur.execute(f"drop database if exists {name} with (force)")
        admin.close()


def ts(text: str) -> datetime:
    return datetime.fromisoformat(text)


def sale(event_id: str, shop: str, sold_at: str, received_at: str, amount: str = "10.00") -> str:
    return json.dumps(
        {
            "event_id": event_id,
            "shop_id": shop,
            "sold_at": sold_at,
            "received_at": received_at,
            "amount": amount,
        }
    )


def write_batch(
    landing: Path, hour: str, lines: list[str], source: str = "sales", sealed: bool = True
) -> Path:
    """One arrival-hour batch (hour 'YYYY-MM-DDTHH') with the given lines, and its manifest."""
    writer = BatchWriter(landing, source)
    arrival = calendar.timegm(datetime.strptime(hour, "%Y-%m-%dT%H").timetuple())
    for line in lines:
        writer.write(arrival, line + "\n")
    if sealed:
        writer.seal_before(None)
    else:
        for folder in writer.open.values():
            folder.handle.close()
    return landing / source / f"arrived={hour}"


def event_hash(*key: object) -> int:
    """What a first-arrivals registry's event_hash holds for an event key (macro event_hash):
    the first 16 hex digits of the md5 of the key's parts joined by '|', shifted right once."""
    return int(hashlib.md5("|".join(map(str, key)).encode()).hexdigest()[:16], 16) >> 1


def daily_sales(target: Target) -> dict[tuple[str, str], tuple[Decimal, int]]:
    """daily_sales as readers see it (published) as {(sale_date, shop_id): (amount, count)}."""
    with Warehouse(target) as wh:
        rows = wh.query(
            f"select sale_date, shop_id, sales_amount, sales_count from {target.schema}_published.daily_sales"
        )
    return {(str(d), s): (Decimal(a), int(c)) for d, s, a, c in rows}


def day_total(target: Target, day: str) -> Decimal:
    return sum((a for (d, _), (a, _) in daily_sales(target).items() if d == day), Decimal(0))


def table(target: Target, sql: str) -> list[tuple]:
    with Warehouse(target) as wh:
        return wh.query(sql.format(schema=target.schema, landing=target.landing_schema))


def unit(
    line: str,
    seq: int,
    event_at: str,
    received_at: str,
    verdict: str = "good",
    sku: str = "PILS-330-BTL",
    fill: object = 330.5,
    torque: object = 2.1,
    temp: object = 3.0,
) -> str:
    return json.dumps(
        {
            "line_id": line,
            "plc_seq": seq,
            "sku": sku,
            "event_at": event_at,
            "received_at": received_at,
            "verdict": verdict,
            "fill_level_ml": fill,
            "capper_torque_nm": torque,
            "temperature_c": temp,
        }
    )


STEADY_HOURS = (2, 8, 14, 20)


def steady_production(landing: Path, lines: list[str], first_day: str, days: int) -> int:
    """Units on `lines` at 02:00, 08:00, 14:00 and 20:00 of each day, each arriving at once.

    Other hours stay free for a test's own batches. Returns the good units per line-day.
    """
    writer = BatchWriter(landing, "units")
    start = calendar.timegm(datetime.fromisoformat(first_day).timetuple())
    for d in range(days):
        for hour in STEADY_HOURS:
            t = start + d * 86400 + hour * 3600 + 60
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
            for n, line in enumerate(lines):
                seq = 9_000_000_000 + (d * 24 + hour) * 100 + n
                writer.write(t + 5, unit(line, seq, stamp, stamp[:-3] + "05Z") + "\n")
    writer.seal_before(None)
    return len(STEADY_HOURS)


def good_units(target: Target) -> dict[tuple[str, str], int]:
    """daily_good_units as readers see it (published) as {(production_date, sku): good_units}."""
    with Warehouse(target) as wh:
        rows = wh.query(
            f"select production_date, sku, good_units from {target.schema}_published.daily_good_units"
        )
    return {(str(d), s): int(n) for d, s, n in rows}


def valid_sales_first_arrivals(landing: Path) -> dict[str, tuple[datetime, datetime, Decimal]]:
    """Each valid sale's (sold_at, first received_at, amount), read straight from the landing files.

    Valid as the contract and the models define it (a generated landing holds only simple
    cases): a flat JSON object of the five fields, a known shop, 0 <= amount <=
    max_sale_amount, sold_at not after received_at. An independent reading to check the
    models against: first arrival = earliest batch, then received_at.
    """
    shops_csv = Path(__file__).resolve().parent.parent / "seeds" / "shops.csv"
    shops = {line.split(",")[0] for line in shops_csv.read_text().splitlines()[1:]}
    fields = {"event_id", "shop_id", "sold_at", "received_at", "amount"}
    first: dict[str, tuple[str, datetime, datetime, Decimal]] = {}
    for part in sorted((landing / "sales").glob("*/part-*.jsonl")):
        batch = part.parent.name
        for line in part.read_text().splitlines():
            try:
                doc = json.loads(line)
                sold = datetime.fromisoformat(doc["sold_at"]).astimezone(UTC).replace(tzinfo=None)
                received = datetime.fromisoformat(doc["received_at"]).astimezone(UTC).replace(tzinfo=None)
                amount = Decimal(doc["amount"])
            except (ValueError, KeyError, TypeError, ArithmeticError):
                continue
            if (
                set(doc) != fields
                or doc["shop_id"] not in shops
                or not 0 <= amount <= 100_000
                or sold > received
            ):
                continue
            known = first.get(doc["event_id"])
            if known is None or (batch, received) < (known[0], known[2]):
                first[doc["event_id"]] = (batch, sold, received, amount)
    return {event: values[1:] for event, values in first.items()}


def add_part(landing: Path, hour: str, lines: list[str], source: str = "sales") -> None:
    """One more part file in an existing sealed batch, with its manifest updated to match."""
    folder = landing / source / f"arrived={hour}"
    blob = "".join(line + "\n" for line in lines).encode()
    (folder / "part-9999.jsonl").write_bytes(blob)
    manifest = json.loads((folder / "_SUCCESS").read_text())
    manifest["files"].append(
        {"name": "part-9999.jsonl", "rows": len(lines), "sha256": hashlib.sha256(blob).hexdigest()}
    )
    (folder / "_SUCCESS").write_text(json.dumps(manifest, indent=1) + "\n")


def write_raw_batch(landing: Path, source: str, hour: str, files: dict[str, bytes]) -> Path:
    """One sealed batch whose part files hold exactly `files` (name -> bytes), manifest included."""
    folder = landing / source / f"arrived={hour}"
    folder.mkdir(parents=True)
    entries = []
    for name, blob in files.items():
        (folder / name).write_bytes(blob)
        rows = blob.count(b"\n") + (1 if blob and not blob.endswith(b"\n") else 0)
        entries.append({"name": name, "rows": rows, "sha256": hashlib.sha256(blob).hexdigest()})
    manifest = {"source": source, "batch": hour, "files": entries}
    (folder / "_SUCCESS").write_text(json.dumps(manifest))
    return folder


def split_lines(blob: bytes) -> list[bytes]:
    """The contract's lines of a file: every '\\n' ends one, and a last line without one counts."""
    lines = blob.split(b"\n")
    return lines[:-1] if blob.endswith(b"\n") or not blob else lines


def stored_lines(target: Target, table_name: str, batch_id: str) -> dict[tuple[str, int], bytes]:
    """The raw table's lines of a batch as bytes: the exact bytes when kept in hex, else the text."""
    rows = table(
        target,
        f"select file_name, line_number, raw_line, raw_line_hex from {{landing}}.{table_name} "
        f"where batch_id = '{batch_id}'",
    )
    return {(f, int(n)): bytes.fromhex(h) if h is not None else text.encode() for f, n, text, h in rows}


def stored_comments(target: Target) -> dict[tuple[str, str | None], str | None]:
    """The comments on the relations of the target's schema and on their columns, as the
    warehouse holds them: {(relation, None): comment, (relation, column): comment}."""
    if target.name == "duckdb":
        sql = """
            select table_name, null, comment from duckdb_tables() where schema_name = '{schema}'
            union all
            select view_name, null, comment from duckdb_views() where schema_name = '{schema}'
            union all
            select table_name, column_name, comment from duckdb_columns() where schema_name = '{schema}'
        """
    else:
        sql = """
            select c.relname, null, obj_description(c.oid, 'pg_class')
            from pg_class as c inner join pg_namespace as n on n.oid = c.relnamespace
            where n.nspname = '{schema}' and c.relkind in ('r', 'v', 'm', 'p')
            union all
            select c.relname, a.attname, col_description(c.oid, a.attnum)
            from pg_class as c
            inner join pg_namespace as n on n.oid = c.relnamespace
            inner join pg_attribute as a on a.attrelid = c.oid and a.attnum > 0 and not a.attisdropped
            where n.nspname = '{schema}' and c.relkind in ('r', 'v', 'm', 'p')
        """
    return {(relation, column): comment for relation, column, comment in table(target, sql)}


def documented_comments(target: Target) -> dict[tuple[str, str | None], str]:
    """What the models' YAML says the warehouse should hold (dbt's persist_docs), for every
    model of the target's schema that exists there: each model's description and the
    descriptions of its documented columns that it has."""
    manifest = json.loads((target.dbt_target_dir / "manifest.json").read_text())
    stored = stored_comments(target)
    expected: dict[tuple[str, str | None], str] = {}
    for node in manifest["nodes"].values():
        name = node.get("alias") or node["name"]
        if node["resource_type"] != "model" or node["schema"] != target.schema or (name, None) not in stored:
            continue
        if node["description"]:
            expected[(name, None)] = node["description"]
        for column in node["columns"].values():
            # an empty description is no comment on Postgres and '' on DuckDB: left out (none here)
            if (name, column["name"]) in stored and column["description"]:
                expected[(name, column["name"])] = column["description"]
    return expected


def dbt_invocations(state_dir: Path) -> list[str]:
    """The dbt log of a target's state folder (dbt_target_dir's parent), one text per dbt invocation."""
    return (state_dir / "logs" / "dbt.log").read_text(errors="replace").split("Running with dbt=")[1:]
