{#
    Time helpers. Every *_at column in dayclose is a UTC timestamp without time
    zone; every *_date column is a UTC calendar date.
#}

{# A UTC timestamp literal from 'YYYY-MM-DD HH:MM:SS'. #}
{% macro timestamp_literal(text) -%}
    cast('{{ text }}' as {{ dbt.type_timestamp() }})
{%- endmacro %}


{#
    A per-run value (as_of, rebuilt_from, rebuilt_to, run_id, restate_reason): the
    --vars of a dbt CLI user, else DAYCLOSE_RUN_<NAME>, which the shim sets for each
    invocation. The environment is read only when executing: dbt re-parses the whole
    project whenever --vars change, and a new run must not cost a new parse.
#}
{% macro run_var(name) -%}
    {%- set value = var(name, '') -%}
    {%- if not value and execute -%}
        {%- set value = env_var('DAYCLOSE_RUN_' ~ (name | upper), '') -%}
    {%- endif -%}
    {{- return(value) -}}
{%- endmacro %}


{# The run's as-of instant as text: the shim's value, else the invocation time (UTC). #}
{% macro as_of_text() -%}
    {%- set value = dayclose.run_var('as_of') -%}
    {%- if value -%}
        {{- return(value) -}}
    {%- else -%}
        {{- return(run_started_at.strftime('%Y-%m-%d %H:%M:%S')) -}}
    {%- endif -%}
{%- endmacro %}


{# The as-of instant as a SQL timestamp. #}
{% macro as_of_at() -%}
    {{ dayclose.timestamp_literal(dayclose.as_of_text()) }}
{%- endmacro %}


{# The as-of day (the day the run happens in) as a SQL date. #}
{% macro as_of_date() -%}
    cast('{{ dayclose.as_of_text()[:10] }}' as date)
{%- endmacro %}


{# The first day of the nightly window of `window_days` days ending the day before as-of. #}
{% macro window_start_date(window_days) -%}
    cast({{ dbt.dateadd('day', -1 * window_days, dayclose.as_of_date()) }} as date)
{%- endmacro %}


{# Start of the day after `date_expr`, as a timestamp: the instant a day ends. #}
{% macro day_end_at(date_expr) -%}
    cast({{ dbt.dateadd('day', 1, 'cast(' ~ date_expr ~ ' as ' ~ dbt.type_timestamp() ~ ')') }} as {{ dbt.type_timestamp() }})
{%- endmacro %}


{# Whole seconds from `start_at` to `end_at`, negative when end_at is earlier. #}
{% macro seconds_between(start_at, end_at) -%}
    ({{ dbt.datediff(start_at, end_at, 'second') | trim }})
{%- endmacro %}


{# Hours from `start_at` to `end_at`, fractional, negative when end_at is earlier. #}
{% macro hours_between(start_at, end_at) -%}
    ({{ dayclose.seconds_between(start_at, end_at) }} / 3600.0)
{%- endmacro %}


{# The integers 0 .. n-1 as a column `n`, portable to any SQL engine (no generate_series). #}
{% macro integer_spine(n) -%}
    {%- set digits = (n - 1) | string | length -%}
    select n from (
        select
            {%- for i in range(digits) %}
            d{{ i }}.digit * {{ 10 ** i }}{{ ' +' if not loop.last }}
            {%- endfor %} as n
        from
            {%- for i in range(digits) %}
            (
                {%- for d in range(10) %}
                select {{ d }} as digit{{ ' union all' if not loop.last }}
                {%- endfor %}
            ) as d{{ i }}{{ ' cross join' if not loop.last }}
            {%- endfor %}
    ) as spine
    where n < {{ n }}
{%- endmacro %}


{# When this dbt invocation started (UTC), as a SQL timestamp: a wall-clock stamp for audit columns. #}
{% macro invocation_at() -%}
    {{ dayclose.timestamp_literal(run_started_at.strftime('%Y-%m-%d %H:%M:%S')) }}
{%- endmacro %}
