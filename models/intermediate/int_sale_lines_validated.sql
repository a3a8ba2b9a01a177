{#
    Every sales line with its verdict: the contract's decode error, else the first business
    rule it breaks, in this order (the first names the line's dead letter): a known shop, a
    non-negative amount, at most max_sale_amount, received no later than its batch's arrival
    hour ended plus max_clock_skew_minutes (a till whose clock runs ahead, a sale dated 2099:
    else counted in no published day until then), sold before it was received.
#}
{{ config(event_time='sold_at', tags=['sales']) }}

with

decoded as (

    select * from {{ ref('int_sale_lines_decoded') }}

),

shops as (

    select shop_id from {{ ref('shops') }}

),

checked as (

    select
        decoded.*,
        case
            when decoded.decode_error_kind is not null then decoded.decode_error_kind
            when shops.shop_id is null then 'unknown_shop'
            when decoded.amount < 0 then 'negative_amount'
            when decoded.amount > {{ var('max_sale_amount') }} then 'absurd_amount'
            when
                decoded.received_at
                > {{ dbt.dateadd('minute', var('max_clock_skew_minutes'), 'decoded.batch_completed_at') }}
                then 'from_the_future'
            when decoded.sold_at > decoded.received_at then 'sold_after_received'
        end as dead_letter_kind,
        case
            when decoded.decode_error_kind is not null then decoded.decode_error
            when shops.shop_id is null then {{ dbt.concat(["'unknown shop_id '", "decoded.shop_id"]) }}
            when decoded.amount < 0 then 'negative amount'
            when decoded.amount > {{ var('max_sale_amount') }}
                then 'absurd amount: above max_sale_amount ({{ var("max_sale_amount") }})'
            when
                decoded.received_at
                > {{ dbt.dateadd('minute', var('max_clock_skew_minutes'), 'decoded.batch_completed_at') }}
                then 'received_at after its batch arrived, beyond max_clock_skew_minutes'
            when decoded.sold_at > decoded.received_at then 'sold_at after received_at'
        end as dead_letter_reason

    from decoded
    left join shops
        on decoded.shop_id = shops.shop_id

),

final as (

    select
        *,
        dead_letter_kind is null as is_valid

    from checked

)

select * from final
