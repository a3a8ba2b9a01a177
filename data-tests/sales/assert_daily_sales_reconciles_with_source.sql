{#
    Reconciliation gate: for every day the run rebuilt, every shop's
    published count and amount equal the valid, deduplicated sales known as of
    the run. Exact for counts; money within money_tolerance (0 by default: amounts
    are decimals, summed exactly).
    Any row returned names the day, the shop and both figures.
#}
{{ config(tags=['gate', 'sales']) }}

{%- set window_from, window_to = dayclose.rebuilt_range('sales') -%}

with

sale_lines as (

    select * from {{ ref('int_sale_lines_validated') }}
    where
        is_valid
        and sold_at >= {{ dayclose.timestamp_literal(window_from ~ ' 00:00:00') }}
        and sold_at < {{ dayclose.timestamp_literal(window_to ~ ' 00:00:00') }}

),

published as (

    select * from {{ ref('daily_sales') }}
    where
        sale_date >= cast('{{ window_from }}' as date)
        and sale_date < cast('{{ window_to }}' as date)

),

distinct_sales as (

    select
        event_id,
        min(sale_date) as sale_date,
        min(shop_id) as shop_id,
        min(amount) as amount

    from sale_lines
    group by event_id

),

expected as (

    select
        sale_date,
        shop_id,
        sum(amount) as sales_amount,
        count(*) as sales_count

    from distinct_sales
    group by sale_date, shop_id

),

final as (

    select
        coalesce(expected.sale_date, published.sale_date) as sale_date,
        coalesce(expected.shop_id, published.shop_id) as shop_id,
        expected.sales_count as source_count,
        published.sales_count as published_count,
        expected.sales_amount as source_amount,
        published.sales_amount as published_amount

    from expected
    full outer join published
        on
            expected.sale_date = published.sale_date
            and expected.shop_id = published.shop_id
    where
        expected.sales_count is null
        or published.sales_count is null
        or expected.sales_count <> published.sales_count
        or abs(expected.sales_amount - published.sales_amount) > {{ var('money_tolerance') }}

)

select * from final
