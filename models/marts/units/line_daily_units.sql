{#
    Units per line and production day with the sensor picture: readings out of the SKU's spec
    and readings from a stuck sensor (the same value for at least stuck_sensor_run_units
    consecutive units). For operators' follow-up and for the gate that a producing line never
    reports zero units unnoticed.
#}
{#- Spark: dbt-spark's microbatch overwrites the batch's day partitions (dynamic partition overwrite);
    the pre_hook drops the run's rebuilt days first: a day the select no longer returns keeps none -#}
{{
    config(
        materialized='incremental',
        incremental_strategy='microbatch',
        event_time='production_date',
        partition_by='production_date' if target.type == 'spark' else none,
        pre_hook="{{ dayclose.delete_rebuilt_days('units', 'production_date') if target.type == 'spark' }}",
        batch_size=dayclose.microbatch_batch_size(),
        begin=dayclose.microbatch_begin(),
        lookback=dayclose.window_days('units'),
        on_schema_change='fail',
        tags=['units'],
    )
}}

{%- set rebuilt = dayclose.rebuilt_range('units') -%}

with

line_sku_days as (

    -- dbt limits this to the batch's days (the event_time of the ref); of those, the days
    -- this run rebuilds (a month batch reaches beyond them)
    select * from {{ ref('int_line_sku_days_counted') }}
    where
        production_date >= cast('{{ rebuilt[0] }}' as date)
        and production_date < cast('{{ rebuilt[1] }}' as date)

),

final as (

    select
        production_date,
        line_id,
        min(plant_id) as plant_id,
        cast(sum(units) as bigint) as units,
        cast(sum(good_units) as bigint) as good_units,
        cast(sum(units_out_of_spec) as bigint) as units_out_of_spec,
        cast(sum(units_with_stuck_sensor) as bigint) as units_with_stuck_sensor

    from line_sku_days
    group by production_date, line_id

)

select * from final
