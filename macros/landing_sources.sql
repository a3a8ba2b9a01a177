{#
    The landing sources and their nightly windows. A source's window is the
    project variable <source>_window_days: how many days before the as-of day a
    nightly run rebuilds.
#}

{% macro landing_sources() %}
    {{ return(['sales', 'units']) }}
{% endmacro %}


{% macro window_days(source_name) %}
    {{ return(var(source_name ~ '_window_days')) }}
{% endmacro %}


{# SQL: the configured window of the source named in `source_column`. #}
{% macro window_days_of(source_column) -%}
    case {{ source_column }}
        {%- for name in dayclose.landing_sources() %}
        when '{{ name }}' then {{ dayclose.window_days(name) }}
        {%- endfor %}
    end
{%- endmacro %}


{# 'YYYY-MM-DD' of the as-of day shifted by `days` (negative: earlier). #}
{% macro as_of_day_offset(days) -%}
    {%- set day = modules.datetime.datetime.strptime(dayclose.as_of_text()[:10], '%Y-%m-%d') -%}
    {{- return((day + modules.datetime.timedelta(days=days)).strftime('%Y-%m-%d')) -}}
{%- endmacro %}


{# The as-of instant floored to the hour: batches are arrival hours, so this is the data cutoff. #}
{% macro data_cutoff_at() -%}
    {{ dayclose.timestamp_literal(dayclose.as_of_text()[:13] ~ ':00:00') }}
{%- endmacro %}


{# [from, to) 'YYYY-MM-DD' of the days this run rebuilds: the shim's vars, else the source's window. #}
{% macro rebuilt_range(source_name) -%}
    {%- set start = dayclose.run_var('rebuilt_from') or dayclose.as_of_day_offset(-dayclose.window_days(source_name)) -%}
    {%- set end = dayclose.run_var('rebuilt_to') or dayclose.as_of_day_offset(0) -%}
    {{- return([start, end]) -}}
{%- endmacro %}
