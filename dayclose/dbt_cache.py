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
dbtClassMixin.json_schema) with cached versions of themselves; where they are not what this
module expects (another dbt-common), it does nothing and dbt runs as it always has.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import inspect
import json
import marshal
import os
import sys
import tempfile
import threading
from pathlib import Path
from types import CodeType
from typing import Any

MAX_TEMPLATES = 20_000  # above it, a rewrite keeps only what the process used
PACKAGES = ("dbt_", "jinja2-", "mashumaro-")  # whose versions the cached values depend on


@dataclasses.dataclass
class _Cache:
    path: Path
    versions: tuple[str, ...]
    templates: dict[str, CodeType]
    schemas: dict[str, str]  # as JSON text
    used: set[str] = dataclasses.field(default_factory=set)
    changed: bool = False


_lock = threading.RLock()
_cache: _Cache | None = None  # None: off, or not read yet
_patched: bool | None = None  # None: not tried yet


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
    empty = _Cache(path, versions, {}, {})
    try:
        with open(path, "rb") as fh:
            stored = marshal.load(fh)
    except (OSError, EOFError, ValueError, TypeError):
        return empty
    if not (
        isinstance(stored, dict)
        and stored.get("versions") == versions
        and isinstance(stored.get("templates"), dict)
        and isinstance(stored.get("schemas"), dict)
        and all(isinstance(code, CodeType) for code in stored["templates"].values())
        and all(isinstance(text, str) for text in stored["schemas"].values())
    ):
        return empty
    return _Cache(path, versions, stored["templates"], stored["schemas"])


def enable() -> None:
    """Put the cache in place for this process's dbt invocations: dbt-common's two methods
    replaced once, the cache file read once per cache folder (a no-op when off)."""
    global _cache, _patched
    with _lock:
        if _patched is None:
            _patched = _install_compile() | _install_json_schema()
        folder = cache_dir()
        if not _patched or folder is None:
            _cache = None
            return
        path = folder / f"dbt-{sys.implementation.cache_tag}.marshal"  # marshal's format is the interpreter's
        if _cache is None or _cache.path != path:
            _cache = _read(path, package_versions())


def save() -> None:
    """Write the cache file if this process computed anything new since it was read (atomic)."""
    with _lock:
        cache = _cache
        if cache is None or not cache.changed:
            return
        templates = cache.templates
        if len(templates) > MAX_TEMPLATES:
            templates = {key: code for key, code in templates.items() if key in cache.used}
        data = {"versions": cache.versions, "templates": templates, "schemas": cache.schemas}
        try:
            cache.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd, temp = tempfile.mkstemp(dir=cache.path.parent, prefix=".dbt-", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as fh:
                    marshal.dump(data, fh)
                os.replace(temp, cache.path)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(temp)
        except (OSError, ValueError):
            return  # a cache that cannot be written costs time, never a result
        cache.changed = False


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
            with _lock:
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
            with _lock:
                cache.schemas[key] = text
                cache.changed = True
        return schema

    cached_json_schema._dayclose_cached = True  # type: ignore[attr-defined]
    dbtClassMixin.json_schema = classmethod(functools.lru_cache(cached_json_schema))  # type: ignore[assignment]
    return True
