{#
    A line that has been producing (units on any of the 7 days before) and
    reports zero units for a day it should have run is a silent outage, not a
    quiet day: the gate fails, unless the line_idle_days seed says the line was
    known to be idle. Checked for the complete days the run rebuilt.
#}
{{ config(tags=['gate', 'units']) }}

{%- set rebuilt = dayclose.rebuilt_range('units') -%}

with

line_days as (

    select * from {{ ref('line_daily_units') }}
    where
        production_date >= {{ dbt.dateadd('day', -7, "cast('" ~ rebuilt[0] ~ "' as date)") }}
        and production_date < cast('{{ rebuilt[1] }}' as date)

),

idle_days as (

    select * from {{ ref('line_idle_days') }}

),

days as (

    {%- for day in dayclose.days_between(rebuilt[0], rebuilt[1]) %}
    {{ 'union all' if not loop.first }}
    select cast('{{ day }}' as date) as production_date
    {%- else %}
    select cast(null as date) as production_date where 1 = 0
    {%- endfor %}

),

active_lines as (

    select distinct
        days.production_date,
        line_days.line_id

    from days
    inner join line_days
        on
            days.production_date > line_days.production_date
            and {{ dbt.dateadd('day', -7, 'days.production_date') }} <= line_days.production_date
            and line_days.units > 0

),

final as (

    select
        active_lines.production_date,
        active_lines.line_id,
        coalesce(today.units, 0) as units

    from active_lines
    left join line_days as today
        on
            active_lines.line_id = today.line_id
            and active_lines.production_date = today.production_date
    left join idle_days
        on
            active_lines.line_id = idle_days.line_id
            and active_lines.production_date = idle_days.idle_date
    where
        coalesce(today.units, 0) = 0
        and idle_days.line_id is null

)

select * from final
