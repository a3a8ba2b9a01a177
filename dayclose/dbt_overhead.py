"""dbt's work per node made cheaper, without changing what dbt does or writes.

A sales night runs 41 dbt nodes; after the SQL, most of its time is dbt's own Python, some
of it spent on things whose result never changes. `install` replaces four functions dbt calls
(protobuf's ParseDict and dbt's log-line scrubber where dbt-common's events call them, two of
dbt-common's own), for the life of the process, each by one that returns the same, or leaves
it as it is where dbt-common is not what it expects:

1. dbt's log events. dbt builds every event it fires as a protobuf message, at any log level
   (each SQL statement, each node's start and end, each cache action: about 1,700 in a sales
   night's parse and build), and twice: the event's data, then the envelope that carries it
   (level, time stamp, thread, invocation). Both come from a dict through protobuf's
   `ParseDict`, a walk of the message's descriptor in Python: 120 us for a SQL statement's
   event here, where the message's constructor takes the same dict in 7 us. dbt-common's
   `ParseDict` (the name its events module calls) becomes `parse_dict`: the constructor, given
   the dict where every value is a plain JSON value of its field's own type, with each time
   stamp (text in JSON, a message for the constructor) converted as ParseDict converts it (20
   us for that event); anything else (a value ParseDict would convert or refuse, a message not
   empty or of protobuf's own types, options) goes to ParseDict itself, so the message is the
   same, or the same error is raised. Each log line is then scrubbed of the values of the
   DBT_ENV_SECRET_ variables, which dbt finds by reading the whole environment again, line by
   line: the scrubber takes them from the environment in dbt's invocation context, which dbt
   reads once at the start of each invocation (as it reads everything else of the environment
   it uses), found again whenever the context holds another one, and from the process's
   environment where a thread has no context.
2. The source of a behaviour flag (a log field), which dbt-common finds through
   `inspect.stack()` for each flag of each adapter it builds: that reads the source lines of
   every frame of the stack (0.13 s of each process's first parse here). `behavior_flag_source`
   finds the same module without reading them.
3. agate's type testers: dbt builds one for each query whose result it reads, and each builds
   two date parsers; they hold no state between tables, and dbt already shares one for the
   tables without text columns. Each is now built once per set of text columns.

A sales night (DuckDB, 30 days of 100,000 sales, 2-core machine, medians of five pairs taking
turns): 7.68 -> 6.98 s with the first; 7.19 -> 7.10 s the third on top; 7.73 -> 6.87 s with
all three against none.
"""

from __future__ import annotations

import functools
import math
import sys
import threading
from collections.abc import Callable
from typing import Any

_lock = threading.Lock()
_installed: dict[str, bool] | None = None
_originals: dict[str, Any] = {}  # what each replaced, by name (for the tests)
_secrets: tuple[Any, list[str]] | None = None  # (the environment dbt read, its secrets): env_scrubber


def parse_dict(js_dict: Any, message: Any, **options: Any) -> Any:
    """protobuf's json_format.ParseDict(js_dict, message, **options), sooner."""
    from google.protobuf import json_format

    descriptor = message.DESCRIPTOR
    if (
        not options
        and type(js_dict) is dict
        and not descriptor.full_name.startswith("google.protobuf.")  # ParseDict reads these its own way
        and not message.ListFields()  # dbt passes an empty message; ParseDict clears some fields of others
    ):
        try:
            built = type(message)(**_constructor_values(descriptor, js_dict))
        except (_Unsure, TypeError, ValueError, AttributeError):
            pass  # ParseDict decides: the same message, or its own error
        else:
            message.CopyFrom(built)  # not MergeFrom: it round-trips through bytes, depth-limited
            return message
    return json_format.ParseDict(js_dict, message, **options)


class _Unsure(Exception):
    """A value the constructor might not take as ParseDict takes it."""


Convert = Callable[[Any], Any]
# per message type: field name -> (its value for the constructor, its oneof or None, whether
# None is a value of it rather than "unset")
_plans: dict[Any, dict[str, tuple[Convert, str | None, bool]]] = {}


def _constructor_values(descriptor: Any, values: dict) -> dict:
    """`values` as the message's constructor takes them to build what ParseDict builds; raises
    _Unsure on anything but the plain JSON values of the field's own type (ParseDict converts
    others, the constructor may take some of them otherwise, or refuse them)."""
    plan = _plans.get(descriptor)
    if plan is None:
        plan = _plans[descriptor] = {field.name: _field_plan(field) for field in descriptor.fields}
    out = {}
    oneofs = None
    for key, value in values.items():
        field = plan.get(key)
        if field is None:
            raise _Unsure  # a JSON name or no such field: ParseDict decides
        convert, oneof, none_is_value = field
        if value is None:
            if none_is_value:
                raise _Unsure
            continue  # ParseDict leaves the field unset
        if oneof is not None:  # also a proto3 `optional` field's own
            oneofs = oneofs or set()
            if oneof in oneofs:
                raise _Unsure  # two of a oneof: ParseDict's error
            oneofs.add(oneof)
        out[key] = convert(value)
    return out


def _field_plan(field: Any) -> tuple[Convert, str | None, bool]:
    kind = field.message_type
    oneof = field.containing_oneof.name if field.containing_oneof is not None else None
    if kind is not None and kind.GetOptions().map_entry:
        key, value = kind.fields_by_name["key"], kind.fields_by_name["value"]
        if key.type != key.TYPE_STRING or value.message_type is not None:
            return _never, oneof, False
        return functools.partial(_map, _SCALARS.get(value.type, _never)), oneof, False
    one = _single_plan(field)
    repeated = getattr(field, "is_repeated", None)  # protobuf 5.x, 6.x; older: label
    if repeated if repeated is not None else field.label == field.LABEL_REPEATED:
        return functools.partial(_list, one), oneof, False
    return one, oneof, kind is not None and kind.full_name == "google.protobuf.Value"


def _single_plan(field: Any) -> Convert:
    kind = field.message_type
    if kind is None:
        return _SCALARS.get(field.type, _never)  # bytes, enums: ParseDict decides
    if kind.full_name == "google.protobuf.Timestamp":
        return _timestamp
    if kind.full_name == "google.protobuf.Struct":
        return functools.partial(_json, dict)
    if kind.full_name == "google.protobuf.ListValue":
        return functools.partial(_json, list)
    if kind.full_name.startswith("google.protobuf."):
        return _never
    return functools.partial(_message, kind)


def _never(value: Any) -> Any:
    raise _Unsure


def _message(kind: Any, value: Any) -> dict:
    if type(value) is not dict:
        raise _Unsure
    return _constructor_values(kind, value)


def _list(convert: Convert, value: Any) -> list:
    if type(value) is not list:
        raise _Unsure
    return [convert(item) for item in value]


def _map(convert: Convert, value: Any) -> dict:
    if type(value) is not dict:
        raise _Unsure
    for key, item in value.items():
        if type(key) is not str:
            raise _Unsure
        convert(item)
    return value


def _timestamp(value: Any) -> Any:
    if type(value) is not str:
        raise _Unsure
    from google.protobuf.timestamp_pb2 import Timestamp

    stamp = Timestamp()
    stamp.FromJsonString(value)  # as ParseDict converts it; ValueError: ParseDict's own error
    return stamp


def _json(kind: type, value: Any) -> Any:
    """A Struct (dict) or ListValue (list) holding only what JSON holds: str keys; str, finite
    float, int, bool, None values."""
    if type(value) is not kind or not _plain_json(value):
        raise _Unsure
    return value


def _plain_json(value: Any) -> bool:
    if type(value) is dict:
        return all(type(k) is str and _plain_json(v) for k, v in value.items())
    if type(value) is list:
        return all(_plain_json(v) for v in value)
    if type(value) is float:
        return math.isfinite(value)
    return value is None or type(value) in (str, int, bool)


def _typed(kind: type, value: Any) -> Any:
    if type(value) is not kind:
        raise _Unsure
    return value


def _floating(largest: float, value: Any) -> Any:
    """A finite float in range, or a small int (ParseDict refuses NaN and infinities as numbers)."""
    if type(value) is float:
        if not (math.isfinite(value) and abs(value) <= largest):
            raise _Unsure
    elif type(value) is not int or abs(value) >= 2**24:
        raise _Unsure
    return value


# FieldDescriptor.TYPE_*: the scalars both take alike: an int for an integer, a finite float in
# range or a small int for a floating-point number, a bool for a bool, a str for a string.
# Integers: int64, uint64, int32, fixed64, fixed32, uint32, sfixed32, sfixed64, sint32, sint64.
_INTEGERS = (3, 4, 5, 6, 7, 13, 15, 16, 17, 18)
_FLOAT_MAX = float.fromhex("0x1.fffffep+127")  # protobuf's bound for a 32-bit float (type_checkers)
_SCALARS: dict[int, Convert] = {
    **dict.fromkeys(_INTEGERS, functools.partial(_typed, int)),
    1: functools.partial(_floating, math.inf),  # double
    2: functools.partial(_floating, _FLOAT_MAX),  # float
    8: functools.partial(_typed, bool),
    9: functools.partial(_typed, str),
}


def env_scrubber(msg: str) -> str:
    """dbt's log-line scrubber, the secrets from the environment dbt read for the invocation
    (see the module's text): found again whenever the invocation context holds another
    environment, and from the process's environment where a thread has no context."""
    from dbt_common.constants import SECRET_ENV_PREFIX
    from dbt_common.context import get_invocation_context
    from dbt_common.exceptions import env_secrets, scrub_secrets

    global _secrets
    try:
        env = get_invocation_context().env
    except LookupError:  # no dbt invocation in this thread's context
        return scrub_secrets(msg, env_secrets())
    known = _secrets
    if known is None or known[0] is not env:
        found = [v for k, v in env.items() if k.startswith(SECRET_ENV_PREFIX) and v.strip()]
        _secrets = known = (env, found)
    return scrub_secrets(msg, known[1])


def behavior_flag_source() -> str:
    """dbt-common's BehaviorFlagRendered._default_source: the name of the module of the nearest
    caller outside dbt_common.behavior_flags, as inspect.stack() and inspect.getmodule find it,
    without the source lines inspect.stack() reads for every frame of the stack. A frame's
    module is the one whose globals it runs in when that module's file is the frame's file
    (where inspect.getmodule looks it up by file), and inspect.getmodule's answer otherwise."""
    import inspect

    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_globals.get("__name__")
        module = sys.modules.get(name) if isinstance(name, str) else None
        if module is None or getattr(module, "__file__", None) != frame.f_code.co_filename:
            module = inspect.getmodule(frame)
        if module is not None and module.__name__ != "dbt_common.behavior_flags":
            return module.__name__
        frame = frame.f_back
    return "Unknown"


def _reused_type_testers(build: Callable[..., Any]) -> Callable[..., Any]:
    """dbt-common's build_type_tester, each tester built once per set of text columns: agate's
    type testers and types hold no state between tables (dbt shares one for the tables
    without text columns), and building one builds two date parsers (parsedatetime's
    locale constants), for each query dbt reads the result of."""

    @functools.lru_cache(maxsize=256)
    def built(text_columns: frozenset[str], string_null_values: tuple[str, ...] | None) -> Any:
        return build(text_columns, string_null_values)

    @functools.wraps(build)
    def build_type_tester(text_columns: Any, string_null_values: Any = ("null", "")) -> Any:
        try:
            nulls = None if string_null_values is None else tuple(string_null_values)
            return built(frozenset(text_columns), nulls)
        except TypeError:  # not hashable: built as dbt builds it
            return build(text_columns, string_null_values)

    build_type_tester._dayclose_reused = True  # type: ignore[attr-defined]
    return build_type_tester


def _install_events() -> bool:
    from dbt.events import logging as core_logging
    from dbt_common.constants import SECRET_ENV_PREFIX
    from dbt_common.context import InvocationContext, get_invocation_context
    from dbt_common.events import base_types, functions
    from dbt_common.exceptions import env_secrets, scrub_secrets
    from google.protobuf import json_format

    if not (
        base_types.ParseDict is json_format.ParseDict
        and functions.env_scrubber is core_logging.env_scrubber
        and callable(get_invocation_context)
        and isinstance(vars(InvocationContext).get("env"), property)
        and all(callable(f) for f in (env_secrets, scrub_secrets))
        and isinstance(SECRET_ENV_PREFIX, str)
    ):
        return False
    _originals["events"] = (base_types.ParseDict, functions.env_scrubber)
    base_types.ParseDict = parse_dict
    functions.env_scrubber = core_logging.env_scrubber = env_scrubber
    return True


def _install_behavior_flags() -> bool:
    from dbt_common.behavior_flags import BehaviorFlagRendered

    current = vars(BehaviorFlagRendered).get("_default_source")
    if not isinstance(current, staticmethod) or current.__func__ is behavior_flag_source:
        return False
    _originals["behavior_flags"] = current.__func__
    BehaviorFlagRendered._default_source = staticmethod(behavior_flag_source)
    return True


def _install_type_testers() -> bool:
    from dbt_common.clients import agate_helper

    build = agate_helper.build_type_tester
    if getattr(build, "__module__", None) != agate_helper.__name__ or hasattr(build, "_dayclose_reused"):
        return False
    _originals["type_testers"] = build
    agate_helper.build_type_tester = _reused_type_testers(build)
    return True


def install() -> dict[str, bool]:
    """Put the replacements in place (once per process); for each, whether it is: one is left
    out where dbt-common is not what it expects."""
    global _installed
    with _lock:
        if _installed is None:
            _installed = {}
            for name, step in (
                ("events", _install_events),
                ("behavior_flags", _install_behavior_flags),
                ("type_testers", _install_type_testers),
            ):
                try:
                    _installed[name] = bool(step())
                except (ImportError, AttributeError, TypeError):
                    _installed[name] = False
        return dict(_installed)
