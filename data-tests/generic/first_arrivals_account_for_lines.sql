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
{%- set rebuilt = dayclose.rebuilt_range(source_name) -%}
{%- set in_rebuilt_days -%}
    {{ entry['event_at'] }} >= cast('{{ rebuilt[0] }}' as {{ dbt.type_timestamp() }})
    and {{ entry['event_at'] }} < cast('{{ rebuilt[1] }}' as {{ dbt.type_timestamp() }})
{%- endset -%}
{#- SQL conditions: the event keys of the valid lines and their registration are equal -#}
{%- set lines_and_registered = [] -%}
{%- set lines_and_elsewhere = [] -%}
{%- for k in keys -%}
    {%- do lines_and_registered.append('valid_lines.' ~ k ~ ' = registered.' ~ k) -%}
    {%- do lines_and_elsewhere.append('lines.' ~ k ~ ' = elsewhere.' ~ k) -%}
{%- endfor -%}
{#- an event's registration, from the registry's rows grouped by the key (alias registry) -#}
{%- set registration -%}
        {%- for k in keys %}
        registry.{{ k }},
        {%- endfor %}
        count(*) as registered_count,
        min(registry.batch_id) as first_batch_id,
        min(registry.received_at) as first_received_at
{%- endset -%}
{%- set by_key -%}
    group by {% for k in keys %}registry.{{ k }}{{ ', ' if not loop.last }}{% endfor %}
{%- endset -%}

with

valid_lines as (

    select * from {{ lines }}
    where
        is_valid
        and {{ in_rebuilt_days }}
        and batch_completed_at <= {{ dayclose.as_of_at() }}

),

registered_in_days as (

    -- the registered events of the rebuilt days, one row each: how many times registered
    -- (a sound registry: once) and, for an event registered once, its first arrival's
    -- place in the arrival order
    select
        {{- registration }}

    from {{ model }} as registry
    where
        registry.{{ entry['event_at'] }} >= cast('{{ rebuilt[0] }}' as {{ dbt.type_timestamp() }})
        and registry.{{ entry['event_at'] }} < cast('{{ rebuilt[1] }}' as {{ dbt.type_timestamp() }})
    {{ by_key }}

),

lines_in_days as (

    -- each valid line with its event's registration in the rebuilt days (none for a copy
    -- whose first arrival has another event time)
    select
        {%- for k in keys %}
        valid_lines.{{ k }},
        {%- endfor %}
        valid_lines.batch_id,
        valid_lines.file_name,
        valid_lines.line_number,
        valid_lines.received_at,
        registered.registered_count,
        registered.first_batch_id,
        registered.first_received_at

    from valid_lines
    left join registered_in_days as registered
        on {{ lines_and_registered | join(' and ') }}

),

registered_elsewhere as (

    -- the registrations, on any day, of the events the lines above did not find: read from
    -- the whole registry for those events only (most nights none), so the gate's cost
    -- follows the window, not the history
    select
        {{- registration }}

    from {{ model }} as registry
    inner join (
        select distinct {{ keys | join(', ') }} from lines_in_days
        where registered_count is null
    ) as wanted
        on {% for k in keys %}registry.{{ k }} = wanted.{{ k }}{{ ' and ' if not loop.last }}{% endfor %}
    {{ by_key }}

),

lines_registered as (

    -- each valid line with its event's registration, wherever it is
    select
        {%- for k in keys %}
        lines.{{ k }},
        {%- endfor %}
        lines.batch_id,
        lines.file_name,
        lines.line_number,
        lines.received_at,
        coalesce(lines.registered_count, elsewhere.registered_count) as registered_count,
        coalesce(lines.first_batch_id, elsewhere.first_batch_id) as first_batch_id,
        coalesce(lines.first_received_at, elsewhere.first_received_at) as first_received_at

    from lines_in_days as lines
    left join registered_elsewhere as elsewhere
        on
            lines.registered_count is null
            and {{ lines_and_elsewhere | join(' and ') }}

),

rebuilt_days_events as (

    select * from {{ model }}
    where
        {{ in_rebuilt_days }}
        and batch_completed_at <= {{ dayclose.as_of_at() }}

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
            when registered_count is null then 'valid line without an event'
            when registered_count > 1 then 'event registered more than once'
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

final as (

    select * from lines_checked
    where problem is not null
    union all
    select * from events_checked

)

select * from final

{% endtest %}
