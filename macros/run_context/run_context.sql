{#
    What this run is: its as-of instant, the days it rebuilds, the per-run values the
    dayclose command passes, and the registry entry of a source. Every *_at value is a UTC
    timestamp without time zone; every *_date a UTC calendar date; days are 'YYYY-MM-DD' text.

    Per-run values come from --vars (a dbt CLI user) or, when a var is not given, from
    DAYCLOSE_RUN_<NAME> (set by the dayclose command for each run). The environment is read
    only when executing: dbt parses the whole project again whenever --vars change, and a new
    run must not cost a new parse.
#}


{# A per-run value (as_of, rebuilt_from, rebuilt_to, run_id, restate_reason), '' when unset. #}
{% macro run_var(name) -%}
    {%- set value = var(name, '') -%}
    {%- if not value and execute -%}
        {%- set value = env_var('DAYCLOSE_RUN_' ~ (name | upper), '') -%}
    {%- endif -%}
    {{- return(value) -}}
{%- endmacro %}


{# The run's as-of instant as 'YYYY-MM-DD HH:MM:SS': the as_of value, else the invocation time. #}
{% macro as_of() -%}
    {%- set value = var('as_of', '') -%}
    {%- if not value and execute -%}
        {%- set value = env_var('DAYCLOSE_RUN_AS_OF', '') -%}
    {%- endif -%}
    {{- return(value or run_started_at.strftime('%Y-%m-%d %H:%M:%S')) -}}
{%- endmacro %}


{# The as-of instant as a SQL timestamp. #}
{% macro as_of_at() -%}
    cast('{{ dayclose.as_of() }}' as {{ dbt.type_timestamp() }})
{%- endmacro %}


{# The as-of instant floored to the hour, as a SQL timestamp: batches are arrival hours, so this is the data cutoff. #}
{% macro data_cutoff_at() -%}
    cast('{{ dayclose.as_of()[:13] }}:00:00' as {{ dbt.type_timestamp() }})
{%- endmacro %}


{# The as-of day shifted by `days` (negative: earlier), as 'YYYY-MM-DD'. #}
{% macro as_of_day(days=0) -%}
    {%- set day = modules.datetime.date.fromisoformat(dayclose.as_of()[:10]) -%}
    {{- return((day + modules.datetime.timedelta(days=days)).isoformat()) -}}
{%- endmacro %}


{# When this dbt invocation started (UTC), as a SQL timestamp: a wall-clock stamp for audit columns. #}
{% macro invocation_at() -%}
    cast('{{ run_started_at.strftime("%Y-%m-%d %H:%M:%S") }}' as {{ dbt.type_timestamp() }})
{%- endmacro %}


{# The registry entry of a landing source (landing_sources in dbt_project.yml), or a compiler error naming the known ones. #}
{% macro landing_source(source_name) -%}
    {%- set registry = var('landing_sources') -%}
    {%- if source_name not in registry -%}
        {{ exceptions.raise_compiler_error(
            "unknown landing source " ~ source_name ~ "; registered: " ~ (registry.keys() | sort | join(', '))
        ) }}
    {%- endif -%}
    {{- return(registry[source_name]) -}}
{%- endmacro %}


{# The nightly window of a source in days: the var <source>_window_days when set, else its registry entry. #}
{% macro window_days(source_name) -%}
    {{- return(var(source_name ~ '_window_days', var('landing_sources')[source_name]['window_days'])) -}}
{%- endmacro %}


{#
    Whether a source's lines must carry exactly its fields (true: a line with another key is an
    unknown_field dead letter) or may carry more (false, the default: counted, the key named in
    <source>_new_fields): the var <source>_strict_fields when set, else its registry entry.
#}
{% macro strict_fields(source_name) -%}
    {{- return(var(source_name ~ '_strict_fields', dayclose.landing_source(source_name).get('strict_fields', false))) -}}
{%- endmacro %}


{#
    The days this run rebuilds, ['YYYY-MM-DD', 'YYYY-MM-DD') (the second excluded): the
    rebuilt_from and rebuilt_to values (the dayclose command's window, or a restatement's
    range), else dbt's --event-time-start and --event-time-end (plain dbt), else the source's
    nightly window: the window_days days before the as-of day.
-#}
{% macro rebuilt_range(source_name) -%}
    {%- set start = var('rebuilt_from', '') or (env_var('DAYCLOSE_RUN_REBUILT_FROM', '') if execute else '') -%}
    {%- set end = var('rebuilt_to', '') or (env_var('DAYCLOSE_RUN_REBUILT_TO', '') if execute else '') -%}
    {%- set start = start or ((invocation_args_dict.get('event_time_start') or '') | string)[:10] -%}
    {%- set end = end or ((invocation_args_dict.get('event_time_end') or '') | string)[:10] -%}
    {%- set as_of_day = modules.datetime.date.fromisoformat(dayclose.as_of()[:10]) -%}
    {%- set window = var(source_name ~ '_window_days', var('landing_sources')[source_name]['window_days']) -%}
    {{- return([
        start or (as_of_day - modules.datetime.timedelta(days=window)).isoformat(),
        end or as_of_day.isoformat(),
    ]) -}}
{%- endmacro %}


{#
    The batch size of the daily microbatch models: `day`, dbt's unit and plain dbt's, or
    `month`, which the dayclose command sets (DAYCLOSE_BATCH_SIZE, read when dbt parses the
    models): dbt spends a fixed time of its own on every batch, whatever its size
    (docs/decisions/0005-month-batches.md).
#}
{% macro microbatch_batch_size() -%}
    {%- set size = env_var('DAYCLOSE_BATCH_SIZE', 'day') -%}
    {%- if size not in ('day', 'month') -%}
        {{ exceptions.raise_compiler_error(
            "DAYCLOSE_BATCH_SIZE is '" ~ size ~ "': expected day or month (the batch size of the daily microbatch models)"
        ) }}
    {%- endif -%}
    {{- return(size) -}}
{%- endmacro %}


{#
    The `begin` of the daily microbatch models, the first day a build reads when it is not
    given days (a plain dbt first build or full refresh): late_arrival_scan_days before the
    as-of day. The dayclose command always passes the days it builds.
#}
{% macro microbatch_begin() -%}
    {{- return(dayclose.as_of_day(-var('late_arrival_scan_days'))) -}}
{%- endmacro %}


{#
    on-run-start: plain `dbt build` (or run, test) needs what dayclose loads: with no landing
    tables yet it stops with one message saying so, instead of an error per model. A plain dbt
    run given an as_of must be given the days to build too: dbt decides a microbatch model's
    days from the event-time flags (or the invocation time), never from a var.
    `dbt compile`, `dbt docs generate` and `dbt seed` work on an empty warehouse.
#}
{% macro require_landing() %}
    {%- if execute and flags.WHICH in ('build', 'run', 'test', 'retry') -%}
        {%- set ledger = adapter.get_relation(
            database=target.database, schema=target.schema ~ '_landing', identifier='load_ledger'
        ) -%}
        {%- if ledger is none -%}
            {{ exceptions.raise_compiler_error(
                "no landing tables in schema " ~ target.schema ~ "_landing: dbt builds on the batches "
                ~ "dayclose loads. Load them first (dayclose run sales --landing <folder>, and units), "
                ~ "then plain dbt works on its own; see the README, 'Plain dbt'."
            ) }}
        {%- endif -%}
        {%- if var('as_of', '') and flags.WHICH in ('build', 'run') and not invocation_args_dict.get('event_time_end') -%}
            {%- set as_of_day = modules.datetime.date.fromisoformat(var('as_of')[:10]) -%}
            {%- set windows = [] -%}
            {%- for name, entry in var('landing_sources').items() -%}
                {%- set first = as_of_day - modules.datetime.timedelta(days=entry['window_days']) -%}
                {%- do windows.append("--event-time-start " ~ first.isoformat() ~ " --event-time-end "
                    ~ as_of_day.isoformat() ~ " for the " ~ name ~ " window") -%}
            {%- endfor -%}
            {{ exceptions.raise_compiler_error(
                "as_of " ~ var('as_of') ~ " is given, but dbt decides the days a microbatch model builds "
                ~ "from --event-time-start/--event-time-end (else from the clock): pass them too, "
                ~ windows | join("; ") ~ ", each ending the day before " ~ as_of_day.isoformat()
                ~ " (README, 'Plain dbt')"
            ) }}
        {%- endif -%}
    {%- endif -%}
{% endmacro %}


{# The days from `first_day` up to, not including, `end_day` ('YYYY-MM-DD'), as a list of 'YYYY-MM-DD'. #}
{% macro days_between(first_day, end_day) -%}
    {%- set first = modules.datetime.date.fromisoformat(first_day) -%}
    {%- set days = [] -%}
    {%- for n in range((modules.datetime.date.fromisoformat(end_day) - first).days) -%}
        {%- do days.append((first + modules.datetime.timedelta(days=n)).isoformat()) -%}
    {%- endfor -%}
    {{- return(days) -}}
{%- endmacro %}
