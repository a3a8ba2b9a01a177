{#
    Each event once: the first copy to arrive of every key (a resend, a producer
    retry, a replayed backlog all carry the same key). Renders a select over
    `relation` (a CTE or relation name) keeping all its columns but the rank.
    Ties on received_at fall back to the batch, file and line, so the choice is
    deterministic and a rerun picks the same copy.
#}
{% macro first_arrivals(relation, key_columns) %}
    select * from (
        select
            *,
            row_number() over (
                partition by {{ key_columns | join(', ') }}
                order by received_at, batch_id, file_name, line_number
            ) as copy_number

        from {{ relation }}
    ) as copies_ranked
    where copy_number = 1
{% endmacro %}


{#
    The days [rebuilt_from, rebuilt_to) of a source as a one-column relation
    (`calendar_date`), for gates that must look at every day, also the empty ones.
#}
{% macro rebuilt_days(source_name) %}
    {%- set rebuilt = dayclose.rebuilt_range(source_name) -%}
    {%- set first_day = modules.datetime.date.fromisoformat(rebuilt[0]) -%}
    {%- set day_count = (modules.datetime.date.fromisoformat(rebuilt[1]) - first_day).days -%}
    select cast({{ dbt.dateadd('day', 'n', "cast('" ~ rebuilt[0] ~ "' as date)") }} as date) as calendar_date
    from ({{ dayclose.integer_spine([day_count, 1] | max) }}) as day_numbers
    where n < {{ day_count }}
{% endmacro %}
