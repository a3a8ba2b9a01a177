{#
    Read once. The nightly cost must follow the window, not the history, so what
    never changes is read once and kept: a settled day's lateness counts, a
    loaded batch's summary. These macros pick what is still to read and read it
    with literal bounds that every engine prunes by.

    Lateness is measured day by day, once per day: a settled event day (at least
    lateness_settle_days old) is counted the first night it is settled and its
    source has loaded batches up to its horizon, into the incremental models
    int_arrival_delays_counted and int_arrival_ages_counted, and not read again. The lateness marts add up the counts of the measured
    days, so the nightly cost of measuring lateness is one day of events, whatever
    the history.

    Only arrivals within lateness_settle_days of the end of the event's day are
    counted: a day's counts are then the same whenever they are made (a rerun, a
    full refresh months later), and every measured day is measured to the same
    horizon. An event later than that is not in the curve; it is in
    <source>_late_arrivals when it came after its day's last nightly rebuild.
#}


{# [from, to) 'YYYY-MM-DD' of the event days lateness is measured on at this run's as-of. #}
{% macro measured_days_range() -%}
    {%- set settle = var('lateness_settle_days') -%}
    {{- return([
        dayclose.as_of_day_offset(-(settle + var('lateness_measure_days'))),
        dayclose.as_of_day_offset(-settle),
    ]) -}}
{%- endmacro %}


{# The days from `first_day` up to, not including, `end_day` ('YYYY-MM-DD'), as a list of text. #}
{% macro days_between(first_day, end_day) -%}
    {%- set first = modules.datetime.date.fromisoformat(first_day) -%}
    {%- set days = [] -%}
    {%- for n in range((modules.datetime.date.fromisoformat(end_day) - first).days) -%}
        {%- do days.append((first + modules.datetime.timedelta(days=n)).isoformat()) -%}
    {%- endfor -%}
    {{- return(days) -}}
{%- endmacro %}


{#
    The measured days each source still has to count into the incremental model
    being built: the measured days `this` has no rows of for the source (all of
    them on a first build or a full refresh; normally the one day that settled
    since the last run), among those whose horizon the source's loaded batches
    reach (a sales run does not count a units day before the units job has loaded
    it). {source_name: ['YYYY-MM-DD', ...]}.
#}
{% macro settled_days_to_count() -%}
    {%- set measured = dayclose.measured_days_range() -%}
    {%- set all_days = dayclose.days_between(measured[0], measured[1]) -%}
    {%- set to_count = {} -%}
    {%- set counted = {} -%}
    {#- a day is counted only once its source's first arrivals reach its horizon: a job
        that runs before another source's job must not count that source's day short -#}
    {%- set loaded_through = dayclose.events_registered_through() -%}
    {%- if execute and is_incremental() -%}
        {%- set rows = run_query(
            "select distinct source_name, cast(event_date as " ~ dbt.type_string() ~ ") from " ~ this
            ~ " where event_date >= cast('" ~ measured[0] ~ "' as date)"
            ~ " and event_date < cast('" ~ measured[1] ~ "' as date)"
        ) -%}
        {%- for row in rows -%}
            {%- do counted.setdefault(row[0], []).append(row[1][:10]) -%}
        {%- endfor -%}
    {%- endif -%}
    {%- for source_name in dayclose.landing_sources() -%}
        {%- set through = loaded_through.get(source_name, '') -%}
        {%- set days = [] -%}
        {%- for day in all_days if day not in counted.get(source_name, []) -%}
            {#- the horizon of day D is D + 1 + lateness_settle_days, 00:00 -#}
            {%- set horizon = (
                modules.datetime.date.fromisoformat(day)
                + modules.datetime.timedelta(days=1 + var('lateness_settle_days'))
            ).isoformat() -%}
            {%- if not execute or (through and horizon <= through) -%}
                {%- do days.append(day) -%}
            {%- endif -%}
        {%- endfor -%}
        {%- do to_count.update({source_name: days}) -%}
    {%- endfor -%}
    {{- return(to_count) -}}
{%- endmacro %}


{#
    Each event of the given days once, at its first arrival: a select of
    (source_name, event_key, event_date, event_at, received_at) over the sources'
    first arrivals (source_arrivals). `days_by_source` is {source_name: ['YYYY-MM-DD', ...]};
    with `within_settle_days`, only arrivals within lateness_settle_days of the end
    of the event's day count.

    One select per source and day, each bounded by literals on event time: every
    engine prunes by them (an index, zone maps), so the cost follows the days
    read, not the history.
#}
{% macro first_arrivals_of_days(days_by_source, within_settle_days=false) -%}
    {%- set selects = [] -%}
    {%- for source_name, days in days_by_source.items() -%}
        {%- for day in days -%}
            {%- set next_day = (modules.datetime.date.fromisoformat(day) + modules.datetime.timedelta(days=1)).isoformat() -%}
            {%- set horizon = (
                modules.datetime.date.fromisoformat(next_day)
                + modules.datetime.timedelta(days=var('lateness_settle_days'))
            ).isoformat() -%}
            {%- set one_day -%}
    select
        source_name,
        event_key,
        event_date,
        event_at,
        received_at
    from ({{ dayclose.source_arrivals(source_name) }}) as arrivals
    where
        event_at >= {{ dayclose.timestamp_literal(day ~ ' 00:00:00') }}
        and event_at < {{ dayclose.timestamp_literal(next_day ~ ' 00:00:00') }}
        {%- if within_settle_days %}
        and received_at < {{ dayclose.timestamp_literal(horizon ~ ' 00:00:00') }}
        {%- endif %}
            {%- endset -%}
            {%- do selects.append(one_day) -%}
        {%- endfor -%}
    {%- endfor -%}
    {%- if selects -%}
        {{ selects | join('\n    union all\n') }}
    {%- else -%}
    select
        source_name,
        event_key,
        event_date,
        event_at,
        received_at
    from ({{ dayclose.no_arrivals() }}) as arrivals
    {%- endif -%}
{%- endmacro %}


{# SQL select of a per-day lateness count model's rows of the measured days. #}
{% macro measured_counts(relation) -%}
    {%- set measured = dayclose.measured_days_range() -%}
    select * from {{ relation }}
    where
        event_date >= cast('{{ measured[0] }}' as date)
        and event_date < cast('{{ measured[1] }}' as date)
{%- endmacro %}
