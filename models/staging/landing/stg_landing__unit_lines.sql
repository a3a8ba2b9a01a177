with

source as (

    select * from {{ source('landing', 'unit_lines') }}

),

final as (

    select
        batch_id,
        batch_arrived_at,
        batch_completed_at,
        file_name,
        line_number,
        raw_line,
        decode_error,
        line_id,
        plc_seq,
        sku,
        event_at,
        received_at,
        verdict,
        fill_level_ml,
        capper_torque_nm,
        temperature_c,
        cast(event_at as date) as production_date

    from source

)

select * from final
