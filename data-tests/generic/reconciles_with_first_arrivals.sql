{#
    Gate reconciles_with_first_arrivals, on a daily mart: for every day the run rebuilt,
    each group's figures equal those recomputed here from the source's first arrivals
    (each valid event once) known as of the run. `group_by`: the mart's columns beside its
    day; `measures`: {mart column: SQL aggregate over the first arrivals}; `tolerance`:
    how far a measure may differ (money_tolerance for amounts; counts are exact at 0).
    Any row names the day, the group and both figures.

        data_tests:
          - reconciles_with_first_arrivals:
              arguments:
                source_name: sales
                group_by: [shop_id]
                measures: {sales_count: "count(*)", sales_amount: "sum(amount)"}
#}
{% test reconciles_with_first_arrivals(model, source_name, group_by, measures, tolerance=0) %}
{%- set entry = dayclose.landing_source(source_name) -%}
{%- set rebuilt = dayclose.rebuilt_range(source_name) -%}
{%- set day = entry['event_date'] -%}
{%- set keys = [day] + group_by -%}

with

first_arrivals as (

    select * from {{ ref(entry['events_model']) }}
    where
        {{ entry['event_at'] }} >= cast('{{ rebuilt[0] }}' as {{ dbt.type_timestamp() }})
        and {{ entry['event_at'] }} < cast('{{ rebuilt[1] }}' as {{ dbt.type_timestamp() }})
        and batch_completed_at <= {{ dayclose.as_of_at() }}

),

published as (

    select * from {{ model }}
    where
        {{ day }} >= cast('{{ rebuilt[0] }}' as date)
        and {{ day }} < cast('{{ rebuilt[1] }}' as date)

),

expected as (

    select
        {{ keys | join(', ') }},
        {%- for column, aggregate in measures.items() %}
        {{ aggregate }} as {{ column }}{{ ',' if not loop.last }}
        {%- endfor %}

    from first_arrivals
    group by {{ keys | join(', ') }}

),

final as (

    select
        {%- for k in keys %}
        coalesce(expected.{{ k }}, published.{{ k }}) as {{ k }},
        {%- endfor %}
        {%- for column in measures %}
        expected.{{ column }} as source_{{ column }},
        published.{{ column }} as published_{{ column }}{{ ',' if not loop.last }}
        {%- endfor %}

    from expected
    full outer join published
        on {% for k in keys %}expected.{{ k }} = published.{{ k }}{{ ' and ' if not loop.last }}{% endfor %}
    where
        {%- for column in measures %}
        abs(coalesce(expected.{{ column }}, 0) - coalesce(published.{{ column }}, 0)) > {{ tolerance }}
        {{- ' or' if not loop.last }}
        {%- endfor %}

)

select * from final

{% endtest %}
