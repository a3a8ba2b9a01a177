{#
    The columns that tell dashboard readers how far to trust a day, shared by every
    daily mart (daily_sales, daily_good_units):

    - can_still_change: a future nightly run will rebuild this day;
    - expected_share_complete: the share of the day's events that has usually
      arrived by the age the day has at this run's data cutoff, read off the
      source's measured lateness curve (1 beyond the curve, null before lateness
      has been measured);
    - age_hours: hours from the end of the day to the data cutoff;
    - built_as_of: the as-of instant of the run that built the row.

    Renders a select over the CTE `cte`, keeping all its columns.
#}
{% macro select_with_day_status(source_name, cte, date_column) %}
    {%- set first_changeable = dayclose.as_of_day_offset(-(dayclose.window_days(source_name) - 1)) -%}
    {%- set age -%}
        {{ dayclose.hours_between(dayclose.day_end_at(cte ~ '.' ~ date_column), dayclose.data_cutoff_at()) }}
    {%- endset -%}
    select
        {{ cte }}.*,
        {{ cte }}.{{ date_column }} >= cast('{{ first_changeable }}' as date) as can_still_change,
        cast(
            case
                when {{ age }} >= 24 * 14 then 1
                else lateness_curve.share_arrived
            end as decimal(18, 6)
        ) as expected_share_complete,
        cast({{ age }} as decimal(18, 6)) as age_hours,
        {{ dayclose.as_of_at() }} as built_as_of

    from {{ cte }}
    left join {{ ref('arrival_lateness_curve') }} as lateness_curve
        on
            lateness_curve.source_name = '{{ source_name }}'
            and lateness_curve.age_hours = cast(floor({{ age }}) as integer)
{% endmacro %}
