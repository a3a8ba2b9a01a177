{#
    Whole-batch overwrite for microbatch models, the same on every adapter we run.

    Why our own: dbt-postgres implements microbatch as a MERGE on unique_key, which
    updates and inserts but never deletes, so a shop-day whose source rows were
    corrected away upstream would stay in the table forever. dbt-duckdb already
    does delete+insert; we route both through this one macro so the two engines
    behave identically and are tested identically:

        delete every row of the batch's event-time range, then insert the batch.

    A month batch (windows.sql, microbatch_batch_size) deletes only its days the run
    rebuilds, the days its select was limited to (in_batch_days).

    Both statements run inside the materialization's transaction, so a reader
    sees the old batch or the new one. An empty batch deletes and inserts
    nothing, which is exactly right: the day has no rows any more.
#}
{% macro dayclose_microbatch_overwrite(arg_dict) %}
    {%- set event_time = config.get('event_time') -%}
    {%- if not event_time -%}
        {{ exceptions.raise_compiler_error("microbatch model " ~ model.name ~ " needs an event_time config") }}
    {%- endif -%}
    {%- set batch = model.get('batch') -%}
    {%- if not (batch and batch.get('event_time_start') and batch.get('event_time_end')) -%}
        {{ exceptions.raise_compiler_error("microbatch model " ~ model.name ~ " ran without batch bounds") }}
    {%- endif -%}
    {%- set target = arg_dict["target_relation"] -%}
    {%- set source = arg_dict["temp_relation"] -%}
    {%- set dest_cols_csv = get_quoted_csv(arg_dict["dest_columns"] | map(attribute="name")) -%}
    {%- set batch_start = batch.get('event_time_start').strftime('%Y-%m-%d %H:%M:%S') -%}
    {%- set batch_end = batch.get('event_time_end').strftime('%Y-%m-%d %H:%M:%S') -%}
    {%- set rebuilt_days = dayclose.batch_days() -%}
    {%- if rebuilt_days is not none -%}
        {#- a month batch: only its days this run rebuilds (windows.sql, batch_days) -#}
        {%- set batch_start = rebuilt_days[0] ~ ' 00:00:00' -%}
        {%- set batch_end = rebuilt_days[1] ~ ' 00:00:00' -%}
    {%- endif -%}

    delete from {{ target }}
    where {{ event_time }} >= {{ dayclose.timestamp_literal(batch_start) }}
      and {{ event_time }} < {{ dayclose.timestamp_literal(batch_end) }};

    insert into {{ target }} ({{ dest_cols_csv }})
    select {{ dest_cols_csv }} from {{ source }}
{% endmacro %}


{% macro duckdb__get_incremental_microbatch_sql(arg_dict) %}
    {{ return(dayclose_microbatch_overwrite(arg_dict)) }}
{% endmacro %}


{% macro postgres__get_incremental_microbatch_sql(arg_dict) %}
    {{ return(dayclose_microbatch_overwrite(arg_dict)) }}
{% endmacro %}
