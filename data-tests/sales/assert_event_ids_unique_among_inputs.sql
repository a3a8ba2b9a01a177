{#
    No event id twice among daily_sales' inputs: every copy of a sale (event_id)
    in the rebuilt days carries the same shop, sale time and amount, so counting
    its first arrival once is exact. A resend that disagrees with the original
    (a till bug, a reused id) fails the gate with the id and what differs.
    Copies outside the rebuilt days are not compared here.
#}
{{ config(tags=['gate', 'sales']) }}

{%- set rebuilt = dayclose.rebuilt_range('sales') -%}

with

sale_lines as (

    select * from {{ ref('int_sale_lines_validated') }}
    where
        is_valid
        and sold_at >= {{ dayclose.timestamp_literal(rebuilt[0] ~ ' 00:00:00') }}
        and sold_at < {{ dayclose.timestamp_literal(rebuilt[1] ~ ' 00:00:00') }}

),

final as (

    select
        event_id,
        count(*) as copies,
        count(distinct sold_at) as distinct_sold_at,
        count(distinct shop_id) as distinct_shops,
        count(distinct amount) as distinct_amounts

    from sale_lines
    group by event_id
    having
        count(distinct sold_at) > 1
        or count(distinct shop_id) > 1
        or count(distinct amount) > 1

)

select * from final
