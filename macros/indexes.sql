{#
    The `indexes` config of the models (btree indexes on the event key, event time and
    batch) is for Postgres, where the nightly reads look rows up through them. On DuckDB
    they are not created: DuckDB prunes by the min/max it keeps per row group (the tables
    grow in arrival order, so batch and event time prune well) and joins by hash, so an
    ART index serves none of these reads, while every insert has to maintain it and every
    new process has to load it. Measured on the 30-day sales benchmark (3 M first
    arrivals): inserting one night's 100,000 first arrivals took 0.45 s with the three
    indexes and 0.06 s without. That an event of the days a run rebuilds is registered once
    is checked by the gate first_arrivals_account_for_lines.
#}
{% macro duckdb__get_create_index_sql(relation, index_dict) -%}
{%- endmacro %}


{#
    post_hook: on Postgres, an index on `columns` of the model, created when the table has
    none. For an index added after a model's table was first built: dbt creates the
    `indexes` config with the table only, so a warehouse built before would need a full
    refresh. Unnamed, so that a full refresh's new table gets its own (the old table still
    holds its index, under its name, until dbt drops it after the hook).
#}
{% macro index_if_missing(columns) -%}
    {{ return(adapter.dispatch('index_if_missing', 'dayclose')(columns)) }}
{%- endmacro %}

{% macro default__index_if_missing(columns) -%}
{%- endmacro %}

{% macro postgres__index_if_missing(columns) -%}
    {%- set column_list = columns | join(', ') -%}
    {%- if execute -%}
        {%- set found = run_query(
            "select count(*) from pg_indexes where schemaname = '" ~ this.schema
            ~ "' and tablename = '" ~ this.identifier ~ "' and indexdef like '%(" ~ column_list ~ ")'"
        ).columns[0].values()[0] -%}
        {%- if found == 0 %}
    create index on {{ this }} ({{ column_list }})
        {%- endif -%}
    {%- endif -%}
{%- endmacro %}


{#
    post_hook: on Postgres, `analyze` the model's table when its statistics are missing or
    stale by autovacuum's own rule (more than 50 rows plus 10% of the table changed since the
    last analyze). The nightly statements find a night's rows through the indexes only when
    the planner knows the table: without statistics it guesses 200 distinct batches, and at
    360 days of sales history (36 M decoded lines) the delete of the night's 24 batches read
    the whole table (5.3 s against 73 ms), as did the ledger gate's count of 35 days of
    batches (1.7 s against 0.39 s). Autovacuum does this where it runs, but late after a first
    build or a backfill, and not at all where it is off. The table is sampled (30,000 rows
    by default), so an analyze costs about the same at any size; a night's changes reach the
    threshold every 2 nights at 30 days of history and every 18 at 360.
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
    delete+insert on Postgres, with dbt's temporary table of new rows analyzed first. dbt
    deletes `where key in (select distinct key from <new rows>)`; without statistics Postgres
    guesses 200 keys and joins by hash over a scan of the whole table (1.8 to 2.0 s a night
    for int_sale_lines_decoded at 120 days of history, 0.4 to 0.6 s at 30). Analyzed, it
    finds the night's 24 batches through the index on the key (12 ms), provided the table
    has statistics too (analyze_if_stale, above).
#}
{% macro postgres__get_delete_insert_merge_sql(target, source, unique_key, dest_columns, incremental_predicates) -%}
    analyze {{ source }};
    {{ dbt.default__get_delete_insert_merge_sql(target, source, unique_key, dest_columns, incremental_predicates) }}
{%- endmacro %}
