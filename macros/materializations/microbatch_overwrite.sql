{#
    The microbatch strategy of the daily models, the same on every engine we run: delete every
    row of the batch's days, then insert the batch (docs/decisions/0004-whole-day-overwrite.md).

    Why our own: dbt-postgres implements microbatch as a merge on unique_key, which updates and
    inserts but never deletes, so a shop-day whose rows were corrected away upstream would stay
    in the table forever; dbt-duckdb already deletes and inserts. Both go through this one
    macro (found by dbt's adapter.dispatch before the adapters' own), so both engines behave
    alike and are tested alike.

    The days are the batch's days this run rebuilds (run context, rebuilt_range): a month batch
    (the dayclose command's) reaches beyond them, and the model's select is cut to them too.
    Both statements run in the materialization's transaction: a reader sees the old days or the
    new ones. An empty batch deletes and inserts nothing, which is right: the day has no rows.
#}
{% macro dayclose_microbatch_overwrite(arg_dict) %}
    {%- set event_time = config.get('event_time') -%}
    {%- set batch = model.get('batch') -%}
    {%- if not (event_time and batch and batch.get('event_time_start') and batch.get('event_time_end')) -%}
        {{ exceptions.raise_compiler_error("microbatch model " ~ model.name ~ " ran without an event_time or batch bounds") }}
    {%- endif -%}
    {#- the model's source: the landing source among its tags -#}
    {%- set tagged = var('landing_sources').keys() | select('in', model.tags) | list -%}
    {%- if tagged | length != 1 -%}
        {{ exceptions.raise_compiler_error(
            "microbatch model " ~ model.name ~ " needs one landing source among its tags, found "
            ~ (tagged | join(', ') or 'none')
        ) }}
    {%- endif -%}
    {%- set rebuilt = dayclose.rebuilt_range(tagged[0]) -%}
    {%- set first_day = [batch.get('event_time_start').strftime('%Y-%m-%d'), rebuilt[0]] | max -%}
    {%- set end_day = [[batch.get('event_time_end').strftime('%Y-%m-%d'), rebuilt[1]] | min, first_day] | max -%}
    {%- set dest_cols_csv = get_quoted_csv(arg_dict["dest_columns"] | map(attribute="name")) -%}

    delete from {{ arg_dict["target_relation"] }}
    where
        {{ event_time }} >= cast('{{ first_day }}' as {{ dbt.type_timestamp() }})
        and {{ event_time }} < cast('{{ end_day }}' as {{ dbt.type_timestamp() }});

    insert into {{ arg_dict["target_relation"] }} ({{ dest_cols_csv }})
    select {{ dest_cols_csv }} from {{ arg_dict["temp_relation"] }}
{% endmacro %}


{% macro duckdb__get_incremental_microbatch_sql(arg_dict) %}
    {{ return(dayclose_microbatch_overwrite(arg_dict)) }}
{% endmacro %}


{% macro postgres__get_incremental_microbatch_sql(arg_dict) %}
    {{ return(dayclose_microbatch_overwrite(arg_dict)) }}
{% endmacro %}
