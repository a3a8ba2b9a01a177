"""The cache of dbt's compiled templates and config schemas (dayclose/dbt_cache.py).

Each test reads the cache from its own folder, as a new process would: the module's state is
reset, the file read again, and what was compiled or built before must come from the file,
give the same results, and never stand in for a different input.
"""

from __future__ import annotations

import json
import marshal
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from dbt_common.clients.jinja import get_template
from dbt_common.dataclass_schema import ValidationError

from dayclose import dbt_cache

SOURCE = "{% set n = 21 %}{% for i in range(2) %}{{ n * (i + 1) }} {% endfor %}"


@pytest.fixture
def cache_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("DAYCLOSE_CACHE_DIR", str(folder))
    monkeypatch.setattr(dbt_cache, "_cache", None)
    dbt_cache.enable()
    assert dbt_cache._cache is not None, "the cache did not install over dbt-common's methods"
    return folder


def _new_process() -> dbt_cache._Cache:
    """What a new process sees: the module's cache dropped and the file read again."""
    dbt_cache._cache = None
    dbt_cache.enable()
    assert dbt_cache._cache is not None
    return dbt_cache._cache


def _render(source: str, native: bool = False):
    return get_template(source, {}, native=native).render({})


def _cache_file(folder: Path) -> Path:
    return folder / f"dbt-{sys.implementation.cache_tag}.marshal"


def test_a_template_compiled_once_comes_from_the_file_in_the_next_process(cache_folder: Path) -> None:
    assert _render(SOURCE) == "21 42 "
    dbt_cache.save()
    assert _cache_file(cache_folder).exists()

    cache = _new_process()
    assert len(cache.templates) == 1
    assert _render(SOURCE) == "21 42 "
    assert not cache.changed, "the template was compiled again instead of read from the file"

    assert _render(SOURCE.replace("21", "20")) == "20 40 "  # another source: compiled, not the cached one
    assert cache.changed and len(cache.templates) == 2


def test_the_text_and_the_native_environment_keep_their_own_code(cache_folder: Path) -> None:
    # dbt renders configs in its native environment (values keep their types) and SQL as text:
    # one source, two compiled forms; the cache must never hand one to the other
    number = "{{ (1 + 1) | as_number }}"
    assert _render(number) == "2"
    assert _render(number, native=True) == 2
    dbt_cache.save()

    _new_process()
    assert _render(number, native=True) == 2
    assert _render(number) == "2"


def test_a_config_schema_from_the_file_validates_as_dbt_builds_it(cache_folder: Path) -> None:
    from dbt.contracts.project import Project

    Project.json_schema.cache_clear()  # the in-process cache per class: built again, into this cache
    built = json.loads(json.dumps(Project.json_schema()))
    assert dbt_cache._cache is not None and dbt_cache._cache.changed
    dbt_cache.save()

    Project.json_schema.cache_clear()
    cache = _new_process()
    assert any(key.startswith("dbt.contracts.project.Project:") for key in cache.schemas)
    assert Project.json_schema() == built
    assert not cache.changed
    with pytest.raises(ValidationError):  # the cached schema still refuses what dbt refuses
        Project.validate({"name": "x", "version": "1.0", "config-version": 2, "profile": 7})
    Project.validate({"name": "x", "version": "1.0", "config-version": 2, "profile": "x"})


def test_a_file_of_other_versions_or_damaged_is_ignored_and_replaced(cache_folder: Path) -> None:
    _render(SOURCE)
    dbt_cache.save()
    path = _cache_file(cache_folder)
    stored = marshal.loads(path.read_bytes())

    path.write_bytes(marshal.dumps({**stored, "versions": ("dbt_core-0.0.1.dist-info",)}))
    assert _new_process().templates == {}
    older = {key: value for key, value in stored.items() if key != "format"}
    path.write_bytes(marshal.dumps(older))  # written by an older dayclose: may hold unstable texts
    assert _new_process().templates == {}
    path.write_bytes(marshal.dumps(stored))
    assert len(_new_process().templates) == 1  # the same file with its format: read

    path.write_bytes(path.read_bytes()[:100])  # cut short, as by a full disk
    cache = _new_process()
    assert cache.templates == {}
    assert _render(SOURCE) == "21 42 "
    dbt_cache.save()
    assert marshal.loads(path.read_bytes())["versions"] == dbt_cache.package_versions()


def test_off_writes_nothing_and_an_unwritable_folder_costs_no_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dbt_cache, "_cache", None)
    monkeypatch.setenv("DAYCLOSE_CACHE_DIR", "off")
    dbt_cache.enable()
    assert dbt_cache._cache is None
    assert _render(SOURCE) == "21 42 "
    dbt_cache.save()

    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("DAYCLOSE_CACHE_DIR", str(blocker / "cache"))
    dbt_cache.enable()
    assert _render(SOURCE.replace("21", "4")) == "4 8 "
    dbt_cache.save()  # cannot create the folder: no error, the next run compiles again
    assert not (blocker / "cache").exists()


@pytest.fixture(scope="module")
def partial_parse_state(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """This project's partial-parse state as dbt writes it (a full parse on DuckDB, once)."""
    from dayclose.dbt_runner import _environment, dbt_args, invoke
    from dayclose.settings import resolve_target

    folder = tmp_path_factory.mktemp("parsed")
    with _environment({"DAYCLOSE_STATE_DIR": str(folder), "DAYCLOSE_DUCKDB": str(folder / "w.duckdb")}):
        target = resolve_target("duckdb")
        outcome = invoke(target, dbt_args(target, ["parse", "--no-write-json"], quiet=True))
        assert outcome.success, outcome.error
        return (target.dbt_target_dir / "partial_parse.msgpack").read_bytes()


def test_the_project_read_from_its_partial_parse_state_comes_from_the_file_in_the_next_process(
    cache_folder: Path, partial_parse_state: bytes
) -> None:
    from dbt.contracts.graph.manifest import Manifest
    from dbt.parser.manifest import extended_mashumuro_decoder

    decoded: list[int] = []

    def decoder(data: bytes) -> object:  # dbt's, counting its calls
        decoded.append(len(data))
        return extended_mashumuro_decoder(data)

    first = Manifest.from_msgpack(partial_parse_state, decoder=decoder)
    assert decoded and len(first.nodes) > 40
    kept = list((cache_folder / "manifests").glob("*.pickle"))
    assert len(kept) == 1
    # mashumaro compiled its decoder at that first call, replacing the method: put back
    assert getattr(Manifest.__dict__["from_msgpack"].__func__, "_dayclose_cached", False)

    _new_process()
    os.utime(kept[0], (1_000_000_000, 1_000_000_000))  # made long ago
    second = Manifest.from_msgpack(partial_parse_state, decoder=decoder)
    assert len(decoded) == 1, "decoded again instead of read from the file"
    assert kept[0].stat().st_mtime > time.time() - 600  # used: among the newest, the ones kept
    assert second.to_dict() == first.to_dict()
    assert second.state_check.to_dict() == first.state_check.to_dict()  # what partial parsing checks
    third = Manifest.from_msgpack(partial_parse_state, decoder=decoder)
    assert third is not second and third.nodes is not second.nodes  # dbt changes the one it gets

    kept[0].write_bytes(kept[0].read_bytes()[:1000])  # damaged: decoded again, and replaced
    assert Manifest.from_msgpack(partial_parse_state, decoder=decoder).to_dict() == first.to_dict()
    assert len(decoded) == 2
    Manifest.from_msgpack(partial_parse_state, decoder=decoder)
    assert len(decoded) == 2
    versions = dbt_cache.package_versions()
    key = dbt_cache.manifest_key(partial_parse_state, decoder, versions)
    assert kept[0].name == f"{key}.pickle"
    assert dbt_cache.manifest_key(partial_parse_state, decoder, ("dbt_core-0.0.1.dist-info",)) != key


def test_a_state_dbt_just_wrote_is_kept_for_the_next_process(
    cache_folder: Path, partial_parse_state: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dbt.contracts.graph.manifest import Manifest
    from dbt.parser.manifest import extended_mashumuro_decoder

    state = tmp_path / "partial_parse.msgpack"
    state.write_bytes(partial_parse_state)
    assert dbt_cache.prime_manifest(state) is True
    key = dbt_cache.manifest_key(
        partial_parse_state, extended_mashumuro_decoder, dbt_cache.package_versions()
    )
    kept = cache_folder / "manifests" / f"{key}.pickle"  # the name dbt's own read looks up
    assert kept.exists()
    assert dbt_cache.prime_manifest(state) is False  # kept already: not decoded again
    assert dbt_cache.prime_manifest(tmp_path / "missing.msgpack") is False
    kept.unlink()  # could not be kept (say, a full disk): this process read it, not decoded twice
    decoded: list[bytes] = []
    with monkeypatch.context() as patched:
        patched.setattr(Manifest, "from_msgpack", lambda *a, **k: decoded.append(a))
        assert dbt_cache.prime_manifest(state) is False and not decoded
    monkeypatch.setattr(dbt_cache, "_manifests_read", set())
    assert dbt_cache.prime_manifest(state) is True and kept.exists()  # a new process keeps it

    _new_process()
    os.utime(kept, (1_000_000_000, 1_000_000_000))
    read = Manifest.from_msgpack(partial_parse_state, decoder=extended_mashumuro_decoder)
    assert kept.stat().st_mtime > time.time() - 600  # read from the file
    assert (
        read.to_dict()
        == Manifest.from_msgpack(partial_parse_state, decoder=extended_mashumuro_decoder).to_dict()
    )


def test_the_parse_ahead_of_a_run_keeps_the_state_it_wrote(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """dbt_runner's parse thread primes the state after a parse that succeeded, while the run
    is not waiting for it yet; not after one that failed; and, when the run waits for it, the
    run's dbt step primes it beside dbt's build (with dbt's own runner, not another)."""
    import dbt.cli.main

    from dayclose import dbt_runner
    from dayclose.settings import resolve_target

    primed: list[Path] = []
    monkeypatch.setattr(dbt_cache, "prime_manifest", primed.append)
    monkeypatch.setenv("DAYCLOSE_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("DAYCLOSE_DUCKDB", str(tmp_path / "w.duckdb"))
    target = resolve_target("duckdb")
    for success in (False, True):

        class Runner:  # dbt's runner, its parse's outcome given
            outcome = type("Result", (), {"success": success, "result": "the manifest"})()

            def invoke(self, args: list[str]) -> object:
                return self.outcome

        monkeypatch.setattr(dbt.cli.main, "dbtRunner", Runner)
        parse = dbt_runner._Parse(("key",))
        dbt_runner._parse_quietly(parse, target, ["parse"])
        assert parse.manifest == ("the manifest" if success else None)
    assert primed == [target.dbt_target_dir / "partial_parse.msgpack"]
    state = target.dbt_target_dir / "partial_parse.msgpack"
    args = dbt_runner.dbt_args(target, ["build"])
    priming, building = threading.Event(), threading.Event()

    def prime_beside_the_build(path: Path) -> None:  # both must run at once, or neither goes on
        priming.set()
        assert building.wait(10), "not primed while dbt builds"
        primed.append(path)

    def build(args: list[str], manifest: object) -> object:
        building.set()
        assert priming.wait(10), "dbt built before the state was primed"
        return Runner.outcome

    monkeypatch.setattr(dbt_runner, "_write_artifacts", lambda *a: None)
    for invoker in (lambda args: Runner.outcome, None, "raises"):  # a runner of its own, then dbt's
        priming.clear()
        building.clear()
        parse = dbt_runner._Parse(dbt_runner._parse_key(target, args))

        class Blocking(Runner):  # the parse ends once the run waits for it (it finished loading)
            waited = parse.waited

            def invoke(self, args: list[str]) -> object:
                assert self.waited.wait(10)
                return self.outcome

        monkeypatch.setattr(dbt.cli.main, "dbtRunner", Blocking)
        monkeypatch.setattr(dbt_cache, "prime_manifest", prime_beside_the_build)
        parse.thread = threading.Thread(target=dbt_runner._parse_quietly, args=(parse, target, ["parse"]))
        parse.thread.start()
        monkeypatch.setattr(dbt_runner, "_parse", parse)
        if invoker == "raises":

            def failing(args: list[str], manifest: object) -> object:
                build(args, manifest)
                raise RuntimeError("the build failed")

            monkeypatch.setattr(dbt_runner, "_default_invoker", failing)
            with pytest.raises(RuntimeError, match="the build failed"):
                dbt_runner.invoke(target, args)
        else:
            monkeypatch.setattr(dbt_runner, "_default_invoker", build)
            dbt_runner.invoke(target, args, invoker)  # finish_preparing: the run waits
        assert parse.to_keep == state and parse.manifest == "the manifest"
    # not in the parse thread (the run waited); beside dbt's own build only, done when invoke ends
    assert primed == [state, state, state]


@pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="a core is lent to the parse only where the process has two or more",
)
def test_the_parse_has_a_core_of_its_own_while_it_runs_and_gives_it_back(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """dbt_runner.prepare: the parse thread on the highest CPU, the caller and every thread it
    starts meanwhile (the loader's, DuckDB's) on the others; once the parse ends, every one of
    them on all the CPUs (a load still running gets the core), and again when the run takes the
    parse (a thread narrowed since); on a night (dbt's partial-parse state there), nothing lent."""
    from dayclose import dbt_runner
    from dayclose.settings import resolve_target

    cpus = frozenset(os.sched_getaffinity(0))
    parse_cpu, others = {max(cpus)}, set(cpus - {max(cpus)})
    seen: dict[str, set[int]] = {}
    parses: list[set[int]] = []
    parsing, parsed, started, loaded = (threading.Event() for _ in range(4))

    def parse(*args: object) -> None:
        parses.append(os.sched_getaffinity(0))
        parsing.set()
        assert parsed.wait(10)

    def load() -> None:
        seen["loader, started"] = os.sched_getaffinity(0)
        started.set()
        assert loaded.wait(10)

    monkeypatch.setenv("DAYCLOSE_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("DAYCLOSE_DUCKDB", str(tmp_path / "w.duckdb"))
    monkeypatch.setattr(dbt_runner, "_import_and_parse", parse)
    target = resolve_target("duckdb")
    loader = threading.Thread(target=load)
    try:
        dbt_runner.prepare(target)
        assert parsing.wait(10)
        seen["caller"] = os.sched_getaffinity(0)
        loader.start()
        assert started.wait(10)
        parsed.set()
        dbt_runner._parse.thread.join(10)  # the parse ended; the run has not taken it yet
        seen["loader, the parse ended"] = os.sched_getaffinity(loader.native_id)
        seen["caller, the parse ended"] = os.sched_getaffinity(0)
        os.sched_setaffinity(loader.native_id, others)  # as if started during the parse's sweep
        dbt_runner.finish_preparing()
        seen["loader, the run took the parse"] = os.sched_getaffinity(loader.native_id)
        loaded.set()
        loader.join()
        target.dbt_target_dir.mkdir(parents=True, exist_ok=True)
        (target.dbt_target_dir / "partial_parse.msgpack").write_bytes(b"")
        parsed.clear()
        parsing.clear()
        dbt_runner.prepare(target)
        assert parsing.wait(10)
        seen["caller, a night"] = os.sched_getaffinity(0)
        parsed.set()
        dbt_runner.finish_preparing()
    finally:
        loaded.set()
        parsed.set()
        dbt_runner.finish_preparing()
        os.sched_setaffinity(0, cpus)
    assert parses == [parse_cpu, set(cpus)]
    assert seen == {
        "caller": others,
        "loader, started": others,
        "loader, the parse ended": set(cpus),
        "caller, the parse ended": set(cpus),
        "loader, the run took the parse": set(cpus),
        "caller, a night": set(cpus),
    }


def _probe(script: str, env: dict[str, str], *args: str) -> dict:
    """What `script` prints as JSON, run in a new interpreter with `env` added."""
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)


LAZY_PROBE = """
import dataclasses, json, sys
if sys.argv[1] == "enabled":
    from dayclose import dbt_cache
    dbt_cache.enable()
from mashumaro.config import BaseConfig
from mashumaro.jsonschema.models import JSONObjectSchema
from mashumaro.mixins.dict import DataClassDictMixin
from dbt.artifacts.resources import NodeConfig

def stubs(cls):  # its methods not compiled yet: stubs that compile them at their first call
    code = lambda m: (m.__func__ if isinstance(m, classmethod) else m).__code__
    methods = {k: code(m) for k, m in vars(cls).items() if k.startswith("__mashumaro_")}
    return sorted(k for k, c in methods.items() if "CodeBuilder" in c.co_names)

at_import = stubs(JSONObjectSchema)

@dataclasses.dataclass
class DefinedAfter(DataClassDictMixin):
    n: int = 1

schema = NodeConfig.json_schema()  # built as JSONObjectSchema objects, then their to_dict
print(json.dumps({
    "default": BaseConfig.lazy_compilation,
    "stubs_at_import": at_import,
    "stubs_after_use": stubs(JSONObjectSchema),
    "stubs_defined_after": stubs(DefinedAfter),
    "schema": schema,
    "round_trip": JSONObjectSchema.from_dict(schema).to_dict() == schema,
}))
"""


def test_dbt_is_imported_with_mashumaros_serializers_compiled_at_first_use(tmp_path: Path) -> None:
    """dbt_cache.enable imports dbt with mashumaro's serializers compiled lazily; the schemas
    they build are the same as without, and classes defined later compile as usual."""
    off = {"DAYCLOSE_CACHE_DIR": "off"}  # schemas built, not read from a file
    lazy, eager = _probe(LAZY_PROBE, off, "enabled"), _probe(LAZY_PROBE, off, "plain")
    assert eager["stubs_at_import"] == [] and "__mashumaro_to_dict__" in lazy["stubs_at_import"]
    assert "__mashumaro_to_dict__" not in lazy["stubs_after_use"]  # compiled when first called
    assert lazy["schema"] == eager["schema"] and len(json.dumps(lazy["schema"])) > 2000
    assert lazy["round_trip"] and eager["round_trip"]
    assert lazy["default"] is False and lazy["stubs_defined_after"] == []  # the default put back


GENERATED = "def double(x: int) -> str:\n    return str(x * 2)\n"


def test_generated_python_compiled_once_comes_from_the_file_in_the_next_process(cache_folder: Path) -> None:
    """The Python that dataclasses and mashumaro generate is compiled once (dbt_cache.cached_exec)
    and runs as exec would run it, without this module's future features."""
    namespace: dict = {}
    dbt_cache.cached_exec(GENERATED, namespace)
    assert namespace["double"](21) == "42"
    assert namespace["double"].__annotations__ == {"x": int, "return": str}  # not strings
    dbt_cache.save()

    cache = _new_process()
    assert len(cache.codes) == 1
    again: dict = {}
    dbt_cache.cached_exec(GENERATED, again)
    assert again["double"](5) == "10" and again["double"].__code__.co_filename == "<string>"
    assert not cache.changed, "the text was compiled again instead of read from the file"
    dbt_cache.cached_exec(GENERATED.replace("2", "3"), again)
    assert again["double"](5) == "15" and cache.changed and len(cache.codes) == 2

    def callers_scope() -> dict:
        marker = "the caller's"  # noqa: F841 - read by the executed text
        found: dict = {}
        dbt_cache.cached_exec("found['seen'] = marker", None)  # no globals: the caller's scope
        return found

    assert callers_scope() == {"seen": "the caller's"}

    # a text naming a helper of this process only (mashumaro's uuid4().hex names): not kept
    unstable = GENERATED.replace("double", "__double_9f3c29e1f1c043aea4da27687e65eb1e")
    kept = dict(cache.codes)
    dbt_cache.cached_exec(unstable, again)
    assert again["__double_9f3c29e1f1c043aea4da27687e65eb1e"](4) == "8"
    dbt_cache.cached_exec("holder = attrs_140234567890123", {"attrs_140234567890123": 1})  # an id()
    assert cache.codes == kept


def test_generated_python_runs_as_exec_would_with_the_cache_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dbt_cache, "_cache", None)
    monkeypatch.setenv("DAYCLOSE_CACHE_DIR", "off")
    dbt_cache.enable()
    assert dbt_cache._cache is None
    namespace: dict = {}
    dbt_cache.cached_exec(GENERATED, namespace)
    assert namespace["double"].__annotations__ == {"x": int, "return": str}  # not strings
    dbt_cache.cached_exec(GENERATED.replace("double", "twice").encode(), namespace)  # bytes, as exec takes
    assert namespace["twice"].__annotations__ == {"x": int, "return": str}


def test_the_file_is_rewritten_only_when_something_new_was_compiled(
    cache_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _render(SOURCE)
    dbt_cache.save()
    path = _cache_file(cache_folder)
    os.utime(path, (1_000_000_000, 1_000_000_000))
    before = path.stat()
    _render(SOURCE)  # from the cache: nothing new
    dbt_cache.save()
    after = path.stat()
    assert (after.st_ino, after.st_mtime) == (before.st_ino, before.st_mtime)

    def full_disk(path: Path, data: bytes) -> None:
        raise OSError(28, "No space left on device")

    _render(SOURCE.replace("21", "3"))
    with monkeypatch.context() as patched:
        patched.setattr(dbt_cache, "_write_atomic", full_disk)
        dbt_cache.save()  # fails quietly; what was new is written by the next save
    dbt_cache.save()
    assert path.stat().st_mtime > before.st_mtime
    assert len(_new_process().templates) == 2


CODES_PROBE = """
import dataclasses, json
from dayclose import dbt_cache
dbt_cache.enable()
import dbt.adapters.duckdb
from dbt.artifacts.resources import NodeConfig, TestConfig
from dbt.contracts.project import ProjectFlags
from mashumaro.core.meta.code import builder
# serializers compiled at first use, as a parse and a build do; some name random helpers
ProjectFlags.from_dict({})
for config in (NodeConfig, TestConfig):
    config.from_dict(config().to_dict())
cache = dbt_cache._cache
print(json.dumps({
    "codes": len(cache.codes),
    "compiled_here": cache.changed,
    "builder": builder.exec is dbt_cache.cached_exec,
    "dataclasses_after_import": "exec" in vars(dataclasses),
}))
dbt_cache.save()
"""


def test_dbts_generated_python_comes_from_the_file_in_the_next_process(tmp_path: Path) -> None:
    """dbt's import and serializers used as a parse uses them: a second process compiles
    nothing new, so the file is not rewritten and does not grow from night to night."""
    cache = {"DAYCLOSE_CACHE_DIR": str(tmp_path / "cache")}
    # other hash seeds: a text with a set written in hash order would be new in the second
    first = _probe(CODES_PROBE, {**cache, "PYTHONHASHSEED": "1"})
    second = _probe(CODES_PROBE, {**cache, "PYTHONHASHSEED": "2"})
    assert first["compiled_here"] and first["codes"] > 500  # dbt's dataclasses and serializers
    assert not second["compiled_here"] and second["codes"] == first["codes"]  # all from the file
    assert first["builder"] and not first["dataclasses_after_import"]  # dataclasses as it was


def test_the_cached_methods_never_wait_for_the_lock_enable_holds(cache_folder: Path) -> None:
    """enable() holds the module's lock while it imports dbt; a thread that compiles meanwhile
    (a dataclass defined in a module being imported) must not wait for it: it could wait on
    a module the importing thread waits for, for ever."""
    from dbt.contracts.project import Project

    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with dbt_cache._lock:
            held.set()
            release.wait(30)

    done: list[object] = []

    def compile_meanwhile() -> None:
        namespace: dict = {}
        dbt_cache.cached_exec(GENERATED.replace("2", "7"), namespace)
        done.append(namespace["double"](1))
        done.append(_render(SOURCE.replace("21", "5")))
        Project.json_schema.cache_clear()
        done.append(bool(Project.json_schema()))

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(10)
        worker = threading.Thread(target=compile_meanwhile)
        worker.start()
        worker.join(20)
        assert not worker.is_alive(), "a cache miss waited for the lock"
    finally:
        release.set()
        holder.join()
    assert done == ["7", "5 10 ", True]
    assert dbt_cache._cache is not None and dbt_cache._cache.changed
