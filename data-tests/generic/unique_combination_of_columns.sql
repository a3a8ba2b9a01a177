{#
    unique_combination_of_columns: fails for every combination of the columns
    that appears more than once (a stand-in for the dbt_utils test).

        data_tests:
          - unique_combination_of_columns:
              arguments:
                combination_of_columns: [sale_date, shop_id]
#}
{% test unique_combination_of_columns(model, combination_of_columns) %}

select
    {{ combination_of_columns | join(', ') }},
    count(*) as occurrences
from {{ model }}
group by {{ combination_of_columns | join(', ') }}
having count(*) > 1

{% endtest %}
