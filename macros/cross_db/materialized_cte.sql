{#
    The keyword between a CTE's name and its query for a CTE whose columns must be computed
    once (`name as {{ dayclose.materialized_cte() }} (`): Postgres inlines a CTE that is read
    once into its reader, where an expression the reader uses twice (a regular expression's
    verdict) is computed twice, so there it says `materialized`. DuckDB computes a CTE's
    columns once either way, and materializing would only copy every row; other engines have no such keyword.
#}
{% macro materialized_cte() -%}
    {{ return(adapter.dispatch('materialized_cte', 'dayclose')()) }}
{%- endmacro %}

{% macro default__materialized_cte() -%}
{%- endmacro %}

{% macro postgres__materialized_cte() -%}
    materialized
{%- endmacro %}
