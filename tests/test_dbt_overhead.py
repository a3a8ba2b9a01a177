"""dbt's log events built sooner (dayclose/dbt_overhead.py): the same messages, the same errors,
the same scrubbed lines as dbt-common builds and writes without it."""

from __future__ import annotations

import contextvars
import datetime as dt
import itertools
import os
import threading
from functools import partial

import pytest
from google.protobuf import json_format

from dayclose import dbt_overhead


def _message_classes() -> list[type]:
    """Every message of dbt's event modules (dbt-common's, the adapters', dbt-core's)."""
    from dbt.adapters.events import adapter_types_pb2
    from dbt.events import core_types_pb2
    from dbt_common.events import types_pb2

    classes = []
    for module in (types_pb2, adapter_types_pb2, core_types_pb2):
        for name in sorted(vars(module)):
            value = getattr(module, name)
            if isinstance(value, type) and hasattr(value, "DESCRIPTOR"):
                classes.append(value)
    return classes


# values a field of each protobuf type takes, as dbt passes them (first) and as it does not
SCALARS = {
    1: [2.5, 3, 2**60, 10**400, "1.5", "NaN", float("nan"), float("inf"), None, True, "x"],  # double
    2: [2.5, 3, 1e300, "1.5", None, "x"],  # float
    3: [7, -(2**40), 2**70, "12", 1.0, 1.5, True, None, "x"],  # int64
    4: [7, "12", -1, 1.0, None],  # uint64
    5: [7, "12", 1.0, 1.5, 2**40, True, None, "x"],  # int32
    8: [True, False, 1, 0, "true", None],  # bool
    9: ["text", "", "caf\u00e9", "\ud83d\ude00", "\ud800 lone", 5, 1.5, True, None, b"bytes"],  # string
    13: [7, -1, "3", None],  # uint32
}
TIMESTAMPS = [
    "2026-12-04T07:01:50.123456Z",
    "2026-12-04T07:01:50+01:00",
    "2026-12-04 07:01:50",
    "not a time",
    None,
    dt.datetime(2026, 12, 4, 7, 1, 50),
    5,
]
WELL_KNOWN = {
    "google.protobuf.Struct": [
        {"a": 1, "b": [1, "x", None, {"c": True}], "d": 2.5},
        {},
        {"a": float("nan")},
        {"a": (1, 2)},
        {"a": dt.date(2026, 12, 4)},
        {1: "x"},
        None,
        "x",
        [1],
    ],
    "google.protobuf.ListValue": [[1, "x", None, {"a": 2.5}], [], None, "x", {"a": 1}],
    "google.protobuf.Value": ["x", 1, None, {"a": 1}],
}


def _outcome(parse, values: dict, cls: type) -> tuple[str, object]:
    """The message as bytes (fields in order, empty nested messages that are set included), or
    the error."""
    try:
        return "message", parse(values, cls()).SerializeToString(deterministic=True)
    except Exception as exc:  # noqa: BLE001 - the error is what is compared
        return "error", (type(exc), str(exc))


def _same(values: dict, cls: type) -> None:
    ours = _outcome(dbt_overhead.parse_dict, values, cls)
    theirs = _outcome(json_format.ParseDict, values, cls)
    assert ours == theirs, f"{cls.__name__} from {values!r}: {ours} != {theirs}"


def _typical(descriptor, depth: int = 0) -> dict:
    """A dict of every field of the message, each with the first value of its kind."""
    values = {}
    for field in descriptor.fields:
        values[field.name] = _typical_value(field, depth)
    return values


def _typical_value(field, depth: int):
    kind = field.message_type
    repeated = field.is_repeated
    if kind is not None and kind.GetOptions().map_entry:
        item = _typical_value(kind.fields_by_name["value"], depth + 1)
        return {"key": item, "other": item}
    if kind is None:
        value = SCALARS.get(field.type, ["text"])[0]
    elif kind.full_name == "google.protobuf.Timestamp":
        value = TIMESTAMPS[0]
    elif kind.full_name in WELL_KNOWN:
        value = WELL_KNOWN[kind.full_name][0]
    elif depth < 3:
        value = _typical(kind, depth + 1)
    else:
        value = {}
    return [value, value] if repeated else value


def test_every_dbt_event_message_is_built_as_parse_dict_builds_it():
    classes = _message_classes()
    assert len(classes) > 300  # dbt's events: the test covers them, not an empty list
    for cls in classes:
        _same(_typical(cls.DESCRIPTOR), cls)
        _same({}, cls)


def test_dbts_events_take_the_quick_way(monkeypatch):
    """Not ParseDict for the events dbt fires, as dbt gives them (the test above would pass if
    every message went to ParseDict)."""
    calls: list[str] = []
    real = json_format.ParseDict
    monkeypatch.setattr(
        json_format,
        "ParseDict",
        lambda js, message, **o: calls.append(type(message).__name__) or real(js, message, **o),
    )
    classes = _message_classes()
    for cls in classes:
        dbt_overhead.parse_dict(_typical(cls.DESCRIPTOR), cls())
    assert len(calls) <= len(classes) // 20, calls  # messages with a 32-bit float, an enum, a oneof
    for name in (
        "SQLQuery",
        "SQLQueryStatus",
        "SQLCommit",
        "NodeStart",
        "NodeFinished",
        "LogStartLine",
        "LogModelResult",
        "LogTestResult",
        "CacheAction",
        "SQLQueryMsg",
        "NodeFinishedMsg",
        "Note",
    ):
        assert name not in calls, name


def test_values_parse_dict_converts_or_refuses_give_the_same_message_or_error():
    """Each field of each kind, given each value of the lists above, alone and beside a time
    stamp (the one value converted before the constructor)."""
    seen_kinds = set()
    for cls in _message_classes():
        for field in cls.DESCRIPTOR.fields:
            kind = field.message_type
            repeated = field.is_repeated
            if kind is not None and kind.GetOptions().map_entry:
                candidates = [{"k": "v"}, {"k": 5}, {5: "v"}, [("k", "v")], None]
                label = "map"
            elif kind is None:
                candidates = SCALARS.get(field.type, ["text", 5])
                label = field.type
            elif kind.full_name == "google.protobuf.Timestamp":
                candidates = TIMESTAMPS
                label = kind.full_name
            elif kind.full_name in WELL_KNOWN:
                candidates = WELL_KNOWN[kind.full_name]
                label = kind.full_name
            else:
                typical = _typical(kind, 2)
                candidates = [typical, {**typical, "no_such_field": 1}, "x", None]
                label = "message"
            label = (label, repeated)
            if label in seen_kinds and field.name not in ("info", "node_info", "timing_info"):
                continue  # one field of each kind, and the ones every event carries
            seen_kinds.add(label)
            for value in candidates:
                given = [value, value] if repeated and value is not None else value
                _same({field.name: given}, cls)
                if repeated:
                    _same({field.name: value}, cls)  # not a list
    assert len(seen_kinds) >= 12, seen_kinds


def test_the_envelope_of_an_event_is_the_same_message():
    """msg_from_base_event, as dbt calls it for each event fired (the envelope with its time
    stamp), gives the same message with the faster ParseDict."""
    from dbt.adapters.events.types import SQLQuery
    from dbt_common.events import base_types

    event = SQLQuery(conn_name="master", sql="select 1", node_info={"unique_id": "model.x.y"})
    original = base_types.ParseDict
    try:
        base_types.ParseDict = json_format.ParseDict
        theirs = base_types.msg_from_base_event(event)
        base_types.ParseDict = dbt_overhead.parse_dict
        ours = base_types.msg_from_base_event(event)
    finally:
        base_types.ParseDict = original
    assert ours.info.ts.seconds > 0 and ours.data.sql == "select 1"
    ours.info.ts.CopyFrom(theirs.info.ts)  # built a moment apart
    assert ours == theirs


def test_install_replaces_the_three_and_only_once():
    from dbt.events import logging as core_logging
    from dbt_common.behavior_flags import BehaviorFlagRendered
    from dbt_common.clients import agate_helper
    from dbt_common.events import base_types, functions

    installed = dbt_overhead.install()
    assert installed == {"events": True, "behavior_flags": True, "type_testers": True}
    tester = agate_helper.build_type_tester
    assert dbt_overhead.install() == installed
    assert agate_helper.build_type_tester is tester  # not wrapped twice
    assert base_types.ParseDict is dbt_overhead.parse_dict
    assert functions.env_scrubber is dbt_overhead.env_scrubber
    assert core_logging.env_scrubber is dbt_overhead.env_scrubber
    assert BehaviorFlagRendered._default_source is dbt_overhead.behavior_flag_source
    assert dbt_overhead._originals["type_testers"] is not tester
    originals = dict(dbt_overhead._originals)
    dbt_overhead._installed = None  # as if another copy of the module installed them first
    try:
        assert dbt_overhead.install() == {"events": False, "behavior_flags": False, "type_testers": False}
    finally:
        dbt_overhead._installed = installed
    assert agate_helper.build_type_tester is tester  # nothing wrapped twice
    assert dbt_overhead._originals == originals
    assert originals["behavior_flags"] is not dbt_overhead.behavior_flag_source


def _sources_from(code: str, module_name: str) -> tuple[str, str]:
    """Both functions called from a frame of code compiled apart, run in the globals of a
    module of that name (one without a file, or whose file is not the frame's)."""
    original = dbt_overhead._originals["behavior_flags"]
    found: dict = {}
    namespace = {
        "__name__": module_name,
        "original": original,
        "ours": dbt_overhead.behavior_flag_source,
        "found": found,
    }
    exec(compile(code, "<generated>", "exec"), namespace)
    return found["original"], found["ours"]


def test_a_behavior_flags_source_is_the_module_inspect_finds():
    from dbt_common.behavior_flags import Behavior

    dbt_overhead.install()
    original = dbt_overhead._originals["behavior_flags"]
    assert dbt_overhead.behavior_flag_source() == original() == __name__
    flag = {"name": "dayclose_test_flag", "default": False, "description": "a test"}
    behavior = Behavior([flag], {})  # built here: dbt-common's own frames are passed over
    assert behavior.dayclose_test_flag.no_warn is False
    assert behavior._flags[0]._behavior_change_event.flag_source == __name__
    code = "found['original'] = original(); found['ours'] = ours()"
    for module_name in ("no_such_module", "os", __name__):  # no module; another's file; this one's
        ours, theirs = _sources_from(code, module_name)
        assert ours == theirs == __name__, module_name


def test_type_testers_are_built_once_per_set_of_text_columns_and_read_as_dbts():
    from dbt_common.clients import agate_helper

    dbt_overhead.install()
    build = agate_helper.build_type_tester
    assert build(["a", "b"], string_null_values=()) is build(("b", "a"), string_null_values=[])
    assert build(["a"]) is not build(["a"], string_null_values=())
    for tester in (build, dbt_overhead._originals["type_testers"]):  # the same error as dbt's
        with pytest.raises(TypeError, match="unhashable"):
            tester([["a list"]])
    rows = [{"a": "1", "b": 2, "c": "2026-12-04", "d": None}, {"a": "", "b": 3, "c": "x", "d": 1.5}]
    ours = agate_helper.table_from_data_flat(rows, ["a", "b", "c", "d"])
    agate_helper.build_type_tester = dbt_overhead._originals["type_testers"]
    try:
        theirs = agate_helper.table_from_data_flat(rows, ["a", "b", "c", "d"])
    finally:
        agate_helper.build_type_tester = build
    assert [type(t) for t in ours.column_types] == [type(t) for t in theirs.column_types]
    assert (
        [tuple(r) for r in ours.rows]
        == [tuple(r) for r in theirs.rows]
        == [
            ("1", 2, "2026-12-04", None),
            ("", 3, "x", 1.5),
        ]
    )


def test_the_scrubber_hides_the_invocations_secrets_and_the_environments_without_one(monkeypatch):
    monkeypatch.setenv("DBT_ENV_SECRET_DAYCLOSE_TEST", "hunter2")
    # in a context of its own: the invocation contexts set here do not outlive the test
    contextvars.copy_context().run(_scrubbed_lines)


def _scrubbed_lines() -> None:
    from dbt_common.context import get_invocation_context, set_invocation_context

    line = "password hunter2 and text"
    set_invocation_context(dict(os.environ))
    assert dbt_overhead.env_scrubber(line) == "password ***** and text"
    set_invocation_context({"DBT_ENV_SECRET_OTHER": "text"})  # what dbt read at the invocation's start
    assert dbt_overhead.env_scrubber(line) == "password hunter2 and *****"
    # dbt's preflight sets an empty context, then puts the environment it read in it: a line
    # scrubbed in between does not leave the invocation without its secrets
    set_invocation_context({})
    assert dbt_overhead.env_scrubber(line) == line
    get_invocation_context()._env = {"DBT_ENV_SECRET_DAYCLOSE_TEST": "hunter2"}
    assert dbt_overhead.env_scrubber(line) == "password ***** and text"

    def no_context():  # a thread dbt gave no invocation context: the environment, as dbt reads it
        results.append(dbt_overhead.env_scrubber(line))

    results: list[str] = []
    thread = threading.Thread(target=contextvars.Context().run, args=(no_context,))
    thread.start()
    thread.join()
    assert results == ["password ***** and text"]


def test_a_message_not_empty_with_options_or_of_protobufs_own_types_is_parse_dicts_own():
    """dbt passes ParseDict an empty message of its own types, without options; anything else
    goes to ParseDict, which clears a repeated field or a map before filling it, where merging
    would append."""
    from dbt.events import core_types_pb2
    from dbt_common.events import types_pb2
    from google.protobuf import struct_pb2, timestamp_pb2

    message = types_pb2.Note(msg="before")
    assert dbt_overhead.parse_dict({}, message) is message and message.msg == "before"
    for values, options in itertools.product(
        [{"msg": "a"}, {"msg": "a", "unknown": 1}], [{}, {"ignore_unknown_fields": True}]
    ):
        ours = _outcome(partial(dbt_overhead.parse_dict, **options), values, types_pb2.Note)
        theirs = _outcome(partial(json_format.ParseDict, **options), values, types_pb2.Note)
        assert ours == theirs

    def filled() -> object:
        run = core_types_pb2.RunResultMsg(status="x")
        run.timing_info.add(name="compile")
        run.adapter_response.update({"rows": 1})
        return run

    values = {"timing_info": [{"name": "execute"}], "adapter_response": {"code": "OK"}}
    assert bytes(dbt_overhead.parse_dict(values, filled()).SerializeToString(deterministic=True)) == bytes(
        json_format.ParseDict(values, filled()).SerializeToString(deterministic=True)
    )
    for cls, given in ((timestamp_pb2.Timestamp, {"seconds": 1}), (struct_pb2.Struct, {"a": 1})):
        assert _outcome(dbt_overhead.parse_dict, given, cls) == _outcome(json_format.ParseDict, given, cls)


def test_a_message_is_filled_in_place_and_deep_json_values_are_kept():
    """parse_dict fills the message it is given (dbt keeps that one), also with JSON values
    nested far deeper than protobuf reads back from bytes."""
    from dbt.events import core_types_pb2

    for depth in (1, 34, 200):
        meta: dict = {"leaf": 1}
        for level in range(depth):
            meta = {"a": meta, "b": None} if level % 2 else {"a": [meta, "x"]}
        values = {"node_info": {"unique_id": "model.x.y", "meta": meta}}
        message = core_types_pb2.NodeStart()
        assert dbt_overhead.parse_dict(values, message) is message
        assert message.node_info.unique_id == "model.x.y"
        theirs = json_format.ParseDict(values, core_types_pb2.NodeStart())
        assert message == theirs, depth
