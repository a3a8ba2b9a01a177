"""What dbt computes the same way in every process, kept from one run to the next.

Each dbt process compiles every Jinja template it renders (dbt's and dayclose's macros, the
models and tests at parse time) to Python code, and builds the JSON schema of every config
class it validates (each model's config, the project, the profile). dbt keeps both in memory
for the life of the process only, so each run paid them again. On a 2-core machine, with the
cache (three pairs each, 30 days of 100,000 sales): a DuckDB night 12.5 to 13.1 s -> 9.9 to
10.9 s; a first build 33.3 to 34.4 s -> 30.6 to 32.2 s (its parse validates every node's
config, against schemas that took 3 s to build).

Both are pure functions of their inputs: the compiled code of a template, of its source and
the environment's class (Jinja's own bytecode cache keys it the same way: dbt renders from
strings, which Jinja's cache does not cover); a class's schema, of the installed versions of
dbt, Jinja and mashumaro. This module keeps them in one file per Python version under the
cache folder (DAYCLOSE_CACHE_DIR, default $XDG_CACHE_HOME/dayclose or ~/.cache/dayclose;
`off` turns the cache off), read once per process and rewritten, whole and atomically, after
a dbt step that computed something new. A file written by other versions of those packages,
unreadable or of another shape is ignored and replaced. Code is loaded from it as Python
loads its own __pycache__: whoever can write the folder can run code as you (it is created
private to its owner).

It works by replacing two of dbt-common's methods (MacroFuzzEnvironment.compile and
dbtClassMixin.json_schema) and one of dbt-core's (below) with cached versions of themselves,
and by shadowing `exec` in two modules (below); where one is not what this module expects
(another dbt-common, dbt-core, mashumaro or Python), that one is left as it is and dbt runs
as it always has.

A third kept value: the project dbt read from its partial-parse state. Each run that finds the
project unchanged first decodes dbt's partial_parse.msgpack (1.2 MB here) into its Manifest,
which generates and compiles mashumaro's decoders for every node class before decoding:
0.26 s of a night's 0.6 s parse on this machine, where loading the same Manifest from a pickle
takes 0.02 s. Manifest.from_msgpack is replaced by a version that keeps the decoded Manifest as
a pickle under manifests/ in the cache folder, named by the SHA-256 of the bytes decoded and the
packages' versions, and hands out a fresh copy of it; dbt's own checks of the partial-parse
state (versions, variables, profile, every file's checksum) then run on it as before. The
newest few are kept. dbt's Manifest.__reduce_ex__ is out of date (it names fields by position
and leaves one out), so the Manifest is pickled field by field here.

A fourth: the Python that dataclasses and mashumaro generate and compile for dbt's classes
(each dataclass's __init__, __repr__ and __eq__, each serializer): the same text in every
process, compiled again each time, a fifth of dbt's import. `cached_exec` takes the compiled
code from the file by the SHA-256 of the text (mashumaro's code builder for the life of the
process, dataclasses only while dbt is imported). And not a kept value but the same kind of
saving: dbt is imported, once per process, with mashumaro's serializers compiled lazily
(`_import_dbt`). dbt's own config classes already compile theirs at first use; mashumaro's
JSON-schema classes, which dbt-common imports, compile every method at import (half a second
here), and are used only to build a schema the cache above does not hold. Compiled at first
use, they are the same code. dbt's import (`dbt.cli.main` and the DuckDB adapter) on a 2-core
machine, eight rounds taking turns in fresh processes: 1.16 to 1.28 s before either, 0.96 to
1.08 s lazily (cache off), 0.80 to 0.94 s with both. Some of mashumaro's texts name helpers
after uuid4().hex or id() (UNSTABLE_NAME): those differ in every process, so they are
compiled each time and not kept, and the file stops growing once dbt's classes are in it
(mashumaro writes a set in hash order into the text of classes that forbid extra keys or
omit tuple defaults, which vary with PYTHONHASHSEED: dbt's classes do neither):
after a first build and a night, 825 templates and 1,342 code objects, 3.2 MB, and a second
and third night found everything in it and did not rewrite it.
"""

from __future__ import annotations

import contextlib
import copyreg
import dataclasses
import functools
import hashlib
import importlib
import inspect
import io
import json
import marshal
import os
import pickle
import re
import sys
import tempfile
import threading
from pathlib import Path
from types import CodeType
from typing import Any

MAX_TEMPLATES = 20_000  # above it, a rewrite keeps only what the process used
MAX_MANIFESTS = 8  # decoded partial-parse states kept (one per project state and target in use)
PACKAGES = ("dbt_", "jinja2-", "mashumaro-")  # whose versions the cached values depend on
FORMAT = 2  # of the file; 2: no generated text naming one process's random helpers
# Names mashumaro gives helpers with uuid4().hex or id() in them: a text naming one is written
# for one process only, so it is compiled each time and never kept (it would never be read).
UNSTABLE_NAME = re.compile(r"[0-9a-f]{32}|attrs_(?:registry_)?[0-9]{5,}")


@dataclasses.dataclass
class _Cache:
    path: Path
    versions: tuple[str, ...]
    templates: dict[str, CodeType]
    schemas: dict[str, str]  # as JSON text
    codes: dict[str, CodeType] = dataclasses.field(default_factory=dict)  # generated Python, by its text
    used: set[str] = dataclasses.field(default_factory=set)
    changed: bool = False


_lock = threading.RLock()
_cache: _Cache | None = None  # None: off, or not read yet
_patched: bool | None = None  # None: not tried yet
_manifests_read: set[str] = set()  # the partial-parse states this process decoded or loaded, by key


def cache_dir() -> Path | None:
    """The cache folder, or None when DAYCLOSE_CACHE_DIR is `off`."""
    given = os.environ.get("DAYCLOSE_CACHE_DIR", "").strip()
    if given.lower() == "off":
        return None
    if given:
        return Path(given)
    try:
        return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dayclose"
    except (RuntimeError, KeyError):  # no home folder to be found: no cache
        return None


def package_versions() -> tuple[str, ...]:
    """The installed versions of dbt's packages, Jinja and mashumaro (their dist-info folders)."""
    import dbt_common
    import jinja2
    import mashumaro

    found: set[str] = set()
    for module in (dbt_common, jinja2, mashumaro):
        folder = Path(module.__file__).resolve().parent.parent
        with contextlib.suppress(OSError):
            found.update(n for n in os.listdir(folder) if n.endswith(".dist-info") and n.startswith(PACKAGES))
    return tuple(sorted(found))


def _read(path: Path, versions: tuple[str, ...]) -> _Cache:
    empty = _Cache(path, versions, {}, {}, {})
    try:
        with open(path, "rb") as fh:
            stored = marshal.load(fh)
    except (OSError, EOFError, ValueError, TypeError):
        return empty
    if not (
        isinstance(stored, dict)
        and stored.get("format") == FORMAT
        and stored.get("versions") == versions
        and isinstance(stored.get("templates"), dict)
        and isinstance(stored.get("schemas"), dict)
        and isinstance(stored.get("codes"), dict)
        and all(isinstance(code, CodeType) for code in stored["templates"].values())
        and all(isinstance(text, str) for text in stored["schemas"].values())
        and all(isinstance(code, CodeType) for code in stored["codes"].values())
    ):
        return empty
    return _Cache(path, versions, stored["templates"], stored["schemas"], stored["codes"])


def enable() -> None:
    """Put the cache in place for this process's dbt invocations: the cache file read once
    per cache folder, then, once per process, dbt imported (_import_dbt) and dbt-common's,
    dbt-core's and mashumaro's methods replaced (no file read or written when off).

    The cached methods take no lock (a dict's or a set's item set is atomic; save() copies
    them): one that waited for _lock while another thread holds it here, importing dbt, could
    wait for ever on a module that thread is importing."""
    global _cache, _patched
    with _lock:
        folder = cache_dir()
        if folder is None:
            _cache = None
        else:
            # marshal's format is the interpreter's
            path = folder / f"dbt-{sys.implementation.cache_tag}.marshal"
            if _cache is None or _cache.path != path:
                _cache = _read(path, package_versions())
        if _patched is None:
            generated = _install(_install_exec)  # before dbt's import: its classes' code comes from the file
            _import_dbt()
            methods = (_install_compile, _install_json_schema, _install_manifest)
            _patched = any([generated, *[_install(method) for method in methods]])  # each tried
        if not _patched:
            _cache = None


def _import_dbt() -> None:
    """Import dbt with mashumaro's serializers compiled at their first use.

    While dbt and the JSON-schema classes of mashumaro that dbt-common imports are imported,
    mashumaro's default for classes that do not set it is lazy compilation (as dbt's own
    classes set it); the default is then put back. A lazily compiled method is compiled by
    the same code builder when first called, so it is the same method, later or never.
    2-core machine, dbt's import (`dbt.cli.main` and the DuckDB adapter):
    1.16 to 1.28 s -> 0.96 to 1.08 s (eight rounds each, taking turns, 2026-12-04)."""
    try:
        from mashumaro.config import BaseConfig
    except ImportError:
        return
    default = BaseConfig.__dict__.get("lazy_compilation")
    if default is not False:  # not the mashumaro this was written for: imported as it is
        return
    BaseConfig.lazy_compilation = True
    # the methods of dbt's dataclasses from the file, where dataclasses compiles as expected
    shadowed = _runs_exec(getattr(dataclasses, "_create_fn", None)) and _shadow_exec(dataclasses)
    try:
        importlib.import_module("mashumaro.jsonschema")
        importlib.import_module("dbt.cli.main")
    except ImportError:
        pass  # reported where dbt is imported next, outside this window
    finally:
        BaseConfig.lazy_compilation = default
        if shadowed:
            del dataclasses.exec  # type: ignore[attr-defined]


def cached_exec(source: Any, globals: dict | None = None, locals: Any = None, /) -> None:  # noqa: A002
    """exec, with the code compiled from a source text taken from the cache when it holds it.

    For the Python that dataclasses and mashumaro generate (each dataclass's __init__,
    __repr__, __eq__; each serializer), compiled again in every process for the same text:
    a fifth of dbt's import. Compiled as exec compiles a text in those modules, with the cache
    or without: file name "<string>", no future features (dont_inherit: this module's
    `annotations` must not leak into it). A text naming a helper of this process only
    (UNSTABLE_NAME) is compiled and not kept."""
    if globals is None:  # as exec does: the caller's scope, not this function's
        caller = sys._getframe(1)
        globals, locals = caller.f_globals, caller.f_locals if locals is None else locals
    cache = _cache
    if isinstance(source, CodeType):
        return exec(source, globals, locals)
    if cache is None or not isinstance(source, str):  # bytes too: compiled as exec would
        return exec(compile(source, "<string>", "exec", dont_inherit=True), globals, locals)
    key = hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()
    code = cache.codes.get(key)
    if code is None:
        code = compile(source, "<string>", "exec", dont_inherit=True)
        if UNSTABLE_NAME.search(source):  # looked for on a miss only: the file holds none
            return exec(code, globals, locals)
        cache.codes[key] = code
        cache.changed = True
    cache.used.add(key)
    return exec(code, globals, locals)


def _runs_exec(function: Any) -> bool:
    code = getattr(function, "__code__", None)
    return code is not None and "exec" in code.co_names


def _shadow_exec(module: Any) -> bool:
    """`module`'s calls of exec go through cached_exec (a module global shadows the builtin)."""
    if "exec" in vars(module):
        return False  # already shadowed, by this module or another: left as it is
    module.exec = cached_exec
    return True


def _install_exec() -> bool:
    """mashumaro's code builder compiles through cached_exec, for the life of the process
    (dbt's serializers are compiled at their first use, during the parse and the build);
    dataclasses only while dbt is imported (_import_dbt)."""
    from mashumaro.core.meta.code import builder

    if not (_runs_exec(builder.CodeBuilder.compile) and _runs_exec(getattr(dataclasses, "_create_fn", None))):
        return False  # not the mashumaro or Python this was written for
    return _shadow_exec(builder)


def _install(install: Any) -> bool:
    """One method replaced, or left as it is where dbt's code is not what it expects."""
    try:
        return bool(install())
    except (ImportError, AttributeError, TypeError, ValueError):
        return False


def _write_atomic(path: Path, data: bytes) -> None:
    """`path` holds `data` whole, or is as it was (a temporary file beside it, renamed over it)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem[:16]}-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(temp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)


def save() -> None:
    """Write the cache file if this process computed anything new since it was read (atomic)."""
    with _lock:
        cache = _cache
        if cache is None or not cache.changed:
            return
        cache.changed = False  # before the copies: what is added while they are made, next time
        # copies (atomic: no lock is taken where the cached methods add to them)
        templates, codes, used = dict(cache.templates), dict(cache.codes), set(cache.used)
        if len(templates) > MAX_TEMPLATES:
            templates = {key: code for key, code in templates.items() if key in used}
        if len(codes) > MAX_TEMPLATES:
            codes = {key: code for key, code in codes.items() if key in used}
        data = {
            "format": FORMAT,
            "versions": cache.versions,
            "templates": templates,
            "schemas": dict(cache.schemas),
            "codes": codes,
        }
        try:
            _write_atomic(cache.path, marshal.dumps(data))
        except (OSError, ValueError):
            cache.changed = True  # tried again after the next step; a cache that cannot be
            # written costs time, never a result


def template_key(env: Any, source: str, name: str | None, filename: str | None, defer_init: bool) -> str:
    """What a template's compiled code depends on: the source, where it comes from, and the
    environment: its class, code generator, extensions and every lexer setting."""
    settings = (
        f"{type(env).__module__}.{type(env).__qualname__}",
        env.code_generator_class.__qualname__,
        sorted(env.extensions),
        env.block_start_string,
        env.block_end_string,
        env.variable_start_string,
        env.variable_end_string,
        env.comment_start_string,
        env.comment_end_string,
        env.line_statement_prefix,
        env.line_comment_prefix,
        env.trim_blocks,
        env.lstrip_blocks,
        env.newline_sequence,
        env.keep_trailing_newline,
        env.optimized,
        repr(env.autoescape),
        name,
        filename,
        defer_init,
    )
    return hashlib.sha256(f"{settings!r}\0{source}".encode()).hexdigest()


def _install_compile() -> bool:
    from dbt_common.clients import jinja

    environment = jinja.MacroFuzzEnvironment
    compile_ = getattr(environment, "compile", None)
    if compile_ is None or getattr(compile_, "_dayclose_cached", False):
        return False
    if list(inspect.signature(compile_).parameters) != [
        "self",
        "source",
        "name",
        "filename",
        "raw",
        "defer_init",
    ]:
        return False  # not the Jinja this was written for

    @functools.wraps(compile_)
    def cached_compile(
        self: Any,
        source: Any,
        name: str | None = None,
        filename: str | None = None,
        raw: bool = False,
        defer_init: bool = False,
    ) -> Any:
        cache = _cache
        if cache is None or raw or not isinstance(source, str) or getattr(jinja, "MACRO_DEBUGGING", False):
            return compile_(self, source, name, filename, raw, defer_init)
        key = template_key(self, source, name, filename, defer_init)
        code = cache.templates.get(key)
        if code is None:
            code = compile_(self, source, name, filename, raw, defer_init)
            cache.templates[key] = code
            cache.changed = True
        cache.used.add(key)
        return code

    cached_compile._dayclose_cached = True  # type: ignore[attr-defined]
    environment.compile = cached_compile  # type: ignore[method-assign]
    return True


def schema_key(cls: type) -> str:
    """A config class's schema key: its name and its fields (the versions are the file's)."""
    fields = (
        [(f.name, repr(f.type)) for f in dataclasses.fields(cls)] if dataclasses.is_dataclass(cls) else []
    )
    digest = hashlib.sha256(repr(fields).encode()).hexdigest()[:16]
    return f"{cls.__module__}.{cls.__qualname__}:{digest}"


def _install_json_schema() -> bool:
    from dbt_common.dataclass_schema import dbtClassMixin

    current = dbtClassMixin.__dict__.get("json_schema")
    build = getattr(getattr(current, "__func__", None), "__wrapped__", None)  # under lru_cache
    if not isinstance(current, classmethod) or build is None or getattr(build, "_dayclose_cached", False):
        return False

    def cached_json_schema(cls: type) -> dict:
        cache = _cache
        if cache is None:
            return build(cls)
        key = schema_key(cls)
        stored = cache.schemas.get(key)
        if stored is not None:
            return json.loads(stored)
        schema = build(cls)
        text = json.dumps(schema)
        if json.loads(text) == schema:  # kept only where JSON gives it back equal (no tuples)
            cache.schemas[key] = text
            cache.changed = True
        return schema

    cached_json_schema._dayclose_cached = True  # type: ignore[attr-defined]
    dbtClassMixin.json_schema = classmethod(functools.lru_cache(cached_json_schema))  # type: ignore[assignment]
    return True


def manifest_key(data: bytes, decoder: Any, versions: tuple[str, ...]) -> str:
    """A decoded partial-parse state's name: the bytes, the decoder, the packages' versions and
    the interpreter (a pickle names classes and holds objects as this Python builds them)."""
    digest = hashlib.sha256()
    for part in (*versions, f"{decoder.__module__}.{decoder.__qualname__}", sys.implementation.cache_tag):
        digest.update(part.encode() + b"\0")
    digest.update(data)
    return digest.hexdigest()[:40]


def _rebuild_manifest(cls: type, fields: dict[str, Any]) -> Any:
    return cls.__post_deserialize__(cls(**fields))  # as from_msgpack ends: a new lock


def _manifest_fields(manifest: Any) -> tuple[Any, ...]:
    """How a Manifest is pickled here: its class and its fields by name, but its lock."""
    fields = {f.name: getattr(manifest, f.name) for f in dataclasses.fields(manifest) if f.name != "_lock"}
    return _rebuild_manifest, (type(manifest), fields)


def _pickle_manifest(manifest: Any) -> bytes:
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = {**copyreg.dispatch_table, type(manifest): _manifest_fields}
    pickler.dump(manifest)
    return buffer.getvalue()


def _store_manifest(folder: Path, key: str, pickled: bytes) -> None:
    try:
        _write_atomic(folder / f"{key}.pickle", pickled)
        kept = sorted(folder.glob("*.pickle"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
        for old in kept[MAX_MANIFESTS:]:
            old.unlink(missing_ok=True)
    except OSError:
        return  # a cache that cannot be written costs time, never a result


def prime_manifest(state: Path) -> bool:
    """Keep the partial-parse state `state` (a partial_parse.msgpack dbt has just written) as the
    next run will find it, where it is not kept yet: decoded as dbt decodes it when it reads
    it, through the cached from_msgpack. A parse that wrote the state (a first build, a changed
    project) does not read it back; without this the next run decoded it itself (0.26 s of a
    night's partial parse). Not one this process read already (where it cannot be kept, a night
    would decode it twice). True when it was decoded here and is kept."""
    cache, folder = _cache, cache_dir()
    if cache is None or folder is None:
        return False
    from dbt.contracts.graph.manifest import Manifest
    from dbt.parser.manifest import extended_mashumuro_decoder

    if not getattr(getattr(Manifest.from_msgpack, "__func__", None), "_dayclose_cached", False):
        return False
    try:
        data = state.read_bytes()
    except OSError:
        return False
    key = manifest_key(data, extended_mashumuro_decoder, cache.versions)
    kept = folder / "manifests" / f"{key}.pickle"
    if key in _manifests_read or kept.exists():
        return False  # read by this process (kept if it could be: not decoded twice), or kept
    Manifest.from_msgpack(data, decoder=extended_mashumuro_decoder)
    return kept.exists()


def _install_manifest() -> bool:
    from dbt.contracts.graph.manifest import Manifest

    current = Manifest.__dict__.get("from_msgpack")
    if (
        not isinstance(current, classmethod)
        or getattr(current.__func__, "_dayclose_cached", False)
        or not dataclasses.is_dataclass(Manifest)
        or "_lock" not in {f.name for f in dataclasses.fields(Manifest)}
        or not callable(getattr(Manifest, "__post_deserialize__", None))
    ):
        return False
    decode = [current]  # mashumaro compiles the decoder at its first call, replacing the method

    def cached_from_msgpack(cls: type, data: Any, decoder: Any = None, **kwargs: Any) -> Any:
        cache = _cache
        folder = cache_dir()
        if (
            cls is not Manifest
            or cache is None
            or folder is None
            or decoder is None  # dbt passes its own; without one, mashumaro's default: not kept
            or kwargs
            or not isinstance(data, bytes)
        ):
            return _decode(cls, data, decoder, **kwargs)
        key = manifest_key(data, decoder, cache.versions)
        _manifests_read.add(key)
        path = folder / "manifests" / f"{key}.pickle"
        try:
            stored = pickle.loads(path.read_bytes())
        except Exception:  # missing, damaged or of other code: decoded again and replaced
            stored = None
        if isinstance(stored, Manifest):
            with contextlib.suppress(OSError):  # the newest used are the ones kept
                os.utime(path)
            return stored
        manifest = _decode(cls, data, decoder)
        with contextlib.suppress(Exception):  # a Manifest not kept costs time, never a result
            _store_manifest(path.parent, key, _pickle_manifest(manifest))
        return manifest

    def _decode(cls: type, data: Any, decoder: Any, **kwargs: Any) -> Any:
        args = (data,) if decoder is None else (data, decoder)
        try:
            return decode[0].__get__(None, cls)(*args, **kwargs)
        finally:
            compiled = Manifest.__dict__.get("from_msgpack")
            if compiled is not installed:
                decode[0] = compiled
                Manifest.from_msgpack = installed  # type: ignore[method-assign]

    cached_from_msgpack._dayclose_cached = True  # type: ignore[attr-defined]
    installed = classmethod(cached_from_msgpack)
    Manifest.from_msgpack = installed  # type: ignore[method-assign]
    return True
