with

source as (

    select * from {{ source('landing', 'sale_lines') }}

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
        event_id,
        shop_id,
        sold_at,
        received_at,
        amount,
        cast(sold_at as date) as sale_date

    from source

)

select * from final
