"""Calling dbt: in this process, through dbt's programmatic API (`dbtRunner`).

A run parses the project once, in a thread beside its load (dbt's own partial parsing makes
that quick once the target folder holds its state), and hands the parsed Manifest to the
runner of its build: `dbtRunner(manifest=...)` for the CLI, prefect-dbt's PrefectDbtRunner
(each dbt node a task) for the flows. Both take the same arguments, built here.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

from dayclose.settings import PROJECT_DIR, Target, dbt_env, profiles_dir


@dataclass
class NodeResult:
    """One dbt node's outcome: a model, seed or test."""

    name: str
    resource_type: str
    status: str
    message: str = ""
    failures: int | None = None
    tags: list[str] = field(default_factory=list)
    seconds: float = 0.0
    relation_name: str | None = None  # where a test's failing rows are stored

    @property
    def is_gate(self) -> bool:
        return self.resource_type == "test" and "gate" in self.tags


@dataclass
class DbtOutcome:
    success: bool
    nodes: list[NodeResult]
    error: str = ""

    def failed(self) -> list[NodeResult]:
        return [n for n in self.nodes if n.status in ("error", "fail", "runtime error")]

    def warned(self) -> list[NodeResult]:
        return [n for n in self.nodes if n.status == "warn"]


@contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """The process's environment with `values` set, restored afterwards.

    dbt reads the profile's and the models' settings from the environment (profiles.yml.example,
    macro run_var); a run sets them once, around all of its steps, so that its parse, its
    build and its own connections agree."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


def dbt_args(
    target: Target,
    command: list[str],
    window: tuple[date, date] | None = None,
    extra_vars: dict[str, Any] | None = None,
    quiet: bool = False,
) -> list[str]:
    """The argument list for one dbt invocation against `target`.

    `extra_vars` are project variables (--vars); per-run values go to `run_env`.
    """
    args = [
        # quiet: nothing of dbt's on the console, not even its errors (the summary names
        # what failed); all of it in dbt.log under the state folder
        *(["--log-level", "none", "--log-level-file", "debug"] if quiet else []),
        # colour codes only for a terminal (not in a file, a pipe or Prefect's log)
        "--use-colors" if sys.stdout.isatty() else "--no-use-colors",
        *command,
        "--project-dir",
        str(PROJECT_DIR),
        "--profiles-dir",
        str(profiles_dir(target)),
        "--target",
        target.name,
        "--target-path",
        str(target.dbt_target_dir),
        "--log-path",
        str(target.state_dir / "logs"),
    ]
    if extra_vars:
        args += ["--vars", json.dumps(extra_vars)]
    if command[0] in ("build", "test"):
        # a test runs only when all its parents are selected: a sales run never tests units marts
        args += ["--indirect-selection", "cautious"]
    if command[0] == "build":
        # the dbt unit tests test the code, in the test suite; a night is gated by the data tests
        args += ["--exclude-resource-type", "unit_test"]
    if window is not None:
        start, end = window
        args += ["--event-time-start", start.isoformat(), "--event-time-end", end.isoformat()]
    return args


RUN_VARS = ("as_of", "rebuilt_from", "rebuilt_to", "run_id", "restate_reason")


def run_env(run_vars: dict[str, Any] | None = None) -> dict[str, str]:
    """The per-run values as DAYCLOSE_RUN_* variables (macro run_var), unset ones empty.

    Not --vars: dbt parses the whole project again whenever --vars change, and every run
    has a new as-of and run id. A model reads them only when it runs, so they never enter
    the parsed project.
    """
    values = dict(run_vars or {})
    unknown = set(values) - set(RUN_VARS)
    if unknown:
        raise ValueError(f"not per-run values: {sorted(unknown)} (pass them as --vars)")
    if isinstance(values.get("as_of"), datetime):
        values["as_of"] = values["as_of"].strftime("%Y-%m-%d %H:%M:%S")
    return {f"DAYCLOSE_RUN_{name.upper()}": str(values.get(name) or "") for name in RUN_VARS}


def run_environment(target: Target, run_vars: dict[str, Any] | None = None) -> dict[str, str]:
    """Everything a run's dbt invocations read from the environment: the profile's settings
    and the per-run values."""
    return {**dbt_env(target), **run_env(run_vars)}


def parse(target: Target, extra_vars: dict[str, Any] | None = None) -> Any:
    """dbt's parse of the project (partial where dbt's state allows it): the Manifest, or None
    when it fails (the build then parses by itself and reports why)."""
    from dbt.cli.main import dbtRunner

    result = dbtRunner().invoke(["--quiet", *dbt_args(target, ["parse"], extra_vars=extra_vars)])
    return result.result if result.success else None


def start_parse(target: Target, extra_vars: dict[str, Any] | None = None) -> Future[Any]:
    """`parse` in a thread of its own, so that it runs while the run loads its batches."""
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dayclose-dbt-parse")
    try:
        return executor.submit(parse, target, extra_vars)
    finally:
        executor.shutdown(wait=False)


Invoker = Callable[[list[str]], Any]  # a runner's invoke: dbt's arguments -> dbt's result
RunnerFactory = Callable[[Any], Invoker]  # a parsed Manifest (or None) -> an Invoker


def dbt_runner(manifest: Any) -> Invoker:
    """dbt's own runner; with a parsed manifest, dbt does not parse again."""
    from dbt.cli.main import dbtRunner

    return dbtRunner(manifest=manifest).invoke


def invoke(args: list[str], runner: RunnerFactory | None = None, manifest: Any = None) -> DbtOutcome:
    """Run dbt in this process and reduce its result to what dayclose reports.

    `runner`: makes the runner from the parsed `manifest` (the flows pass prefect-dbt's);
    by default dbt's own."""
    try:
        result = (runner or dbt_runner)(manifest)(args)
    finally:
        release_duckdb()
    if isinstance(getattr(result, "exception", None), KeyboardInterrupt):
        # Ctrl-C or SIGTERM (dayclose.errors.Terminated) while dbt ran: dbt cancelled its
        # queries and returned; the run stops here too
        raise result.exception
    run_results = getattr(result, "result", None)
    nodes: list[NodeResult] = []
    for r in getattr(run_results, "results", None) or []:
        node = r.node
        nodes.append(
            NodeResult(
                name=node.name,
                resource_type=str(getattr(node.resource_type, "value", node.resource_type)),
                status=str(getattr(r.status, "value", r.status)),
                message=r.message or "",
                failures=r.failures,
                tags=list(getattr(node, "tags", []) or []),
                seconds=float(r.execution_time or 0.0),
                relation_name=getattr(node, "relation_name", None),
            )
        )
    error = ""
    if getattr(result, "exception", None) is not None:
        error = str(result.exception)
    return DbtOutcome(success=bool(result.success), nodes=nodes, error=error)


def release_duckdb() -> None:
    """Close the DuckDB database dbt-duckdb keeps open after an invocation, if any.

    dbt-duckdb keeps one database open for the life of the process (its profile setting
    keep_open, true by default), which spares reopening the file for every node of a build.
    Its file lock would then shut out every other process (a readers'
    export, plain dbt, a reader) as long as this one lives: a long-lived process (a test
    session, a Prefect worker) releases it through the adapter's close_all_connections."""
    if "dbt.adapters.duckdb" not in sys.modules:
        return
    from dbt.adapters.duckdb.connections import DuckDBConnectionManager

    DuckDBConnectionManager.close_all_connections()


def run_command(target: Target, command: list[str], run_vars: dict[str, Any] | None = None) -> DbtOutcome:
    """One dbt command against `target` outside a run (`docs generate`, the dbt unit tests)."""
    with environment(run_environment(target, run_vars)):
        return invoke(dbt_args(target, command, quiet=True))
