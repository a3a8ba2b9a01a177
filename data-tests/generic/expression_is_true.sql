{#
    expression_is_true: fails for every row where `expression` is not true.
    A small stand-in for dbt_utils.expression_is_true (dbt Hub is not reachable
    from where this project is built). `where` narrows the rows checked.

        data_tests:
          - expression_is_true:
              arguments:
                expression: "sales_amount >= 0"
#}
{% test expression_is_true(model, expression, where=none, column_name=none) %}

select *
from {{ model }}
where not ({{ expression }})
{%- if where %}
    and ({{ where }})
{%- endif %}

{% endtest %}
