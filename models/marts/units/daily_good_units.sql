{#
    Good units per SKU and production day (the PLC's clock), for finance. Each
    nightly run rebuilds the last units_window_days days, each day whole; a unit
    (line_id, plc_seq) counts once, at its first arrival, however often it was
    replayed; the count is the PLC's verdict, whatever the sensors said.
#}
{{ config(**dayclose.daily_microbatch('units', 'production_date')) }}

with

line_sku_days as (

    -- dbt limits this to the batch's days through the event_time of the ref, and
    -- in_batch_days to those the run rebuilds (windows.sql)
    select * from {{ ref('int_line_sku_days_counted') }}
    where {{ dayclose.in_batch_days('units', 'production_date') }}

),

sku_days as (

    select
        production_date,
        sku,
        cast(sum(good_units) as bigint) as good_units,
        cast(sum(rejected_units) as bigint) as rejected_units,
        cast(sum(good_units_with_sensor_flags) as bigint) as good_units_with_sensor_flags

    from line_sku_days
    group by production_date, sku

),

final as (

    {{ dayclose.select_with_day_status('units', 'sku_days', 'production_date') }}

)

select * from final
