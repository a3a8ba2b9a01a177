{#
    Gate volume_within_band, on a daily mart's measure column: fails for every day of
    the run's rebuilt range whose total is outside a band around the median of the same
    weekday over the previous volume_anomaly_weeks weeks (those there are: at least two):
    below (1 - band) x median or above (1 + band) x median (volume_anomaly_band), or at 1.9
    to 2.1 times the median whatever the band: a day sent twice with new event ids (seed
    004's 2.1x), which no id can tell from real sales. Each failing row says how many
    earlier weekdays judged it, and what it looks like. Warns or blocks as
    volume_anomaly_severity says.

        columns:
          - name: sales_amount
            data_tests:
              - volume_within_band:
                  arguments: {source_name: sales, date_column: sale_date}
#}
{% test volume_within_band(model, column_name, source_name, date_column) %}
{%- set rebuilt = dayclose.rebuilt_range(source_name) -%}
{%- set weeks = var('volume_anomaly_weeks') -%}
{%- set band = var('volume_anomaly_band') -%}
with

daily as (

    select
        {{ date_column }} as calendar_date,
        sum({{ column_name }}) as day_total

    from {{ model }}
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
        weeks_compared,
        case
            when day_total between 1.9 * weekday_median and 2.1 * weekday_median
                then 'possible resend: 1.9 to 2.1 times the usual total'
            when day_total < weekday_median then 'below the band'
            else 'above the band'
        end as finding

    from same_weekday
    where
        weeks_compared >= 2
        and (
            day_total < (1 - {{ band }}) * weekday_median
            or day_total > (1 + {{ band }}) * weekday_median
            or day_total between 1.9 * weekday_median and 2.1 * weekday_median
        )

)

select * from final

{% endtest %}
