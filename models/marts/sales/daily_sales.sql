{#
    Daily sales per shop, grouped by when the sale happened (sold_at), built by arrival: each
    nightly run rebuilds the last sales_window_days days, each day overwritten whole
    (macros/materializations/microbatch_overwrite.sql). A sale counts once, at its first
    arrival (int_sales_deduplicated). Each row tells readers how far to trust its day:
    can_still_change, expected_share_complete, age_hours, built_as_of.
#}
{#- Spark: dbt-spark's microbatch overwrites the batch's day partitions (dynamic partition overwrite);
    the pre_hook drops the run's rebuilt days first: a day the select no longer returns keeps none -#}
{{
    config(
        materialized='incremental',
        incremental_strategy='microbatch',
        event_time='sale_date',
        partition_by='sale_date' if target.type == 'spark' else none,
        pre_hook="{{ dayclose.delete_rebuilt_days('sales', 'sale_date') if target.type == 'spark' }}",
        batch_size=dayclose.microbatch_batch_size(),
        begin=dayclose.microbatch_begin(),
        lookback=dayclose.window_days('sales'),
        on_schema_change='fail',
        tags=['sales'],
    )
}}

{%- set rebuilt = dayclose.rebuilt_range('sales') -%}
{%- set first_changeable = dayclose.as_of_day(1 - dayclose.window_days('sales')) -%}

with

sales as (

    -- dbt limits this to the batch's days (the event_time of the ref); of those, the days
    -- this run rebuilds (a month batch reaches beyond them); a run as of T counts what had
    -- arrived, in complete batches, by T
    select * from {{ ref('int_sales_deduplicated') }}
    where
        sold_at >= cast('{{ rebuilt[0] }}' as {{ dbt.type_timestamp() }})
        and sold_at < cast('{{ rebuilt[1] }}' as {{ dbt.type_timestamp() }})
        and batch_completed_at <= {{ dayclose.as_of_at() }}

),

lateness_curve as (

    select * from {{ ref('arrival_lateness_curve') }}
    where source_name = 'sales'

),

shop_days as (

    select
        sale_date,
        shop_id,
        cast(sum(amount) as decimal(18, 2)) as sales_amount,
        cast(count(*) as bigint) as sales_count

    from sales
    group by sale_date, shop_id

),

aged as (

    -- hours from the end of the day to the run's data cutoff
    select
        *,
        {{ dbt.datediff(
            dbt.dateadd('day', 1, dbt.cast('sale_date', dbt.type_timestamp())),
            dayclose.data_cutoff_at(),
            'second'
        ) }} / 3600.0 as day_age_hours

    from shop_days

),

final as (

    select
        aged.sale_date,
        aged.shop_id,
        aged.sales_amount,
        aged.sales_count,
        aged.sale_date >= cast('{{ first_changeable }}' as date) as can_still_change,
        cast(
            case
                when aged.day_age_hours >= 24 * 14 then 1
                else lateness_curve.share_arrived
            end as decimal(18, 6)
        ) as expected_share_complete,
        cast(aged.day_age_hours as decimal(18, 6)) as age_hours,
        {{ dayclose.as_of_at() }} as built_as_of

    from aged
    left join lateness_curve
        on cast(floor(aged.day_age_hours) as integer) = lateness_curve.age_hours

)

select * from final
