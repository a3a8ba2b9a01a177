"""Calling dbt: one in-process invocation per step, through dbt's own runner.

The Prefect flows pass a runner of their own (prefect-dbt's PrefectDbtRunner,
each dbt node a task); the CLI uses dbt's dbtRunner. Both take the same
arguments, built here.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date, datetime
from functools import partial
from pathlib import Path
from typing import Any

from dayclose import dbt_cache, dbt_overhead
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
def _environment(values: dict[str, str]) -> Iterator[None]:
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

    `extra_vars` are project variables (--vars); per-run values go to `invoke`.
    """
    state = target.state_dir
    args = [
        *(["--quiet"] if quiet else []),
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
        str(state / "logs"),
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


Invoker = Callable[[list[str]], Any]


@dataclass
class _Parse:
    """A parse of the project started ahead of the run's dbt step, or dbt's import alone (see `prepare`)."""

    key: tuple[str, ...]
    manifest: Any = None
    thread: threading.Thread = field(init=False)
    cpus: frozenset[int] = frozenset()  # the caller's CPUs, one of them lent to the parse (_lend_core)
    waited: threading.Event = field(default_factory=threading.Event)  # the run waits for it
    to_keep: Path | None = None  # a partial-parse state to keep during the run's dbt step


_parse: _Parse | None = None


def _parse_key(target: Target, args: list[str]) -> tuple[str, ...]:
    """What decides the parsed project: the target, its state folder and the --vars."""
    given = args[args.index("--vars") + 1] if "--vars" in args else ""
    return (target.name, str(target.state_dir), given)


def prepare(target: Target, extra_vars: dict[str, Any] | None = None, own_runner: bool = False) -> None:
    """Import dbt and parse the project in a background thread while the run loads.

    Importing dbt is seconds of Python (dbt-core builds its dataclass serializers at import),
    and so is parsing the project: 10 s in a new state folder, about 2 s to find that nothing
    changed since the last run. Started when a run begins, both overlap the load and the
    window's look-ups. The parse writes dbt's partial-parse state; `invoke` waits for it and
    hands the parsed manifest to dbt's runner, so the run's dbt step does not parse again (a
    runner of its own, prefect-dbt's, parses again but finds the state just written). The
    per-run values are read only when executing (macro run_var), so the parse does not depend
    on them. A parse that fails is left to fail again, with its message, in the run's own dbt
    step. The engine's driver, which the run and the adapter both import, is imported first,
    in the caller's thread, so that the two threads do not import it at once.
    Both dbt steps read and extend the cache of dbt's compiled templates and config schemas
    (dayclose.dbt_cache), which spares each new process compiling them again.

    `own_runner`: the run's dbt step uses a runner that parses by itself (prefect-dbt's). The
    thread then parses only where dbt has no partial-parse state yet (a first build: the full
    parse moves beside the load, and the runner finds the state); otherwise it only imports
    dbt, so that a night does not parse twice.
    """
    global _parse
    finish_preparing()  # never two dbt invocations at once in this process
    importlib.import_module("duckdb" if target.name == "duckdb" else "psycopg2")
    # no manifest.json: the run writes it after its build when it changed (_write_artifacts)
    args = ["--quiet", *dbt_args(target, ["parse", "--no-write-json"], extra_vars=extra_vars)]
    full_parse = not (target.dbt_target_dir / "partial_parse.msgpack").exists()
    if own_runner and not full_parse:
        args = []  # import only
    parse = _Parse(_parse_key(target, args), cpus=_cpus() if full_parse else frozenset())
    parse.thread = threading.Thread(
        target=_parse_quietly, args=(parse, target, args), name="dayclose-dbt-parse", daemon=True
    )
    _lend_core(parse.cpus, parse=False)  # before the thread starts: it takes back what it lends itself
    try:
        parse.thread.start()
    except BaseException:
        _give_back_cores(parse.cpus)
        raise
    _parse = parse


def finish_preparing() -> _Parse | None:
    """Wait for the parse `prepare` started, if any, and take it."""
    global _parse
    parse, _parse = _parse, None
    if parse is not None:
        try:
            parse.waited.set()
            parse.thread.join()
        finally:
            _give_back_cores(parse.cpus)
    return parse


def _cpus() -> frozenset[int]:
    """The CPUs the calling thread may run on, where a core can be lent (see _lend_core): none
    where the system cannot say, or where this process's threads cannot be listed
    (/proc/self/task, to give the core back to every thread)."""
    try:
        cpus = frozenset(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return frozenset()
    return cpus if os.path.exists(f"/proc/self/task/{threading.get_native_id()}") else frozenset()


def _narrowed(cpus: frozenset[int]) -> tuple[set[int], set[int]]:
    """The two CPU sets _lend_core makes of `cpus`: the parse's (the highest), the others."""
    return {max(cpus)}, set(cpus - {max(cpus)})


def _lend_core(cpus: frozenset[int], parse: bool) -> None:
    """While the parse runs, one of the caller's CPUs is the parse thread's alone.

    The parse is Python, one thread; beside it the load and the window's look-up keep DuckDB's
    threads (or the loader's) busy on every core. The parse is the longer of the two in a first
    build, and every thread the scheduler shared the two cores between slowed it: on a 2-core
    machine, a cold first build of 30 days of 100,000 sales waited for the parse about a second
    after the load and look-up were done. With the parse thread on one core and the thread that
    loads (and so every thread it starts, DuckDB's workers included) on the others, three pairs
    taking turns: 13.1-14.4 s -> 12.7-13.3 s. Only for a full parse (no partial-parse state
    yet): on a night, dbt's import and a partial parse take about as long as the load, and the
    lent core made nights 0.05 s slower (3.41-3.57 s -> 3.46-3.68 s, four pairs). `parse`: called
    by the parse thread (which takes the highest CPU), else by the caller (which keeps the
    others). Nothing is done with fewer than two CPUs.
    """
    if len(cpus) < 2:
        return
    theirs, others = _narrowed(cpus)
    with contextlib.suppress(OSError):
        os.sched_setaffinity(0, theirs if parse else others)


def _give_back_cores(cpus: frozenset[int]) -> None:
    """The threads _lend_core narrowed back on all of `cpus`.

    Those on the parse's CPU or on the others: the calling thread first, so that a thread it
    starts from now on has them all, then every thread of the process, including those the
    loader started meanwhile, again until a pass finds none left (a thread started during a
    pass by one not reached yet). Called when the parse ends, so that a load still running gets
    the parse's core, and when the run takes the parse (finish_preparing).
    """
    if len(cpus) < 2:
        return
    narrowed = _narrowed(cpus)

    def widen(tid: int) -> bool:
        with contextlib.suppress(OSError):  # a thread that has ended meanwhile
            if os.sched_getaffinity(tid) in narrowed:
                os.sched_setaffinity(tid, cpus)
                return True
        return False

    widen(0)
    for _ in range(10):
        try:
            tids = [int(tid) for tid in os.listdir("/proc/self/task")]
        except OSError:
            return
        if not [tid for tid in tids if widen(tid)]:
            return


def _parse_quietly(parse: _Parse, target: Target, args: list[str]) -> None:
    _lend_core(parse.cpus, parse=True)
    try:
        _import_and_parse(parse, target, args)
    finally:
        _give_back_cores(parse.cpus)


def _import_and_parse(parse: _Parse, target: Target, args: list[str]) -> None:
    try:
        dbt_cache.enable()
        dbt_overhead.install()
        from dbt.cli.main import dbtRunner

        importlib.import_module(f"dbt.adapters.{target.name}")
        if not args:
            return
        with _dbt_call(target, dbt_env(target)):
            result = dbtRunner().invoke(args)
        dbt_cache.save()
    except Exception:  # noqa: BLE001 - the run's own dbt step parses again and reports it
        return
    if result.success:
        parse.manifest = result.result
        state = target.dbt_target_dir / "partial_parse.msgpack"
        if parse.waited.is_set():
            parse.to_keep = state  # the run waits for this thread: kept while its dbt step runs
        else:
            _keep_state(state)  # the run is still loading: time to spare


def _keep_state(state: Path) -> None:
    """dbt_cache.prime_manifest: the next run reads the state from the cache, not decoding it
    (0.26 s of its partial parse). A state not kept costs the next run time, never a result."""
    with contextlib.suppress(Exception):
        dbt_cache.prime_manifest(state)


def _default_invoker(args: list[str], manifest: Any = None) -> Any:
    """dbt's own runner; with a parsed manifest, dbt skips parsing."""
    from dbt.cli.main import dbtRunner

    return dbtRunner(manifest=manifest).invoke(args)


@contextmanager
def _dbt_call(target: Target, env: dict[str, str]) -> Iterator[None]:
    """A dbt invocation's surroundings: its environment variables, then the DuckDB file released."""
    with _environment(env):
        try:
            yield
        finally:
            if target.name == "duckdb":
                _release_duckdb()


def _release_duckdb() -> None:
    """Close the DuckDB database dbt-duckdb keeps open after an invocation.

    dbt-duckdb caches its environment (and the file's lock) for the life of the process;
    dayclose releases it so that the file is locked only while a step really runs.
    """
    from dbt.adapters.duckdb.connections import DuckDBConnectionManager as manager

    with manager._LOCK:
        if manager._ENV is not None:
            manager._ENV.close()
            manager._ENV = None


def _write_artifacts(target: Target, manifest: Any, run_results: Any) -> None:
    """dbt's artifacts of a run handed the parsed manifest: run_results.json, and manifest.json
    when the project was parsed again since it was last written.

    dbt writes manifest.json after every run (0.3 s of a 6 s night, for 1.3 MB that the night
    before wrote the same). The partial-parse state is rewritten whenever dbt parses anything
    again (a changed file, --vars, the environment it reads); while it is older than
    manifest.json, the project dbt ran is the one manifest.json describes (publication reads
    the published models from it).
    """
    folder = target.dbt_target_dir
    if hasattr(run_results, "write"):
        run_results.write(str(folder / "run_results.json"))
    written, parsed = folder / "manifest.json", folder / "partial_parse.msgpack"
    if written.exists() and parsed.exists() and parsed.stat().st_mtime_ns < written.stat().st_mtime_ns:
        return
    from dbt.parser.manifest import write_manifest

    write_manifest(manifest, str(folder))


RUN_VARS = ("as_of", "rebuilt_from", "rebuilt_to", "run_id", "restate_reason")


def run_env(run_vars: dict[str, Any] | None = None) -> dict[str, str]:
    """The per-run values as DAYCLOSE_RUN_* variables (macro run_var), unset ones empty.

    Not --vars: dbt re-parses the whole project whenever --vars change (seconds), and
    every run has a new as-of and run id.
    """
    values = dict(run_vars or {})
    unknown = set(values) - set(RUN_VARS)
    if unknown:
        raise ValueError(f"not per-run values: {sorted(unknown)} (pass them as --vars)")
    if isinstance(values.get("as_of"), datetime):
        values["as_of"] = values["as_of"].strftime("%Y-%m-%d %H:%M:%S")
    return {f"DAYCLOSE_RUN_{name.upper()}": str(values.get(name) or "") for name in RUN_VARS}


def invoke(
    target: Target,
    args: list[str],
    invoker: Invoker | None = None,
    run_vars: dict[str, Any] | None = None,
) -> DbtOutcome:
    """Run dbt in this process and reduce its result to what dayclose reports.

    `run_vars`: the per-run values (RUN_VARS) the models read through macro run_var.
    """
    parse = finish_preparing()
    manifest = parse.manifest if parse is not None and parse.key == _parse_key(target, args) else None
    own_artifacts = invoker is None and manifest is not None
    if own_artifacts:
        args = [*args, "--no-write-json"]  # written below, manifest.json only when it changed
    dbt_cache.enable()
    dbt_overhead.install()
    keeper = None
    if parse is not None and parse.to_keep is not None and invoker is None and manifest is not None:
        # beside dbt's build (in a first build mostly SQL, which leaves Python free), when dbt
        # builds on the parsed project: not beside a runner or a build that parses by itself
        # (it reads the state, and may write it)
        keeper = threading.Thread(
            target=_keep_state, args=(parse.to_keep,), name="dayclose-keep-state", daemon=True
        )
        keeper.start()
    try:
        with _dbt_call(target, {**dbt_env(target), **run_env(run_vars)}):
            result = (invoker or partial(_default_invoker, manifest=manifest))(args)
    finally:
        if keeper is not None:
            keeper.join()
    dbt_cache.save()
    run_results = getattr(result, "result", None)
    if own_artifacts:
        _write_artifacts(target, manifest, run_results)
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
