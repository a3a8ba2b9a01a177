{#
    The first_arrivals strategy on Spark. dbt-spark's incremental materialization accepts only
    its own strategies (append, merge, insert_overwrite, microbatch) and resolves their SQL in two
    plain macros; these two project macros of the same names (dbt's override of an adapter's
    macro) add first_arrivals and hand every other strategy to dbt-spark's own macros unchanged.

    Parquet takes neither delete nor merge, so a night rewrites the day partitions
    (config partition_by, the registry's day column) that its new and revised events touch, in
    one `insert overwrite` with dynamic partition overwrite: each touched day's registered rows
    but the revised events' (an anti-join), plus what the model returned but the '(vanished)'
    placeholders (the model's rows computed once: `cache table`). A revised event's registered
    row may sit on any day (a vanished one returns without a day), so the touched days include
    the days of the registered rows it replaces.
    The other engines delete the revised rows and insert (first_arrivals.sql): the same table.
#}
{% macro dbt_spark_validate_get_incremental_strategy(raw_strategy, file_format) %}
    {%- if raw_strategy == 'first_arrivals' -%}
        {%- if not config.get('partition_by') -%}
            {%- do exceptions.raise_compiler_error(
                "first_arrivals on Spark needs partition_by (the registry's day column): " ~ this) -%}
        {%- endif -%}
        {{- return(raw_strategy) -}}
    {%- endif -%}
    {{- return(dbt.dbt_spark_validate_get_incremental_strategy(raw_strategy, file_format)) -}}
{% endmacro %}


{% macro dbt_spark_get_incremental_sql(strategy, source, target, existing, unique_key, incremental_predicates) %}
    {%- if strategy != 'first_arrivals' -%}
        {{- return(dbt.dbt_spark_get_incremental_sql(
            strategy, source, target, existing, unique_key, incremental_predicates)) -}}
    {%- endif -%}
    {%- set keys = [unique_key] if unique_key is string else unique_key -%}
    {%- set day = config.get('partition_by') -%}
    {%- set day = day[0] if day is not string else day -%}
    {%- set columns = adapter.get_columns_in_relation(target) | map(attribute='quoted') | join(', ') -%}
    {#- the statement below reads the model's rows (a temporary view) three times, and Spark
        would compute the view once per reference: computed once here, kept in memory (spilling
        to disk) until the model's post_hook uncaches it -#}
    {%- do run_query('cache table ' ~ source) -%}
    {%- set on_keys -%}
        {% for k in keys %}registered.{{ k }} = revised.{{ k }}{{ ' and ' if not loop.last }}{% endfor %}
    {%- endset %}

    insert overwrite table {{ target }}
    {{ partition_cols(label="partition") }}
    with

    revised as (

        select distinct {{ keys | join(', ') }} from {{ source }} where is_revised

    ),

    touched_days as (

        select {{ day }} from {{ source }} where batch_id <> '(vanished)'
        union
        select registered.{{ day }}
        from {{ target }} as registered
        inner join revised on {{ on_keys }}

    ),

    kept as (

        select registered.*
        from {{ target }} as registered
        left semi join touched_days on registered.{{ day }} = touched_days.{{ day }}
        left anti join revised on {{ on_keys }}

    )

    select {{ columns }} from kept
    union all
    select {{ columns }} from {{ source }} where batch_id <> '(vanished)'
{% endmacro %}
