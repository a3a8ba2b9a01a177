{#
    The SQL type of a double precision number: `double precision` (SQL's name, which DuckDB and
    Postgres read), `double` on Spark (which knows no `double precision`).
#}
{% macro type_double() -%}
    {{ return(adapter.dispatch('type_double', 'dayclose')()) }}
{%- endmacro %}

{% macro default__type_double() -%}
    double precision
{%- endmacro %}

{% macro spark__type_double() -%}
    double
{%- endmacro %}
