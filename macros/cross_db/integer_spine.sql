{# The integers 0 .. n-1 as a column `n`, from nothing but SQL (no generate_series: portable). #}
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
