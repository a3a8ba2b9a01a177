"""The dbt project as its readers meet it: models that hold their own SQL, macros of three
kinds only, staging the only models that read sources, every model and column described.

Read from the manifest dbt writes when it parses the project (no warehouse needed)."""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

import pytest

from dayclose.settings import PROJECT_DIR

pytestmark = pytest.mark.xdist_group("project_shape")  # one worker builds the module's fixture, once

MACRO_FOLDERS = {"macros/cross_db", "macros/materializations", "macros/run_context"}
MAX_MACRO_DEPTH = 3


@pytest.fixture(scope="module")
def manifest(tmp_path_factory: pytest.TempPathFactory) -> dict:
    from dbt.cli.main import dbtRunner

    folder = tmp_path_factory.mktemp("parse")
    (folder / "profiles.yml").write_text((PROJECT_DIR / "profiles.yml.example").read_text())
    result = dbtRunner().invoke(
        [
            "--quiet",
            "parse",
            "--project-dir",
            str(PROJECT_DIR),
            "--profiles-dir",
            str(folder),
            "--target-path",
            str(folder / "target"),
            "--log-path",
            str(folder / "logs"),
        ]
    )
    assert result.success, result.exception
    return json.loads((folder / "target" / "manifest.json").read_text())


def project_macros(manifest: dict) -> dict[str, dict]:
    return {k: v for k, v in manifest["macros"].items() if v["package_name"] == "dayclose"}


def models(manifest: dict) -> dict[str, dict]:
    return {k: v for k, v in manifest["nodes"].items() if v["resource_type"] == "model"}


def macro_depth(manifest: dict, start: list[str]) -> tuple[int, list[str]]:
    """The longest chain of project macros from a node's macro calls, and that chain."""
    macros = project_macros(manifest)

    @cache
    def longest(macro_id: str) -> tuple[str, ...]:
        calls = [m for m in macros[macro_id]["depends_on"]["macros"] if m in macros and m != macro_id]
        below = max((longest(m) for m in calls), key=len, default=())
        return (macro_id, *below)

    chains = [longest(m) for m in start if m in macros]
    chain = max(chains, key=len, default=())
    return len(chain), [c.split(".")[-1] for c in chain]


def test_no_model_reaches_sql_through_more_than_three_project_macros(manifest: dict) -> None:
    deep = {}
    for node in models(manifest).values():
        depth, chain = macro_depth(manifest, node["depends_on"]["macros"])
        if depth > MAX_MACRO_DEPTH:
            deep[node["name"]] = " -> ".join(chain)
    assert not deep, deep


def test_the_depth_is_computed_from_the_manifest(manifest: dict) -> None:
    """The measure itself: a model that calls a dispatched contract rule goes three deep."""
    decoded = manifest["nodes"]["model.dayclose.int_sale_lines_decoded"]
    depth, chain = macro_depth(manifest, decoded["depends_on"]["macros"])
    assert depth == MAX_MACRO_DEPTH, chain
    assert chain[0] in {
        "token_is_valid",
        "is_flat_json_object",
        "not_a_flat_object_reason",
        "is_blank_line",
        "is_plain_json_line",
    }


def test_macros_are_primitives_materializations_or_the_run_context(manifest: dict) -> None:
    misplaced = {
        m["name"]: m["original_file_path"]
        for m in project_macros(manifest).values()
        if str(Path(m["original_file_path"]).parent) not in MACRO_FOLDERS
        and not m["original_file_path"].startswith("data-tests/")  # generic tests
    }
    assert not misplaced, misplaced


def test_no_model_queries_the_warehouse_while_it_compiles(manifest: dict) -> None:
    """No run_query or statement in a model or in the project macros it reaches: a model's
    compiled SQL is the same on every warehouse (but dbt's incremental and microbatch bounds).
    Materializations, strategies and their hooks (post_hook analyze_if_stale) are not the model's
    select."""
    queries = re.compile(r"\brun_query\(|\{%-?\s*call statement")
    macros = project_macros(manifest)
    querying = {
        m
        for m, macro in macros.items()
        if queries.search(macro["macro_sql"])
        and not macro["original_file_path"].startswith("macros/materializations/")
    }
    found = {}
    for node in models(manifest).values():
        if queries.search(node["raw_code"]):
            found[node["name"]] = "its own body"
        reached, todo = set(), list(node["depends_on"]["macros"])
        while todo:
            m = todo.pop()
            if m in macros and m not in reached:
                reached.add(m)
                todo += macros[m]["depends_on"]["macros"]
        if reached & querying:
            found[node["name"]] = sorted(reached & querying)
    assert not found, found


def test_only_staging_models_read_sources(manifest: dict) -> None:
    readers = {
        node["name"]
        for node in models(manifest).values()
        if node["depends_on"]["nodes"] and any(d.startswith("source.") for d in node["depends_on"]["nodes"])
    }
    assert readers and all(name.startswith("stg_") for name in readers), readers


def test_every_model_and_column_is_described(manifest: dict) -> None:
    """Analysts read the docs site: no model, and no column of a model, without words."""
    undescribed = []
    for node in models(manifest).values():
        if not node["description"].strip():
            undescribed.append(node["name"])
        undescribed += [f"{node['name']}.{c}" for c, col in node["columns"].items() if not col["description"]]
    assert not undescribed, undescribed


def test_every_ref_a_model_writes_is_a_dependency_dbt_knows(manifest: dict) -> None:
    """A ref inside `{% if is_incremental() %}` is not seen when dbt parses (is_incremental() is
    false then): the model needs a `-- depends_on:` hint, or its incremental build fails to
    compile and dbt may order it before that parent."""
    ref = re.compile(r"""\bref\(\s*['"]([a-z0-9_]+)['"]\s*\)""")
    missing = {}
    for node in models(manifest).values():
        known = {d.split(".")[-1] for d in node["depends_on"]["nodes"]}
        unseen = set(ref.findall(node["raw_code"])) - known
        if unseen:
            missing[node["name"]] = sorted(unseen)
    assert not missing, missing


def test_the_readme_is_a_users_guide_under_250_lines() -> None:
    """How it works inside, the decisions and the benchmarks live in docs/; links resolve."""
    readme = (PROJECT_DIR / "README.md").read_text()
    assert len(readme.splitlines()) < 250
    for link in re.findall(r"\]\(((?:docs|assets)/[^)#]*)", readme):
        assert (PROJECT_DIR / link).exists(), link
