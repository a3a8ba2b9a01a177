{#
    Gate first_arrivals_account_for_lines, on a source's events model (each event once,
    at its first arrival): for the days the run rebuilt, every valid line known as of the
    run is an event there (nothing lost), that event's first arrival is a valid line that
    exists (nothing invented) and no copy arrived before it (the first is the first).
    Rows name the event, the line and what is wrong.
#}
{% test first_arrivals_account_for_lines(model, source_name, lines) %}
{%- set entry = dayclose.landing_source(source_name) -%}
{%- set rebuilt = dayclose.rebuilt_range(source_name) -%}
{%- set keys = entry['event_key'] -%}
{%- set in_rebuilt_days -%}
    {{ entry['event_at'] }} >= {{ dayclose.timestamp_literal(rebuilt[0] ~ ' 00:00:00') }}
    and {{ entry['event_at'] }} < {{ dayclose.timestamp_literal(rebuilt[1] ~ ' 00:00:00') }}
    and batch_completed_at <= {{ dayclose.as_of_at() }}
{%- endset -%}

with

valid_lines as (

    select * from {{ lines }}
    where is_valid and {{ in_rebuilt_days }}

),

first_arrivals as (

    select * from {{ model }}

),

lines_checked as (

    select
        {%- for k in keys %}
        valid_lines.{{ k }},
        {%- endfor %}
        valid_lines.batch_id,
        valid_lines.file_name,
        valid_lines.line_number,
        case
            when first_arrivals.batch_id is null then 'valid line without an event'
            when
                valid_lines.batch_id < first_arrivals.batch_id
                or (
                    valid_lines.batch_id = first_arrivals.batch_id
                    and valid_lines.received_at < first_arrivals.received_at
                )
                then 'a copy arrived before the first arrival'
        end as problem

    from valid_lines
    left join first_arrivals
        on {{ dayclose.keys_equal(keys, 'valid_lines', 'first_arrivals') }}

),

events_checked as (

    select
        {%- for k in keys %}
        first_arrivals.{{ k }},
        {%- endfor %}
        first_arrivals.batch_id,
        first_arrivals.file_name,
        first_arrivals.line_number,
        'first arrival that is not a valid line' as problem

    from (select * from first_arrivals where {{ in_rebuilt_days }}) as first_arrivals
    left join valid_lines
        on
            first_arrivals.batch_id = valid_lines.batch_id
            and first_arrivals.file_name = valid_lines.file_name
            and first_arrivals.line_number = valid_lines.line_number
    where valid_lines.batch_id is null

),

final as (

    select * from lines_checked
    where problem is not null
    union all
    select * from events_checked

)

select * from final

{% endtest %}
