{#
    The restatement ledger: every change to a day whose finance month had
    already closed (a month closes on the 3rd of the next month, see the
    finance_close_calendar seed; the close takes effect at the end of that day).
    One row per published version made after the close: the value as published
    at close, the new value, the delta, when, why, and the batches that brought
    the units in. Rebuilt from daily_good_units_versions, so it is exact and
    idempotent.
#}
{{ config(tags=['units']) }}

with

versions as (

    select * from {{ ref('daily_good_units_versions') }}

),

close_calendar as (

    select
        period_start_date,
        period_end_date,
        closes_on

    from {{ ref('finance_close_calendar') }}

),

unit_lines as (

    select * from {{ ref('int_unit_lines_validated') }}
    where is_valid

),

after_close as (

    select
        versions.production_date,
        versions.sku,
        versions.version_number,
        versions.good_units,
        versions.published_as_of,
        versions.recorded_at,
        versions.reason,
        close_calendar.closes_on,
        {{ dbt.dateadd('day', 1, 'close_calendar.closes_on') }} as closed_at

    from versions
    inner join close_calendar
        on
            versions.production_date >= close_calendar.period_start_date
            and versions.production_date <= close_calendar.period_end_date
    where versions.published_as_of >= {{ dbt.dateadd('day', 1, 'close_calendar.closes_on') }}

),

version_at_close as (

    select
        after_close.production_date,
        after_close.sku,
        after_close.version_number,
        max(versions.version_number) as close_version_number

    from after_close
    inner join versions
        on
            after_close.production_date = versions.production_date
            and after_close.sku = versions.sku
            and after_close.closed_at > versions.published_as_of
    group by after_close.production_date, after_close.sku, after_close.version_number

),

previous_versions as (

    select
        after_close.production_date,
        after_close.sku,
        after_close.version_number,
        versions.published_as_of as previous_published_as_of

    from after_close
    inner join versions
        on
            after_close.production_date = versions.production_date
            and after_close.sku = versions.sku
            and after_close.version_number = versions.version_number + 1

),

restated_range as (

    select cast(min(production_date) as {{ dbt.type_timestamp() }}) as first_event_at
    from after_close

),

causing_batches as (

    select distinct
        after_close.production_date,
        after_close.sku,
        after_close.version_number,
        unit_lines.batch_id

    from after_close
    inner join restated_range
        on 1 = 1
    inner join unit_lines
        on
            restated_range.first_event_at <= unit_lines.event_at
            and after_close.production_date = unit_lines.production_date
            and after_close.sku = unit_lines.sku
            and after_close.published_as_of >= unit_lines.batch_completed_at
    left join previous_versions
        on
            after_close.production_date = previous_versions.production_date
            and after_close.sku = previous_versions.sku
            and after_close.version_number = previous_versions.version_number
    where
        previous_versions.previous_published_as_of is null
        or unit_lines.batch_completed_at > previous_versions.previous_published_as_of

),

batch_lists as (

    select
        production_date,
        sku,
        version_number,
        {{ dayclose.ordered_listagg('batch_id', "', '", 'order by batch_id') }} as caused_by_batches

    from causing_batches
    group by production_date, sku, version_number

),

final as (

    select
        after_close.production_date,
        after_close.sku,
        coalesce(at_close.good_units, 0) as published_at_close,
        after_close.good_units as restated_good_units,
        after_close.good_units - coalesce(at_close.good_units, 0) as delta,
        after_close.version_number,
        after_close.closes_on as month_closed_on,
        after_close.published_as_of as restated_as_of,
        after_close.recorded_at,
        after_close.reason,
        batch_lists.caused_by_batches

    from after_close
    left join version_at_close
        on
            after_close.production_date = version_at_close.production_date
            and after_close.sku = version_at_close.sku
            and after_close.version_number = version_at_close.version_number
    left join versions as at_close
        on
            version_at_close.production_date = at_close.production_date
            and version_at_close.sku = at_close.sku
            and version_at_close.close_version_number = at_close.version_number
    left join batch_lists
        on
            after_close.production_date = batch_lists.production_date
            and after_close.sku = batch_lists.sku
            and after_close.version_number = batch_lists.version_number

)

select * from final
