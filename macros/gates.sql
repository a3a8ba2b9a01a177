{#
    Gate SQL shared by the sources' singular tests (data-tests/<source>/).
#}

{#
    Days of the rebuilt range with no rows in `relation`, unless the
    business_calendar seed allows the source to be empty that day.
#}
{% macro empty_days(source_name, relation, date_column) %}
    {%- set rebuilt = dayclose.rebuilt_range(source_name) -%}
with

days as (

    {{ dayclose.rebuilt_days(source_name) }}

),

rows_per_day as (

    select
        {{ date_column }} as calendar_date,
        count(*) as row_count

    from {{ relation }}
    where
        {{ date_column }} >= cast('{{ rebuilt[0] }}' as date)
        and {{ date_column }} < cast('{{ rebuilt[1] }}' as date)
    group by {{ date_column }}

),

allowed as (

    select calendar_date from {{ ref('business_calendar') }}
    where source_name = '{{ source_name }}'

),

first_published as (

    -- days before the source's first data are a new deployment, not an outage;
    -- a relation with no rows at all has every day checked
    select coalesce(min({{ date_column }}), cast('1900-01-01' as date)) as calendar_date
    from {{ relation }}

),

final as (

    select
        days.calendar_date,
        coalesce(rows_per_day.row_count, 0) as row_count

    from days
    inner join first_published
        on days.calendar_date >= first_published.calendar_date
    left join rows_per_day
        on days.calendar_date = rows_per_day.calendar_date
    left join allowed
        on days.calendar_date = allowed.calendar_date
    where
        rows_per_day.row_count is null
        and allowed.calendar_date is null

)

select * from final
{% endmacro %}


{#
    Days of the rebuilt range whose total is outside a band around the median of
    the same weekday over the previous `volume_anomaly_weeks` weeks:
    below (1 - band) x median or above (1 + band) x median. Needs at least two
    earlier weeks to judge.
#}
{% macro volume_anomalies(source_name, relation, date_column, value_expression) %}
    {%- set rebuilt = dayclose.rebuilt_range(source_name) -%}
    {%- set weeks = var('volume_anomaly_weeks') -%}
    {%- set band = var('volume_anomaly_band') -%}
with

daily as (

    select
        {{ date_column }} as calendar_date,
        sum({{ value_expression }}) as day_total

    from {{ relation }}
    where
        {{ date_column }} >= {{ dbt.dateadd('day', -7 * weeks, "cast('" ~ rebuilt[0] ~ "' as date)") }}
        and {{ date_column }} < cast('{{ rebuilt[1] }}' as date)
    group by {{ date_column }}

),

checked_days as (

    select * from daily
    where calendar_date >= cast('{{ rebuilt[0] }}' as date)

),

same_weekday as (

    select
        checked_days.calendar_date,
        checked_days.day_total,
        count(earlier.day_total) as weeks_compared,
        percentile_cont(0.5) within group (order by earlier.day_total) as weekday_median

    from checked_days
    inner join daily as earlier
        on
            earlier.calendar_date < checked_days.calendar_date
            and {{ dbt.datediff('earlier.calendar_date', 'checked_days.calendar_date', 'day') }}
            in ({% for w in range(1, weeks + 1) %}{{ 7 * w }}{{ ', ' if not loop.last }}{% endfor %})
    group by checked_days.calendar_date, checked_days.day_total

),

final as (

    select
        calendar_date,
        day_total,
        weekday_median,
        weeks_compared

    from same_weekday
    where
        weeks_compared >= 2
        and (
            day_total < (1 - {{ band }}) * weekday_median
            or day_total > (1 + {{ band }}) * weekday_median
        )

)

select * from final
{% endmacro %}


{#
    Nothing lost in landing: every batch the ledger records as loaded has exactly its
    recorded number of lines in the source's raw table `relation` (no batch half
    written, none written twice). Checked for the batches of the last
    late_arrival_scan_days days, so the nightly cost follows the window.
#}
{% macro ledger_mismatches(source_name, relation) %}
{%- set since = dayclose.as_of_day_offset(-var('late_arrival_scan_days')) ~ 'T00' -%}

with

ledger as (

    select * from {{ source('landing', 'load_ledger') }}
    where source_name = '{{ source_name }}' and status = 'loaded' and batch_id >= '{{ since }}'

),

lines as (

    select
        batch_id,
        count(*) as lines_in_table

    from {{ relation }}
    where batch_id >= '{{ since }}'
    group by batch_id

),

final as (

    select
        coalesce(ledger.batch_id, lines.batch_id) as batch_id,
        ledger.rows_loaded as lines_in_ledger,
        lines.lines_in_table

    from ledger
    full outer join lines
        on ledger.batch_id = lines.batch_id
    where
        ledger.rows_loaded is null
        or ledger.rows_loaded <> coalesce(lines.lines_in_table, 0)

)

select * from final
{% endmacro %}
