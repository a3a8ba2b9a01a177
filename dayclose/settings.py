"""Where things are and which warehouse to talk to, from the environment only."""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from dayclose.errors import DaycloseError

PROJECT_DIR = Path(os.environ.get("DAYCLOSE_PROJECT_DIR", Path(__file__).resolve().parent.parent))
TARGETS = ("duckdb", "postgres", "spark")


@dataclass(frozen=True)
class Target:
    """One warehouse: the embedded DuckDB file, a Postgres database or Spark (in-process)."""

    name: str
    schema: str
    duckdb_path: Path | None = None

    @property
    def landing_schema(self) -> str:
        return f"{self.schema}_landing"

    @property
    def state_dir(self) -> Path:
        """Per-target dbt working files (target/, logs/, profiles)."""
        if self.duckdb_path is not None:
            key = "duckdb-" + hashlib.sha1(str(self.duckdb_path).encode()).hexdigest()[:10]
        else:
            key = f"{self.name}-{self.schema}"
        return Path(os.environ.get("DAYCLOSE_STATE_DIR", PROJECT_DIR / ".dayclose")) / key

    @property
    def spark_dir(self) -> Path:
        """Spark: the folder of its managed tables (`warehouse/`) and of its embedded Derby
        metastore (`metastore_db`, `derby.log`), one per schema (Derby admits one process at
        a time, so each warehouse has its own). DAYCLOSE_SPARK_DIR to put it elsewhere."""
        configured = os.environ.get("DAYCLOSE_SPARK_DIR")
        return Path(configured).resolve() if configured else self.state_dir / "spark"

    def describe(self) -> str:
        """Where this warehouse is, for the summary: the DuckDB file, or the Postgres server,
        database and schema every connection of a run uses (postgres_env)."""
        if self.duckdb_path is not None:
            return f"duckdb {self.duckdb_path}"
        if self.name == "spark":
            return f"spark {spark_master()} (in-process), warehouse {self.spark_dir}, schema {self.schema}"
        return f"postgres {postgres_where()}, schema {self.schema}"

    @property
    def dbt_target_dir(self) -> Path:
        """dbt's target path: the manifest, run results, partial-parse state and docs site."""
        return self.state_dir / "target"


def resolve_target(name: str | None = None) -> Target:
    """The target named (or DAYCLOSE_TARGET, default duckdb), configured from the environment."""
    name = name or os.environ.get("DAYCLOSE_TARGET", "duckdb")
    if name not in TARGETS:
        raise DaycloseError(f"unknown target {name!r}: expected one of {', '.join(TARGETS)}")
    if name == "duckdb":
        path = Path(os.environ.get("DAYCLOSE_DUCKDB", "dayclose.duckdb")).resolve()
        return Target(name="duckdb", schema="main", duckdb_path=path)
    return Target(name=name, schema=os.environ.get("DAYCLOSE_SCHEMA", "dayclose"))


# The Postgres every connection of a run uses (the loader's, the run lock's, the report's and
# dbt's through profiles.yml.example, which names the same defaults): the libpq variables where
# set, else these. Without them libpq alone would pick the local socket and a database named
# after the OS user, and the loader and dbt could reach two different databases.
POSTGRES_DEFAULTS = {"PGHOST": "127.0.0.1", "PGPORT": "5432", "PGUSER": "postgres", "PGDATABASE": "postgres"}


def postgres_env() -> dict[str, str]:
    """The libpq variables of the Postgres target, resolved once: the user's, else the defaults."""
    return {name: os.environ.get(name) or default for name, default in POSTGRES_DEFAULTS.items()}


def postgres_where() -> str:
    """The Postgres server and database, for messages: `127.0.0.1:5432, database postgres`."""
    env = postgres_env()
    return f"{env['PGHOST']}:{env['PGPORT']}, database {env['PGDATABASE']}"


def dbt_env(target: Target) -> dict[str, str]:
    """Environment the dbt profile (profiles.yml.example) and the models' configs read.

    DAYCLOSE_BATCH_SIZE: dayclose builds the daily microbatch models a month per batch, each
    cut to the days the run rebuilds (macros/run_context/run_context.sql); plain dbt, without it, a day."""
    env = {"DAYCLOSE_TARGET": target.name, "DAYCLOSE_BATCH_SIZE": "month"}
    if target.duckdb_path is not None:
        env["DAYCLOSE_DUCKDB"] = str(target.duckdb_path)
        env["DAYCLOSE_DUCKDB_BLOCK_MEMORY"] = os.environ.get("DAYCLOSE_DUCKDB_BLOCK_MEMORY") or block_memory()
    elif target.name == "spark":
        env["DAYCLOSE_SCHEMA"] = target.schema
        env["DAYCLOSE_SPARK_MASTER"] = spark_master()
        env["DAYCLOSE_SPARK_MEMORY"] = spark_memory()
        env["DAYCLOSE_SPARK_DIR"] = str(target.spark_dir)
    else:
        env["DAYCLOSE_SCHEMA"] = target.schema
        env.update(postgres_env())
        env["PGOPTIONS"] = postgres_options(os.environ.get("PGOPTIONS", ""))
    return env


def spark_master() -> str:
    """The in-process Spark's master: DAYCLOSE_SPARK_MASTER, else local[2] (two cores)."""
    return os.environ.get("DAYCLOSE_SPARK_MASTER") or "local[2]"


def spark_memory() -> str:
    """The in-process Spark's heap (spark.driver.memory, where its tasks run in local mode):
    DAYCLOSE_SPARK_MEMORY, else 4g (Spark's own default is 1g; docs/spark.md)."""
    return os.environ.get("DAYCLOSE_SPARK_MEMORY") or "4g"


def spark_settings(target: Target) -> dict[str, str]:
    """The settings of the in-process SparkSession, the same as profiles.yml.example's
    `spark` output gives dbt-spark (its `server_side_parameters`): whichever of dayclose's
    Python (dayclose.warehouse) and dbt-spark asks first starts the one JVM with them, and the
    other gets that session (SparkSession.builder.getOrCreate)."""
    folder = target.spark_dir
    return {
        "spark.master": spark_master(),
        "spark.app.name": "dayclose",
        "spark.sql.warehouse.dir": str(folder / "warehouse"),
        "spark.hadoop.javax.jdo.option.ConnectionURL": (
            f"jdbc:derby:;databaseName={folder / 'metastore_db'};create=true"
        ),
        "spark.driver.extraJavaOptions": f"-Dderby.system.home={folder}",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "4",
        "spark.driver.memory": spark_memory(),
        # Spark's advice on HotSpot: a generated method above 8000 bytes of bytecode is never
        # compiled by the JIT, so Spark runs such a plan without whole-stage code generation
        "spark.sql.codegen.hugeMethodLimit": "8000",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        # dbt-spark sets it for its sessions; the same for ours (a cast that fails gives null)
        "spark.sql.ansi.enabled": "false",
    }


def block_memory(physical: int | None = None) -> str:
    """DuckDB's block_allocator_memory for dbt's sessions (profiles.yml.example): 2GB, or a
    quarter of the machine's memory when that is less (DuckDB refuses more than 80% of it,
    and keeps what it takes until the database closes)."""
    if physical is None:
        try:
            physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError):
            physical = 0
    return f"{min(2000, physical // 4 // 1_000_000)}MB"


def postgres_options(options: str) -> str:
    """PGOPTIONS for dbt's sessions: the user's, with Postgres' JIT compiler off unless they
    set it. The nightly statements read a window of days, but their cost estimates grow with
    the tables and cross the JIT thresholds, and compiling a statement of a hundred functions
    then costs more than running it."""
    if "jit" in options:
        return options
    return f"{options} -c jit=off".strip()


def profiles_dir(target: Target) -> Path:
    """DBT_PROFILES_DIR if the user set one, else a copy of profiles.yml.example."""
    if os.environ.get("DBT_PROFILES_DIR"):
        return Path(os.environ["DBT_PROFILES_DIR"])
    folder = target.state_dir / "profiles"
    folder.mkdir(parents=True, exist_ok=True)
    example = PROJECT_DIR / "profiles.yml.example"
    dest = folder / "profiles.yml"
    if not dest.exists() or dest.read_bytes() != example.read_bytes():
        shutil.copyfile(example, dest)
    return folder
