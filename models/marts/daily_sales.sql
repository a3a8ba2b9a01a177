{#
    Daily sales per shop, grouped by when the sale happened (sold_at), built by
    arrival: each nightly run rebuilds the last sales_window_days days, and each
    day of the window is overwritten whole (macros/microbatch_overwrite.sql).
#}
{{
    config(
        materialized='incremental',
        incremental_strategy='microbatch',
        event_time='sale_date',
        batch_size='day',
        begin='2020-01-01',
        lookback=var('sales_window_days'),
        tags=['sales'],
    )
}}

{%- set window_days = dayclose.window_days('sales') -%}
{%- set first_changeable = dayclose.as_of_day_offset(-(window_days - 1)) -%}

with

sale_lines as (

    -- dbt limits this to the batch's day through the event_time of the ref
    select * from {{ ref('int_sale_lines_validated') }}
    where is_valid

),

lateness_curve as (

    select * from {{ ref('arrival_lateness_curve') }}
    where source_name = 'sales'

),

copies_ranked as (

    select
        event_id,
        shop_id,
        sale_date,
        amount,
        row_number() over (
            partition by event_id
            order by received_at, batch_id, file_name, line_number
        ) as copy_number

    from sale_lines

),

sales as (

    -- a resent sale (same event_id) counts once, as its first arrival
    select * from copies_ranked
    where copy_number = 1

),

shop_days as (

    select
        sale_date,
        shop_id,
        sum(amount) as sales_amount,
        count(*) as sales_count

    from sales
    group by sale_date, shop_id

),

day_ages as (

    select
        sale_date,
        {{ dayclose.hours_between(dayclose.day_end_at('sale_date'), dayclose.data_cutoff_at()) }}
            as age_hours

    from shop_days
    group by sale_date

),

final as (

    select
        shop_days.sale_date,
        shop_days.shop_id,
        cast(shop_days.sales_amount as decimal(18, 2)) as sales_amount,
        cast(shop_days.sales_count as bigint) as sales_count,
        shop_days.sale_date >= cast('{{ first_changeable }}' as date) as can_still_change,
        cast(
            case
                when day_ages.age_hours >= 24 * 14 then 1
                else lateness_curve.share_arrived
            end as {{ dbt.type_numeric() }}
        ) as expected_share_complete,
        cast(day_ages.age_hours as {{ dbt.type_numeric() }}) as age_hours,
        {{ dayclose.as_of_at() }} as built_as_of

    from shop_days
    inner join day_ages
        on shop_days.sale_date = day_ages.sale_date
    left join lateness_curve
        on cast(floor(day_ages.age_hours) as integer) = lateness_curve.age_hours

)

select * from final
