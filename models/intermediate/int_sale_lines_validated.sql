{{
    config(
        event_time='sold_at',
        tags=['sales'],
    )
}}

with

sale_lines as (

    select * from {{ ref('stg_landing__sale_lines') }}

),

shops as (

    select * from {{ ref('shops') }}

),

known_as_of as (

    -- only what had arrived, in complete batches, by the run's as-of instant
    select * from sale_lines
    where batch_completed_at <= {{ dayclose.as_of_at() }}

),

checked as (

    select
        known_as_of.batch_id,
        known_as_of.batch_completed_at,
        known_as_of.file_name,
        known_as_of.line_number,
        known_as_of.raw_line,
        known_as_of.event_id,
        known_as_of.shop_id,
        known_as_of.sold_at,
        known_as_of.received_at,
        known_as_of.amount,
        known_as_of.sale_date,
        case
            when known_as_of.decode_error is not null
                then known_as_of.decode_error
            when shops.shop_id is null
                then {{ dbt.concat(["'unknown shop_id '", "known_as_of.shop_id"]) }}
            when known_as_of.amount < 0
                then 'negative amount'
            when known_as_of.amount > {{ var('max_sale_amount') }}
                then 'absurd amount: above max_sale_amount ({{ var("max_sale_amount") }})'
            when known_as_of.sold_at > known_as_of.received_at
                then 'sold_at after received_at'
        end as dead_letter_reason

    from known_as_of
    left join shops
        on known_as_of.shop_id = shops.shop_id

),

final as (

    select
        *,
        dead_letter_reason is null as is_valid

    from checked

)

select * from final
