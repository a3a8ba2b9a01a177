{#
    SQL aggregate: the values of `measure` joined by `delimiter_text` (a SQL string literal), in
    the order of `order_by_clause` (`order by ...`). dbt's listagg where the engine's takes an
    order (DuckDB, Postgres); Spark's has none: there the values are sorted (the order of the
    measure itself, the only one used).
#}
{% macro ordered_listagg(measure, delimiter_text, order_by_clause) -%}
    {{ return(adapter.dispatch('ordered_listagg', 'dayclose')(measure, delimiter_text, order_by_clause)) }}
{%- endmacro %}

{% macro default__ordered_listagg(measure, delimiter_text, order_by_clause) -%}
    {{ dbt.listagg(measure, delimiter_text, order_by_clause) }}
{%- endmacro %}

{% macro spark__ordered_listagg(measure, delimiter_text, order_by_clause) -%}
    {%- if order_by_clause | trim | lower != 'order by ' ~ (measure | trim | lower) -%}
        {{ exceptions.raise_compiler_error("ordered_listagg on Spark sorts by the measure only, not " ~ order_by_clause) }}
    {%- endif -%}
    array_join(array_sort(collect_list({{ measure }})), {{ delimiter_text }})
{%- endmacro %}
