"""The registry of landing sources, as the dbt project declares it.

Each source is a folder of the landing (`<landing>/<name>/arrived=.../`), a dbt tag that
selects its models and gates, and a daily mart readers read. The one list of them is the
project variable `landing_sources` in dbt_project.yml, which the models read too; this
module reads it for the Python side (the loader, the job, the summary, the report).

Adding a source: one entry in `landing_sources` and its dbt models (README, "Adding a source").
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import yaml

from dayclose.errors import EXIT_CONFIG, DaycloseError
from dayclose.settings import PROJECT_DIR


@lru_cache(maxsize=1)
def project_vars() -> dict:
    """The vars of dbt_project.yml: the one place the sources, windows and thresholds are set."""
    path = PROJECT_DIR / "dbt_project.yml"
    try:
        with open(path) as fh:
            return yaml.safe_load(fh)["vars"]
    except (OSError, yaml.YAMLError, KeyError, TypeError) as exc:
        raise DaycloseError(f"{path}: cannot read the project's vars: {exc}", EXIT_CONFIG) from None


@dataclass(frozen=True)
class Source:
    """A landing source and what its nightly job builds and reports (its `landing_sources` entry)."""

    name: str
    table: str  # its raw table in <schema>_landing
    window_days: int  # the nightly window, in days
    event_at: str  # the event time's field
    event_date: str  # its UTC day, as the models name it
    mart: str  # the daily mart readers read, by event_date
    value_sql: str  # the day's headline figure, summed over the mart's rows
    count_sql: str  # the day's events
    value_label: str
    count_label: str
    strict_fields: bool = False  # a line with a key besides the fields is a dead letter

    @classmethod
    def from_entry(cls, name: str, entry: dict) -> Source:
        headline = entry["headline"]
        return cls(
            name=name,
            table=entry["table"],
            window_days=int(entry["window_days"]),
            event_at=entry["event_at"],
            event_date=entry["event_date"],
            mart=entry["daily_mart"],
            value_sql=headline["value"],
            count_sql=headline["count"],
            value_label=headline.get("value_label") or "",
            count_label=headline.get("count_label") or "",
            strict_fields=bool(entry.get("strict_fields", False)),
        )

    @property
    def date_column(self) -> str:
        return self.event_date

    @property
    def selection(self) -> list[str]:
        """The dbt selection of the source's job: its models and gates, what they need, and the
        models shared by every source, but no model of another source (those belong to its job,
        and rebuilding another source's views would drop the views built on them)."""
        others = [f"tag:{name}" for name in sources() if name != self.name]
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

    @property
    def conflicting_copies(self) -> str:
        return f"{self.name}_conflicting_copies"

    @property
    def new_fields(self) -> str:
        return f"{self.name}_new_fields"


@lru_cache(maxsize=1)
def sources() -> dict[str, Source]:
    """Every registered source by name, in the order dbt_project.yml lists them."""
    registry = project_vars()["landing_sources"]
    try:
        return {name: Source.from_entry(name, entry) for name, entry in registry.items()}
    except (KeyError, TypeError, ValueError) as exc:
        raise DaycloseError(
            f"dbt_project.yml: a landing_sources entry lacks or mistypes {exc}", EXIT_CONFIG
        ) from None


def source(name: str) -> Source:
    """The registered source `name`, or a DaycloseError listing the known ones."""
    try:
        return sources()[name]
    except KeyError:
        raise DaycloseError(f"unknown source {name!r}: expected one of {', '.join(sources())}") from None
