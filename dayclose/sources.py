"""The registry of landing sources: the one Python place that names them.

Each source is a folder of the landing (`<landing>/<name>/arrived=.../`), a dbt tag that
selects its models and gates, and a daily mart readers read. The dbt side of the same
registry is the project variable `landing_sources` (dbt_project.yml): each source's
nightly window and the models its lateness is measured from.

Adding a source: one entry here, one entry in `landing_sources`, and its dbt models
(a staging model, a validated-lines model and its daily mart, tagged with the source's name).
"""

from __future__ import annotations

from dataclasses import dataclass

from dayclose.errors import DaycloseError


@dataclass(frozen=True)
class Source:
    """A landing source and what its nightly job builds and reports."""

    name: str
    table: str  # its raw table in <schema>_landing
    mart: str  # the daily mart readers read
    date_column: str  # the mart's day
    value_sql: str  # the day's headline figure, summed over the mart's rows
    count_sql: str  # the day's events
    value_label: str
    count_label: str

    @property
    def selection(self) -> list[str]:
        """The dbt selection of the source's job: its models and gates, what they need, and the
        models shared by every source, but no model of another source (those belong to its job,
        and rebuilding another source's views would drop the views built on them)."""
        others = [f"tag:{name}" for name in SOURCES if name != self.name]
        return ["--select", f"+tag:{self.name}", "tag:shared", *(["--exclude", *others] if others else [])]

    @property
    def dead_letters(self) -> str:
        return f"{self.name}_dead_letters"

    @property
    def dead_letter_counts(self) -> str:
        return f"{self.name}_dead_letter_counts"

    @property
    def late_arrivals(self) -> str:
        return f"{self.name}_late_arrivals"


SALES = Source(
    name="sales",
    table="sale_lines",
    mart="daily_sales",
    date_column="sale_date",
    value_sql="sum(sales_amount)",
    count_sql="sum(sales_count)",
    value_label="",
    count_label="sales",
)

UNITS = Source(
    name="units",
    table="unit_lines",
    mart="daily_good_units",
    date_column="production_date",
    value_sql="sum(good_units)",
    count_sql="sum(good_units + rejected_units)",
    value_label="good units",
    count_label="units",
)

SOURCES: dict[str, Source] = {s.name: s for s in (SALES, UNITS)}


def source(name: str) -> Source:
    """The registered source `name`, or a DaycloseError listing the known ones."""
    try:
        return SOURCES[name]
    except KeyError:
        raise DaycloseError(f"unknown source {name!r}: expected one of {', '.join(SOURCES)}") from None
