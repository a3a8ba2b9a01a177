{#
    Gate no_empty_days, on a daily mart's date column: fails for every day of the run's
    rebuilt range with no rows, unless the business_calendar seed allows the source to
    be empty that day ("success with zero rows" is a failure). Days before the mart's
    first row are a new deployment, not an outage; a source that never loaded a batch
    has not started.

        columns:
          - name: sale_date
            data_tests:
              - no_empty_days:
                  arguments: {source_name: sales}
                  config: {tags: [gate]}
#}
{% test no_empty_days(model, column_name, source_name) %}
{%- set rebuilt = dayclose.rebuilt_range(source_name) -%}
with

days as (

    {%- for day in dayclose.days_between(rebuilt[0], rebuilt[1]) %}
    {{ 'union all' if not loop.first }}
    select cast('{{ day }}' as date) as calendar_date
    {%- else %}
    select cast(null as date) as calendar_date where 1 = 0
    {%- endfor %}

),

rows_per_day as (

    select
        {{ column_name }} as calendar_date,
        count(*) as row_count

    from {{ model }}
    where
        {{ column_name }} >= cast('{{ rebuilt[0] }}' as date)
        and {{ column_name }} < cast('{{ rebuilt[1] }}' as date)
    group by {{ column_name }}

),

allowed as (

    select calendar_date from {{ ref('business_calendar') }}
    where source_name = '{{ source_name }}'

),

first_published as (

    -- days before the source's first data are a new deployment, not an outage, and a
    -- source that never loaded a batch has not started; once it has, a relation with no
    -- rows at all has every day checked
    select
        coalesce(
            (select min({{ column_name }}) from {{ model }}),
            case
                when (
                    select count(*) from {{ ref('stg_landing__batch_loads') }}
                    where source_name = '{{ source_name }}' and is_loaded
                ) > 0
                    then cast('1900-01-01' as date)
                else cast('9999-12-31' as date)
            end
        ) as calendar_date

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

{% endtest %}
