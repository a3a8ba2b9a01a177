{#
    Indexes and statistics: the `indexes` config of the models (btree indexes on the event key,
    the event time, the batch) is for Postgres, where the nightly reads find a night's rows
    through them.
#}


{#
    On DuckDB the `indexes` config creates nothing (dbt-duckdb's macro, overridden here): DuckDB
    prunes by the min and max it keeps per row group (the tables grow in arrival or event-time
    order) and joins by hash, so an index serves none of these reads, while every insert must
    maintain it (several times slower inserts of a night's first arrivals).
#}
{% macro duckdb__get_create_index_sql(relation, index_dict) -%}
{%- endmacro %}


{#
    post_hook: on Postgres, `analyze` the model's table when its statistics are missing or stale
    by autovacuum's own rule (more than 50 rows plus 10% of the table changed since the last
    analyze). The nightly statements find a night's rows through the indexes only when the
    planner knows the table: without statistics it guesses 200 distinct batches, and the delete
    of a night's batches then reads the whole table, so a night's cost grows with the history.
    Autovacuum does this where it runs, but late after a first build, and not
    at all where it is off. A sample of 30,000 rows: about the same cost at any size.
#}
{% macro analyze_if_stale() -%}
    {{ return(adapter.dispatch('analyze_if_stale', 'dayclose')()) }}
{%- endmacro %}

{% macro default__analyze_if_stale() -%}
{%- endmacro %}

{% macro postgres__analyze_if_stale() -%}
    {%- if execute -%}
        {%- set stale = run_query(
            "select coalesce(stats.last_analyze, stats.last_autoanalyze) is null"
            ~ " or stats.n_mod_since_analyze > 50 + 0.1 * greatest(tables.reltuples, 0)"
            ~ " from pg_stat_user_tables as stats inner join pg_class as tables on tables.oid = stats.relid"
            ~ " where stats.schemaname = '" ~ this.schema ~ "' and stats.relname = '" ~ this.identifier ~ "'"
        ).columns[0].values() -%}
        {%- if stale and stale[0] %}
    analyze {{ this }}
        {%- endif -%}
    {%- endif -%}
{%- endmacro %}


{#
    delete+insert on Postgres (dbt-postgres's macro, extended here): dbt's temporary table of
    new rows is analyzed first. dbt deletes `where key in (select distinct key from <new rows>)`;
    without statistics Postgres guesses 200 keys and joins by hash over a scan of the whole table,
    so a night's cost would grow with the history. Analyzed, it finds the night's batches
    through the index on the key.
#}
{% macro postgres__get_delete_insert_merge_sql(target, source, unique_key, dest_columns, incremental_predicates) -%}
    analyze {{ source }};
    {{ dbt.default__get_delete_insert_merge_sql(target, source, unique_key, dest_columns, incremental_predicates) }}
{%- endmacro %}


{#
    pre_hook of the first-arrival registries (int_<entity>s_deduplicated): on Postgres, a night
    that loads a batch again with a new manifest (a corrected batch) plans this model without
    nested-loop joins. That night finds the registered events of the replaced batch and every
    copy of them left in the history; the planner knows nothing of the new batch (its rows came
    in this night, after the last statistics), estimates a row or two on each side, and would
    join the two large sets by nested loop, over a scan of the history for each key, for hours.
    Hash joins read the history once: what a correction costs, on the nights with one. Other
    nights keep the index look-ups into the registry. `set local` ends with the model's
    transaction.
#}
{% macro no_nested_loops_after_a_replaced_batch(source_name) -%}
    {{ return(adapter.dispatch('no_nested_loops_after_a_replaced_batch', 'dayclose')(source_name)) }}
{%- endmacro %}

{% macro default__no_nested_loops_after_a_replaced_batch(source_name) -%}
{%- endmacro %}

{% macro postgres__no_nested_loops_after_a_replaced_batch(source_name) -%}
    {%- if execute and is_incremental() -%}
        {%- set replaced = run_query(
            "select count(*) from " ~ ref('stg_landing__batch_loads') ~ " as loads"
            ~ " where loads.source_name = '" ~ source_name ~ "' and loads.is_loaded"
            ~ " and loads.loaded_at > (select coalesce(max(batch_loaded_at), cast('1900-01-01' as timestamp))"
            ~ " from " ~ this ~ ")"
            ~ " and exists (select 1 from " ~ this ~ " as registry where registry.batch_id = loads.batch_id)"
        ).columns[0].values()[0] -%}
        {%- if replaced > 0 %}
    set local enable_nestloop = off
        {%- endif -%}
    {%- endif -%}
{%- endmacro %}
