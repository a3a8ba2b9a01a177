{#
    no_rows_in_rebuilt_days, on a model with a day column (`column_name`): fails for every
    row of the days the run rebuilt. For models that list problems per day, such as
    <source>_conflicting_copies: its severity says whether such rows only warn.
#}
{% test no_rows_in_rebuilt_days(model, column_name, source_name) %}
{%- set rebuilt = dayclose.rebuilt_range(source_name) -%}

select * from {{ model }}
where
    {{ column_name }} >= cast('{{ rebuilt[0] }}' as date)
    and {{ column_name }} < cast('{{ rebuilt[1] }}' as date)

{% endtest %}
