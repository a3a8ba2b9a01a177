{#
    Warn gate no_new_fields_lately, on a <source>_new_fields model: one row per set of keys
    besides the contract's fields that the lines of the batches arrived in the `days` days
    before the as-of day carried, with how many lines carried them there and the first batch
    that ever did. A producer added a field: its lines are counted (unless strict_fields), and
    the contract should follow.

        data_tests:
          - no_new_fields_lately:
              arguments: {days: 7}
              config: {severity: warn, tags: [gate]}
#}
{% test no_new_fields_lately(model, days=7) %}
{%- set since = dayclose.as_of_day(-days) -%}
with

new_fields as (

    select * from {{ model }}
    where new_fields is not null

),

final as (

    select
        new_fields,
        sum(
            case
                when batch_completed_at > cast('{{ since }}' as {{ dbt.type_timestamp() }}) then line_count else 0
            end
        ) as line_count_lately,
        min(batch_id) as first_batch_id,
        max(batch_id) as last_batch_id

    from new_fields
    group by new_fields
    having max(batch_completed_at) > cast('{{ since }}' as {{ dbt.type_timestamp() }})

)

select * from final
{% endtest %}
