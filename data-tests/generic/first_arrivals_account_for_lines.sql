{#
    Gate first_arrivals_account_for_lines, on a source's events model (each event once,
    at its first arrival): for the days the run rebuilt, every valid line known as of the
    run is an event there (nothing lost), that event's first arrival is a valid line that
    exists (nothing invented), no copy arrived before it (the first is the first) and it
    is registered once (among the registered events of those days, and of the other days
    for the lines whose event is registered there).
    Rows name the event, the line and what is wrong.
#}
{% test first_arrivals_account_for_lines(model, source_name, lines) %}
{%- set entry = dayclose.landing_source(source_name) -%}
{%- set keys = entry['event_key'] -%}
{%- set in_rebuilt_days -%}
    {{ dayclose.in_rebuilt_days(source_name, entry['event_at']) }}
    and batch_completed_at <= {{ dayclose.as_of_at() }}
{%- endset -%}

with

valid_lines as (

    select * from {{ lines }}
    where is_valid and {{ in_rebuilt_days }}

),

registered as (

    -- the registered events of the rebuilt days, and of the lines whose event is registered
    -- on another day (a copy with another event time): not the whole registry
    {{ dayclose.registered_for_lines(source_name, model, 'valid_lines') }}

),

lines_registered as (

    -- each valid line with its event's registered first arrival(s): one look-up, used by
    -- both checks below
    select
        {%- for k in keys %}
        valid_lines.{{ k }},
        {%- endfor %}
        valid_lines.batch_id,
        valid_lines.file_name,
        valid_lines.line_number,
        valid_lines.received_at,
        first_arrivals.batch_id as first_batch_id,
        first_arrivals.received_at as first_received_at

    from valid_lines
    left join registered as first_arrivals
        on {{ dayclose.keys_equal(keys, 'valid_lines', 'first_arrivals') }}

),

rebuilt_days_events as (

    select * from {{ model }}
    where {{ in_rebuilt_days }}

),

lines_checked as (

    select
        {%- for k in keys %}
        {{ k }},
        {%- endfor %}
        batch_id,
        file_name,
        line_number,
        case
            when first_batch_id is null then 'valid line without an event'
            when
                batch_id < first_batch_id
                or (batch_id = first_batch_id and received_at < first_received_at)
                then 'a copy arrived before the first arrival'
        end as problem

    from lines_registered

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

    from rebuilt_days_events as first_arrivals
    left join valid_lines
        on
            first_arrivals.batch_id = valid_lines.batch_id
            and first_arrivals.file_name = valid_lines.file_name
            and first_arrivals.line_number = valid_lines.line_number
    where valid_lines.batch_id is null

),

registered_twice as (

    -- a line whose event has more than one registered row
    select
        {%- for k in keys %}
        {{ k }},
        {%- endfor %}
        batch_id,
        file_name,
        line_number,
        'event registered more than once' as problem

    from lines_registered
    group by {{ keys | join(', ') }}, batch_id, file_name, line_number
    having count(*) > 1

),

final as (

    select * from lines_checked
    where problem is not null
    union all
    select * from events_checked
    union all
    select * from registered_twice

)

select * from final

{% endtest %}
