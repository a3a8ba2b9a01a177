"""Small builders for hand-written landing batches and read-backs of published tables."""

from __future__ import annotations

import calendar
import json
from datetime import datetime
from decimal import Decimal
from pathlib import Path

from flows.generate import BatchWriter
from flows.settings import Target
from flows.warehouse import Warehouse


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


def daily_sales(target: Target) -> dict[tuple[str, str], tuple[Decimal, int]]:
    """daily_sales as {(sale_date, shop_id): (amount, count)}."""
    with Warehouse(target) as wh:
        rows = wh.query(
            f"select sale_date, shop_id, sales_amount, sales_count from {target.schema}.daily_sales"
        )
    return {(str(d), s): (Decimal(a), int(c)) for d, s, a, c in rows}


def day_total(target: Target, day: str) -> Decimal:
    return sum((a for (d, _), (a, _) in daily_sales(target).items() if d == day), Decimal(0))


def table(target: Target, sql: str) -> list[tuple]:
    with Warehouse(target) as wh:
        return wh.query(sql.format(schema=target.schema, landing=target.landing_schema))
