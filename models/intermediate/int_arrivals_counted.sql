{#
    The first arrivals of each settled day, counted once: per source, event day, whole minute
    of delay (first arrival minus event time, rounded up) and whole hour of the day's age at
    arrival (rounded down; negative while the day ran). arrival_lateness reads its percentiles
    off the delays, arrival_lateness_curve its curve off the ages.

    A day is settled once it is lateness_settle_days old. It is counted the first night its
    source's registry holds every batch up to the day's horizon (lateness_settle_days after the
    day's end), and never read again: the nightly cost is one day of events, whatever the
    history. Only arrivals before the horizon count, so a day's counts are the same whenever
    they are made and every day is measured to the same horizon; a later event is in
    <source>_late_arrivals instead.
#}
{%- set settle_days = var('lateness_settle_days') -%}
{%- set measure_days = var('lateness_measure_days') -%}
{%- set measured_from = dayclose.as_of_day(-(settle_days + measure_days)) -%}
{#- a source's registry exists once its job has run in this warehouse -#}
{%- set sales_built = load_relation(ref('int_sales_deduplicated')) is not none -%}
{%- set units_built = load_relation(ref('int_units_deduplicated')) is not none -%}

with

measured_days as (

    -- the days lateness is measured on at this run's as-of, with their bounds and horizon
    select
        event_date,
        {{ dbt.cast('event_date', dbt.type_timestamp()) }} as day_start_at,
        {{ dbt.dateadd('day', 1, dbt.cast('event_date', dbt.type_timestamp())) }} as day_end_at,
        {{ dbt.dateadd('day', 1 + settle_days, dbt.cast('event_date', dbt.type_timestamp())) }} as horizon_at

    from (
        select cast({{ dbt.dateadd('day', 'n', "cast('" ~ measured_from ~ "' as date)") }} as date) as event_date
        from ({{ dayclose.integer_spine(measure_days) }}) as day_numbers
    ) as measured_day_numbers

),

registered_through as (

    -- how far each source's registry reaches: the end of its latest batch (no row for a
    -- source whose job has not run in this warehouse yet)
    select
        cast(null as {{ dbt.type_string() }}) as source_name,
        cast(null as {{ dbt.type_timestamp() }}) as registered_through_at
    where 1 = 0
    {%- if sales_built %}

    union all

    select
        'sales' as source_name,
        max(batch_completed_at) as registered_through_at
    from {{ ref('int_sales_deduplicated') }}
    where batch_id = (select max(batch_id) from {{ ref('int_sales_deduplicated') }})
    {%- endif %}
    {%- if units_built %}

    union all

    select
        'units' as source_name,
        max(batch_completed_at) as registered_through_at
    from {{ ref('int_units_deduplicated') }}
    where batch_id = (select max(batch_id) from {{ ref('int_units_deduplicated') }})
    {%- endif %}

),

days_to_count as (

    -- the measured days each source has registered up to their horizon, not counted yet
    select
        registered_through.source_name,
        measured_days.*

    from measured_days
    inner join registered_through
        on measured_days.horizon_at <= registered_through.registered_through_at
    {% if is_incremental() -%}
    where not exists (
        select 1 from {{ this }} as counted
        where
            counted.source_name = registered_through.source_name
            and counted.event_date = measured_days.event_date
    )
    {%- endif %}

),

first_arrivals as (

    -- each event of those days once, at its first arrival before the day's horizon; found by
    -- the day and its bounds, which every engine prunes the registry by
    select
        source_name,
        event_date,
        day_end_at,
        day_start_at as event_at,
        day_start_at as received_at
    from days_to_count
    where 1 = 0
    {%- if sales_built %}

    union all

    select
        days_to_count.source_name,
        days_to_count.event_date,
        days_to_count.day_end_at,
        registry.sold_at as event_at,
        registry.received_at
    from {{ ref('int_sales_deduplicated') }} as registry
    inner join days_to_count
        on
            days_to_count.source_name = 'sales'
            and registry.sale_date = days_to_count.event_date
            and registry.sold_at >= days_to_count.day_start_at
            and registry.sold_at < days_to_count.day_end_at
    where registry.received_at < days_to_count.horizon_at
    {%- endif %}
    {%- if units_built %}

    union all

    select
        days_to_count.source_name,
        days_to_count.event_date,
        days_to_count.day_end_at,
        registry.event_at,
        registry.received_at
    from {{ ref('int_units_deduplicated') }} as registry
    inner join days_to_count
        on
            days_to_count.source_name = 'units'
            and registry.production_date = days_to_count.event_date
            and registry.event_at >= days_to_count.day_start_at
            and registry.event_at < days_to_count.day_end_at
    where registry.received_at < days_to_count.horizon_at
    {%- endif %}

),

arrival_seconds as (

    select
        source_name,
        event_date,
        {{ dbt.datediff('event_at', 'received_at', 'second') }} as delay_seconds,  -- noqa: LT05
        {{ dbt.datediff('day_end_at', 'received_at', 'second') }} as day_age_seconds  -- noqa: LT05

    from first_arrivals

),

measured as (

    select
        source_name,
        event_date,
        -- rounded up: "arrived within N minutes" stays true
        cast(ceil(delay_seconds / 60.0) as integer) as delay_minutes,
        -- rounded down: the hour of the day's age the event arrived in
        cast(floor(day_age_seconds / 3600.0) as integer) as age_hours

    from arrival_seconds

),

final as (

    select
        source_name,
        event_date,
        delay_minutes,
        age_hours,
        cast(count(*) as bigint) as events

    from measured
    group by source_name, event_date, delay_minutes, age_hours

)

select * from final
