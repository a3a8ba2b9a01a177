{#
    Every sales line with its verdict: the contract's decode error, else the business
    rules below, in their order (the first that fails names the line's dead letter).
#}
{{ config(event_time='sold_at', tags=['sales']) }}

{%- set rules = [
    ['unknown_shop', 'shops.shop_id is null', dbt.concat(["'unknown shop_id '", "decoded.shop_id"])],
    ['negative_amount', 'decoded.amount < 0', "'negative amount'"],
    [
        'absurd_amount', 'decoded.amount > ' ~ var('max_sale_amount'),
        "'absurd amount: above max_sale_amount (" ~ var('max_sale_amount') ~ ")'",
    ],
    ['sold_after_received', 'decoded.sold_at > decoded.received_at', "'sold_at after received_at'"],
] -%}

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
        {{ dayclose.line_verdict(rules) }}

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
