{#
    Good units per SKU and production day (the PLC's clock), for finance. Each
    nightly run rebuilds the last units_window_days days, each day whole; a unit
    (line_id, plc_seq) counts once however often it was replayed; the count is
    the PLC's verdict, whatever the sensors said.
#}
{{
    config(
        materialized='incremental',
        incremental_strategy='microbatch',
        event_time='production_date',
        batch_size='day',
        begin='2020-01-01',
        lookback=dayclose.window_days('units'),
        tags=['units'],
    )
}}

with

unit_lines as (

    -- dbt limits this to the batch's day through the event_time of the ref
    select * from {{ ref('int_unit_lines_validated') }}
    where is_valid

),

units as (

    -- a replayed or retried unit counts once, as its first arrival
    {{ dayclose.first_copies('unit_lines', ['line_id', 'plc_seq']) }}

),

sku_days as (

    select
        production_date,
        sku,
        cast(sum(case when verdict = 'good' then 1 else 0 end) as bigint) as good_units,
        cast(sum(case when verdict = 'reject' then 1 else 0 end) as bigint) as rejected_units,
        cast(
            sum(case when verdict = 'good' and has_sensor_out_of_spec then 1 else 0 end) as bigint
        ) as good_units_with_sensor_flags

    from units
    group by production_date, sku

),

final as (

    {{ dayclose.select_with_day_status('units', 'sku_days', 'production_date') }}

)

select * from final
