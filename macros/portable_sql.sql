{#
    Small SQL building blocks that render the same meaning on every engine (dbt's
    cross-database macros underneath): literals, day boundaries, differences, a spine.
#}


{# A UTC timestamp literal from 'YYYY-MM-DD HH:MM:SS'. #}
{% macro timestamp_literal(text) -%}
    cast('{{ text }}' as {{ dbt.type_timestamp() }})
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
