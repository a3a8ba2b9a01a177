{#
    Incremental strategy first_arrivals, of the first-arrival registries (config
    incremental_strategy: first_arrivals, unique_key: the event key). The model's select returns
    new events and revised ones (is_revised); only the revised ones have a registered row, which
    is deleted before the insert. delete+insert would look every new event up in the whole
    registry to delete nothing; here the look-up is for the revised events only, most nights none.
#}
{% macro get_incremental_first_arrivals_sql(arg_dict) %}
    {%- set keys = arg_dict["unique_key"] -%}
    {%- set keys = [keys] if keys is string else keys -%}
    {%- set dest_cols_csv = get_quoted_csv(arg_dict["dest_columns"] | map(attribute="name")) -%}

    delete from {{ arg_dict["target_relation"] }} as registered
    using (select {{ keys | join(', ') }} from {{ arg_dict["temp_relation"] }} where is_revised) as revised
    where {% for k in keys %}registered.{{ k }} = revised.{{ k }}{{ ' and ' if not loop.last }}{% endfor %};

    insert into {{ arg_dict["target_relation"] }} ({{ dest_cols_csv }})
    select {{ dest_cols_csv }} from {{ arg_dict["temp_relation"] }}
{% endmacro %}


{#
    pre_hook of the models rebuilt for the days a run rebuilds (the conflicting copies: each day
    needs a look-up in the whole history, which one statement for all the days does once; on
    Spark also the daily microbatch marts): empty those days, which the model's select, limited
    to them, fills again. A day the select no longer returns stays empty: its rows are gone.
#}
{% macro delete_rebuilt_days(source_name, date_column) %}
    {%- if is_incremental() -%}
        {{- return(adapter.dispatch('delete_rebuilt_days', 'dayclose')(dayclose.rebuilt_range(source_name), date_column)) -}}
    {%- endif -%}
{% endmacro %}


{# Delete the days, in the materialization's transaction: the insert that follows refills them. #}
{% macro default__delete_rebuilt_days(rebuilt, date_column) %}
    delete from {{ this }}
    where {{ date_column }} >= cast('{{ rebuilt[0] }}' as date) and {{ date_column }} < cast('{{ rebuilt[1] }}' as date)
{% endmacro %}


{#
    Spark (parquet takes no delete; the table is partitioned by the day): drop the days'
    partitions. The model's insert overwrite then writes the days its select returns; without
    this a day it no longer returns would keep its old partition.
#}
{% macro spark__delete_rebuilt_days(rebuilt, date_column) %}
    {%- set days = dayclose.days_between(rebuilt[0], rebuilt[1]) -%}
    {%- if days -%}
        alter table {{ this }} drop if exists
        {%- for day in days %} partition ({{ date_column }} = '{{ day }}'){{ ',' if not loop.last }}{% endfor %}
    {%- endif -%}
{% endmacro %}


{#
    pre_hook of the by-batch models (a row per batch and what is counted, unique_key batch_id)
    whose select can return no row for a batch it reads: the dead-letter counts of a batch
    delivered again without dead letters. delete+insert (and Spark's insert overwrite) replace
    only the batches the select returns; this empties first every batch the select reads, the
    batches of `lines` loaded since the model's latest batch_loaded_at, as its select does.
#}
{% macro delete_reloaded_batches(lines) %}
    {%- if is_incremental() -%}
        {%- set reloaded -%}
            select distinct batch_id from {{ lines }}
            where batch_loaded_at > (
                select coalesce(max(batch_loaded_at), cast('1900-01-01' as {{ dbt.type_timestamp() }}))
                from {{ this }}
            )
        {%- endset -%}
        {{- return(adapter.dispatch('delete_reloaded_batches', 'dayclose')(reloaded)) -}}
    {%- endif -%}
{% endmacro %}


{# One statement, in the materialization's transaction: the batches' rows, then the insert. #}
{% macro default__delete_reloaded_batches(reloaded) %}
    delete from {{ this }} where batch_id in ({{ reloaded }})
{% endmacro %}


{# Spark (partitioned by batch_id): drop the batches' partitions, looked up first. #}
{% macro spark__delete_reloaded_batches(reloaded) %}
    {%- set batches = run_query(reloaded).columns[0].values() | list if execute else [] -%}
    {%- if batches -%}
        alter table {{ this }} drop if exists
        {%- for batch in batches | sort %} partition (batch_id = '{{ batch }}'){{ ',' if not loop.last }}{% endfor %}
    {%- endif -%}
{% endmacro %}
