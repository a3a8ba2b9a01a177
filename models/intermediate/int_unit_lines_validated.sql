{#
    Every units line with its verdict and its sensor flags: the contract's decode error, else
    the first business rule it breaks, in this order (the first names the dead letter): a known
    line, a known SKU, a verdict of good or reject, produced after the line was commissioned,
    received no later than its batch's arrival hour ended plus max_clock_skew_minutes (a PLC
    whose clock runs ahead), produced before it was received. A sensor reading outside the SKU's spec is flagged here and
    nothing more: the count follows the PLC's verdict, never the sensors.
#}
{{ config(event_time='event_at', tags=['units']) }}

with

decoded as (

    select * from {{ ref('int_unit_lines_decoded') }}

),

lines as (

    select
        line_id,
        plant_id,
        commissioned_at

    from {{ ref('lines') }}

),

skus as (

    select sku from {{ ref('skus') }}

),

sensor_specs as (

    select * from {{ ref('sensor_specs') }}

),

checked as (

    select
        decoded.*,
        lines.plant_id,
        case
            when decoded.decode_error_kind is not null then decoded.decode_error_kind
            when lines.line_id is null then 'unknown_line'
            when skus.sku is null then 'unknown_sku'
            when decoded.verdict not in ('good', 'reject') then 'unknown_verdict'
            when decoded.event_at < lines.commissioned_at then 'before_commissioning'
            when
                decoded.received_at
                > {{ dbt.dateadd('minute', var('max_clock_skew_minutes'), 'decoded.batch_completed_at') }}
                then 'from_the_future'
            when decoded.event_at > decoded.received_at then 'produced_after_received'
        end as dead_letter_kind,
        case
            when decoded.decode_error_kind is not null then decoded.decode_error
            when lines.line_id is null then {{ dbt.concat(["'unknown line_id '", "decoded.line_id"]) }}
            when skus.sku is null then {{ dbt.concat(["'unknown sku '", "decoded.sku"]) }}
            when decoded.verdict not in ('good', 'reject')
                then {{ dbt.concat(["'verdict not in (good, reject): '", "decoded.verdict"]) }}
            when decoded.event_at < lines.commissioned_at then 'event_at before the line was commissioned'
            when
                decoded.received_at
                > {{ dbt.dateadd('minute', var('max_clock_skew_minutes'), 'decoded.batch_completed_at') }}
                then 'received_at after its batch arrived, beyond max_clock_skew_minutes'
            when decoded.event_at > decoded.received_at then 'event_at after received_at'
        end as dead_letter_reason,
        decoded.fill_level_ml not between sensor_specs.fill_level_min_ml
        and sensor_specs.fill_level_max_ml as is_fill_level_out_of_spec,
        decoded.capper_torque_nm not between sensor_specs.capper_torque_min_nm
        and sensor_specs.capper_torque_max_nm as is_capper_torque_out_of_spec,
        decoded.temperature_c not between sensor_specs.temperature_min_c
        and sensor_specs.temperature_max_c as is_temperature_out_of_spec

    from decoded
    left join lines
        on decoded.line_id = lines.line_id
    left join skus
        on decoded.sku = skus.sku
    left join sensor_specs
        on decoded.sku = sensor_specs.sku

),

final as (

    select
        *,
        dead_letter_kind is null as is_valid,
        coalesce(
            is_fill_level_out_of_spec or is_capper_torque_out_of_spec or is_temperature_out_of_spec,
            false
        ) as has_sensor_out_of_spec

    from checked

)

select * from final
