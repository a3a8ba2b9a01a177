{#
    The path of a landing source's lines, the same for every source: staged (the raw
    lines), decoded once per loaded batch by the contract, validated by the source's
    business rules (its own model), then each event once at its first arrival, its
    conflicting copies, and its dead letters. Each source's models call these with the
    source's name; what differs between sources is in landing_sources (dbt_project.yml)
    and in its validated-lines model.
#}


{# The raw lines of landing table `table_name` with the batch's arrival hour: the staging select. #}
{% macro staged_lines(table_name) %}
with

source as (

    select * from {{ source('landing', table_name) }}

),

final as (

    select
        batch_id,
        cast(
            {{ dbt.concat([dbt.replace('batch_id', "'T'", "' '"), "':00:00'"]) }} as {{ dbt.type_timestamp() }}
        ) as batch_arrived_at,
        file_name,
        line_number,
        raw_line,
        raw_line_hex,
        byte_error

    from source

)

select * from final
{% endmacro %}


{#
    The batches of `source_name` loaded since `relation` (an incremental model, usually
    `this`) last processed one: ledger rows with loaded_at after the newest batch_loaded_at
    in `relation`. None on a first build or a full refresh (then: every loaded batch), and
    while parsing. Every loaded batch is processed whatever the as-of: decoding does not
    depend on it, and a batch skipped once would never be processed.
#}
{% macro batches_loaded_since(source_name, relation) %}
    {%- set loads = ref('stg_landing__batch_loads') -%}
    {%- if not execute or not is_incremental() -%}
        {{ return(none) }}
    {%- endif -%}
    {%- set rows = run_query(
        "select batch_id from " ~ loads
        ~ " where source_name = '" ~ source_name ~ "' and is_loaded and loaded_at > coalesce("
        ~ "(select max(batch_loaded_at) from " ~ relation ~ "), "
        ~ dayclose.timestamp_literal('1900-01-01 00:00:00') ~ ")"
    ) -%}
    {{ return(rows.columns[0].values() | list) }}
{% endmacro %}


{# SQL condition on batch_id: one of `batch_ids` (true for none: every batch; false for an empty list). #}
{% macro batch_in(batch_ids, column='batch_id') -%}
    {%- if batch_ids is none -%}
        1 = 1
    {%- elif batch_ids | length == 0 -%}
        1 = 0
    {%- else -%}
        {%- set ids = batch_ids | sort -%}
        ({{ column }} >= '{{ ids[0] }}' and {{ column }} <= '{{ ids[-1] }}'
            and {{ column }} in ('{{ ids | join("', '") }}'))
    {%- endif -%}
{%- endmacro %}


{#
    The body of int_<entity>_lines_decoded: every line of the batches loaded since the
    last build, decoded by the contract of `source_name` (macros/contract.sql), with the
    batch's load time and arrival hour. Incremental by batch: a batch replaced by a new
    manifest is decoded again whole.
#}
{% macro decoded_lines(source_name, staged) %}
{%- set entry = dayclose.landing_source(source_name) -%}
{%- set to_decode = dayclose.batches_loaded_since(source_name, this) -%}

with

batch_loads as (

    select * from {{ ref('stg_landing__batch_loads') }}
    where
        source_name = '{{ source_name }}'
        and is_loaded
        and {{ dayclose.batch_in(to_decode) }}

),

staged_lines as (

    select * from {{ staged }}
    where {{ dayclose.batch_in(to_decode) }}

),

lines as (

    select
        staged_lines.*,
        batch_loads.loaded_at as batch_loaded_at,
        batch_loads.batch_completed_at

    from staged_lines
    inner join batch_loads
        on staged_lines.batch_id = batch_loads.batch_id

),

decoded as (

    {{ dayclose.decode_lines('lines', source_name) }}

),

final as (

    select
        batch_id,
        batch_loaded_at,
        batch_arrived_at,
        batch_completed_at,
        file_name,
        line_number,
        decode_error_kind,
        decode_error,
        {%- for name in entry['fields'] %}
        {{ name }},
        {%- endfor %}
        cast({{ entry['event_at'] }} as date) as {{ entry['event_date'] }}

    from decoded

)

select * from final
{% endmacro %}


{# The ordering of copies of an event: the first to arrive first (batch, then received_at, then position). #}
{% macro arrival_order() -%}
    batch_id, received_at, file_name, line_number
{%- endmacro %}


{#
    The batches among this run's new ones that `this` (a first-arrivals model) already
    has rows of: batches replaced by a new manifest. Their events' first copies are
    recomputed from every copy, and first arrivals whose line is gone are dropped.
#}
{% macro replaced_batches(new_batches) %}
    {%- if not execute or new_batches is none or new_batches | length == 0 -%}
        {{ return([]) }}
    {%- endif -%}
    {%- set rows = run_query(
        "select distinct batch_id from " ~ this ~ " where " ~ dayclose.batch_in(new_batches)
    ) -%}
    {{ return(rows.columns[0].values() | list) }}
{% endmacro %}


{#
    The body of int_<entity>s_deduplicated: each valid event of `source_name` once, at its
    first arrival over the whole history (a resend, a replay or a retry carries the same
    event_key and is a copy). Incremental: only the lines of batches loaded since the last
    build are read, with the first arrivals already known of their events, so the nightly
    cost follows the new data, not the history. `lines` is the source's validated lines;
    `value_columns` are the columns kept from the first copy beside the key and times.

    An incremental build returns only what changes (strategy first_arrivals below): new
    events, and revised ones (is_revised: a line loaded now arrived before the known first
    arrival, or the known one was in a replaced batch), which replace their row. A known
    first arrival that stays first is not returned, so the registry is not rewritten.

    A batch replaced by a new manifest: its events' first arrivals are recomputed from every
    copy left; an event with no copy left gets a row marked batch_id '(vanished)', which
    replaces its old row and which the post_hook vanished_first_arrivals() then deletes.
#}
{% macro first_arrivals(source_name, lines, value_columns) %}
{%- set entry = dayclose.landing_source(source_name) -%}
{%- set keys = entry['event_key'] -%}
{%- set new_batches = dayclose.batches_loaded_since(source_name, this) -%}
{%- set replaced = dayclose.replaced_batches(new_batches) if is_incremental() else [] -%}
{%- set columns = keys + ['batch_id', 'batch_loaded_at', 'batch_completed_at', 'file_name', 'line_number',
    'received_at', entry['event_at'], entry['event_date']] + value_columns -%}
{%- set order_columns = (dayclose.arrival_order() | trim).split(', ') -%}
{%- set lookup = dayclose.registry_lookup(keys) -%}
{%- set rank_by = keys if is_incremental() else ['event_hash'] -%}

with

new_lines as (

    select
        {{ columns | join(', ') }},
        {{ dayclose.event_hash(keys) }} as event_hash,
        0 as is_registered,
        0 as replaces_registered

    from {{ lines }}
    where is_valid and {{ dayclose.batch_in(new_batches) }}

),

{%- if replaced %}

stale_keys as (

    -- the events whose first arrival was in a replaced batch
    select distinct {{ keys | join(', ') }}, event_hash from {{ this }}
    where {{ dayclose.batch_in(replaced) }}

),

copies_of_stale as (

    -- every copy left of those events: their registered row is replaced
    select
        {%- for c in columns %}
        lines.{{ c }},
        {%- endfor %}
        stale_keys.event_hash,
        0 as is_registered,
        1 as replaces_registered

    from {{ lines }} as lines
    inner join stale_keys
        on {{ dayclose.keys_equal(keys, 'lines', 'stale_keys') }}
    where lines.is_valid

),
{%- endif %}

candidates as (

    select * from new_lines
    {%- if is_incremental() %}
    union all
    -- the first arrivals already known of the new lines' events (but those in replaced
    -- batches): their arrival order only, as a known one that stays first is not returned
    -- (the fewer columns, the less of the registry is read; inline, so that the nulls take
    -- the types of new_lines), found by registry_lookup and registry_rows_for
    select
        {%- for c in columns %}
        {% if c in keys or c in order_columns %}known.{{ c }}{% else %}null{% endif %},
        {%- endfor %}
        known.event_hash,
        1 as is_registered,
        1 as replaces_registered

    {{ dayclose.registry_rows_for(this, 'known', lookup, 'new_lines',
        'not ' ~ dayclose.batch_in(replaced, 'known.batch_id')) }}
    {%- endif %}
    {%- if replaced %}
    union all
    select * from copies_of_stale
    {%- endif %}

),

copied as (

    -- the events with more than one candidate, the only ones ranked: most events have one
    -- (a window over every candidate sorted them all). On a first build every candidate's
    -- hash is computed here from its keys, so they are found by it, a bigint, which groups
    -- and joins faster than the keys (3 M lines: 0.78 -> 0.53 s of the grouping; an event that
    -- only shares its hash with another is ranked too, alone in its keys' partition); a
    -- night's candidates include registered rows, whose stored hash only served to find them,
    -- so they are grouped by their keys
    select {{ rank_by | join(', ') }} from candidates
    group by {{ rank_by | join(', ') }}
    having count(*) > 1

),

ranked as (

    select
        candidates.*,
        1 as arrival_rank,
        candidates.replaces_registered as has_registered_row

    from candidates
    left join copied
        on {{ dayclose.keys_equal(rank_by, 'candidates', 'copied') }}
    where copied.{{ rank_by[0] }} is null

    union all

    select
        candidates.*,
        row_number() over (
            partition by candidates.{{ keys | join(', candidates.') }} order by {{ dayclose.arrival_order() }}
        ) as arrival_rank,
        max(candidates.replaces_registered) over (
            partition by candidates.{{ keys | join(', candidates.') }}
        ) as has_registered_row

    from candidates
    inner join copied
        on {{ dayclose.keys_equal(rank_by, 'candidates', 'copied') }}

),

first_copies as (

    -- the first copy of each event, but a registered one that stays first (nothing changes)
    select
        {{ columns | join(', ') }},
        event_hash,
        has_registered_row = 1 as is_revised

    from ranked
    where arrival_rank = 1 and is_registered = 0

),
{%- if replaced %}

vanished as (

    select
        {%- for c in columns %}
        {% if c in keys %}stale_keys.{{ c }}{% elif c == 'batch_id' %}'(vanished)'{% else %}first_copies.{{ c }}{% endif %} as {{ c }},
        {%- endfor %}
        stale_keys.event_hash,
        true as is_revised

    from stale_keys
    left join first_copies
        on {{ dayclose.keys_equal(keys, 'stale_keys', 'first_copies') }}
    where first_copies.batch_id is null

),
{%- endif %}

final as (

    select * from first_copies
    {%- if replaced %}
    union all
    select * from vanished
    {%- endif %}

)

-- in the order of the events' days, so that the registry grows in that order and a look-up
-- of some days' events reads only those days' row groups on DuckDB (conflicting_copies, the
-- gate: whole days); by the day, not the event time: the same row groups, sorted sooner
select * from final
order by {{ entry['event_date'] }}
{% endmacro %}


{#
    Incremental strategy first_arrivals, of the first-arrivals models (config
    incremental_strategy: first_arrivals, unique_key: the event key): the build returns new
    events and revised ones; only the revised ones have a registered row, deleted before the
    insert. delete+insert would look every new event up in the whole registry to delete
    nothing; here the look-up is for the revised events only, most nights none.
#}
{% macro get_incremental_first_arrivals_sql(arg_dict) %}
    {%- set target = arg_dict["target_relation"] -%}
    {%- set source = arg_dict["temp_relation"] -%}
    {%- set keys = arg_dict["unique_key"] -%}
    {%- set keys = [keys] if keys is string else keys -%}
    {%- set dest_cols_csv = get_quoted_csv(arg_dict["dest_columns"] | map(attribute="name")) -%}

    delete from {{ target }} as registered
    using (select {{ keys | join(', ') }} from {{ source }} where is_revised) as revised
    where {{ dayclose.keys_equal(keys, 'registered', 'revised') }};

    insert into {{ target }} ({{ dest_cols_csv }})
    select {{ dest_cols_csv }} from {{ source }}
{% endmacro %}


{#
    SQL from clause: the rows of `relation`, as `alias`, whose `keys` are those of some row of
    the CTE `lines` that meets `condition` (one hash join on those rows' distinct keys).
#}
{% macro rows_of_keys(relation, alias, keys, lines, condition) -%}
    from {{ relation }} as {{ alias }}
    inner join (
        select distinct {{ keys | join(', ') }} from {{ lines }}
        where {{ condition }}
    ) as wanted_keys
        on {{ dayclose.keys_equal(keys, alias, 'wanted_keys') }}
{%- endmacro %}


{# SQL condition: the `keys` columns of `left` and `right` are equal. #}
{% macro keys_equal(keys, left, right) -%}
    {% for k in keys %}{{ left }}.{{ k }} = {{ right }}.{{ k }}{{ ' and ' if not loop.last }}{% endfor %}
{%- endmacro %}


{#
    The columns by which first_arrivals looks the new lines' events up in the whole
    registry (a new event is one that is not there, so no day or batch narrows this
    look-up): the event_hash column. DuckDB hashes the night's keys into a filter on the
    registry's scan, which then reads one integer per registered event instead of its text
    key: at 36 M registered events, 0.12 s against 0.94 s. A registered event that only
    shares a hash with a new one joins the candidates harmlessly: copies are ranked by
    their key, and a registered row is never returned as new. Postgres finds the events
    through the registry's unique index on the key.
#}
{% macro registry_lookup(keys) -%}
    {{ return(adapter.dispatch('registry_lookup', 'dayclose')(keys)) }}
{%- endmacro %}

{% macro default__registry_lookup(keys) -%}
    {{ return(['event_hash']) }}
{%- endmacro %}

{% macro postgres__registry_lookup(keys) -%}
    {{ return(keys) }}
{%- endmacro %}


{#
    SQL from and where clauses: the rows of `registry`, as `alias`, whose `lookup` columns
    (registry_lookup) equal those of some row of the CTE `new_lines`, and that meet
    `condition` (SQL on `alias`). By default a join. DuckDB filters the registry's scan by
    the new lines' hashes before that join, but the filter lets about 0.3% of the rows
    through (94,000 of 36 M), and for those the scan fetches the other columns, whose
    blocks then all hold one: 573 MB read at 36 M registered events. So on DuckDB the rows are matched on the lookup columns alone
    and then fetched by rowid: 0.44 to 0.49 s -> 0.22 s for a night's look-up at 36 M (a new
    process each time, as a night is; the same rows).
#}
{% macro registry_rows_for(registry, alias, lookup, new_lines, condition) -%}
    {{ return(adapter.dispatch('registry_rows_for', 'dayclose')(registry, alias, lookup, new_lines, condition)) }}
{%- endmacro %}

{% macro default__registry_rows_for(registry, alias, lookup, new_lines, condition) -%}
    from {{ registry }} as {{ alias }}
    inner join (select distinct {{ lookup | join(', ') }} from {{ new_lines }}) as new_keys
        on {{ dayclose.keys_equal(lookup, alias, 'new_keys') }}
    where {{ condition }}
{%- endmacro %}

{% macro duckdb__registry_rows_for(registry, alias, lookup, new_lines, condition) -%}
    from {{ registry }} as {{ alias }}
    where
        {{ alias }}.rowid in (
            select registered.rowid
            from {{ registry }} as registered
            inner join (select distinct {{ lookup | join(', ') }} from {{ new_lines }}) as new_keys
                on {{ dayclose.keys_equal(lookup, 'registered', 'new_keys') }}
        )
        and {{ condition }}
{%- endmacro %}


{#
    pre_hook of a first-arrivals model: a registry built before it had event_hash gets the
    column, filled from its keys, once (without it every registered event would be new
    again to first_arrivals' look-up).
#}
{% macro add_event_hash(source_name) %}
    {%- if execute and is_incremental() -%}
        {%- set names = adapter.get_columns_in_relation(this) | map(attribute='name') | map('lower') | list -%}
        {%- if 'event_hash' not in names -%}
            alter table {{ this }} add column event_hash {{ dayclose.event_hash_type() }};
            update {{ this }} set event_hash = {{ dayclose.event_hash(dayclose.landing_source(source_name)['event_key']) }}
        {%- endif -%}
    {%- endif -%}
{% endmacro %}


{# post_hook of a first-arrivals model: delete the rows of events with no copy left. #}
{% macro vanished_first_arrivals() %}
    delete from {{ this }} where batch_id = '(vanished)'
{% endmacro %}


{#
    The body of <source>_conflicting_copies: each valid copy of an event, among the lines of
    the days the run rebuilds, whose values differ from the event's first arrival (which may
    be on another day, or in another batch long ago). The first arrival is what counts; the
    copy is recorded here with both lines, for analysts, and a gate warns. `compared` are
    the columns a copy must agree on (the event time and the values). Built for all the
    rebuilt days in one statement (rebuilt_days_incremental).

    The first arrivals are read without reading the whole registry each night: its rows of
    those days (the registry grows in event-time order, so on DuckDB only those days' row
    groups), in one join with the copies; then, for the copies whose event has no row there
    (a copy whose event time differs from its first arrival's; most nights none), their rows
    on other days. An event of those days registered a second time on another day is not
    looked for there.
#}
{% macro conflicting_copies(source_name, lines, compared) %}
{%- set entry = dayclose.landing_source(source_name) -%}
{%- set keys = entry['event_key'] -%}
{%- set registry = ref(entry['events_model']) -%}
{#- a copy and its event's first arrival (alias first_arrivals): are they two lines that disagree? -#}
{%- set disagree %}
            not (
                copies.batch_id = first_arrivals.batch_id
                and copies.file_name = first_arrivals.file_name
                and copies.line_number = first_arrivals.line_number
            )
            and (
                {%- for c in compared %}
                copies.{{ c }} <> first_arrivals.{{ c }}{{ ' or' if not loop.last }}
                {%- endfor %}
            )
{%- endset -%}
{#- the first arrival's columns a conflict keeps -#}
{%- set first_columns -%}
        first_arrivals.{{ entry['event_date'] }} as first_{{ entry['event_date'] }},
        {%- for c in compared %}
        first_arrivals.{{ c }} as first_{{ c }},
        {%- endfor %}
        first_arrivals.batch_id as first_batch_id,
        first_arrivals.file_name as first_file_name,
        first_arrivals.line_number as first_line_number
{%- endset -%}

with

copies as (

    -- the valid lines of the days the run rebuilds (on a first build, from the begin)
    select * from {{ lines }}
    where is_valid and {{ dayclose.in_rebuilt_days(source_name, entry['event_at'], built=true) }}

),

registered_in_days as (

    select * from {{ registry }} as registry
    where {{ dayclose.in_rebuilt_days(source_name, 'registry.' ~ entry['event_at'], built=true) }}

),

copies_against_days as (

    -- each copy against its event's first arrival among those days: kept, the copies that
    -- disagree with it and those whose event has none there (looked up below)
    select
        copies.*,
        {{- first_columns }}

    from copies
    left join registered_in_days as first_arrivals
        on {{ dayclose.keys_equal(keys, 'copies', 'first_arrivals') }}
    where
        first_arrivals.batch_id is null
        or ({{ disagree }}
        )

),

registered_elsewhere as (

    -- the first arrivals, on other days, of the copies that found none above
    select registry.*
    {{ dayclose.rows_of_keys(registry, 'registry', keys, 'copies_against_days', 'first_batch_id is null') }}

),

copies_against_elsewhere as (

    -- the copies against those rows (only the copies of those events find one)
    select
        copies.*,
        {{- first_columns }}

    from copies
    inner join registered_elsewhere as first_arrivals
        on {{ dayclose.keys_equal(keys, 'copies', 'first_arrivals') }}
    where {{ disagree }}

),

staged as (

    select * from {{ ref('stg_landing__' ~ entry['table']) }}

),

conflicts as (

    select
        {%- for k in keys %}
        {{ k }},
        {%- endfor %}
        {{ entry['event_date'] }},
        first_{{ entry['event_date'] }},
        {%- for c in compared %}
        first_{{ c }},
        {{ c }} as copy_{{ c }},
        {%- endfor %}
        first_batch_id,
        first_file_name,
        first_line_number,
        batch_id,
        file_name,
        line_number,
        batch_completed_at

    from (
        select * from copies_against_days where first_batch_id is not null
        union all
        select * from copies_against_elsewhere
    ) as disagreeing

),

conflict_lines as (

    -- the lines of the conflicts, both copies: their raw text is looked up for these only
    select first_batch_id as batch_id, first_file_name as file_name, first_line_number as line_number
    from conflicts
    union
    select batch_id, file_name, line_number from conflicts

),

raw_lines as (

    select
        staged.batch_id,
        staged.file_name,
        staged.line_number,
        staged.raw_line

    from staged
    inner join conflict_lines
        on
            staged.batch_id = conflict_lines.batch_id
            and staged.file_name = conflict_lines.file_name
            and staged.line_number = conflict_lines.line_number

),

final as (

    select
        conflicts.*,
        first_lines.raw_line as first_raw_line,
        copy_lines.raw_line as copy_raw_line

    from conflicts
    left join raw_lines as first_lines
        on
            conflicts.first_batch_id = first_lines.batch_id
            and conflicts.first_file_name = first_lines.file_name
            and conflicts.first_line_number = first_lines.line_number
    left join raw_lines as copy_lines
        on
            conflicts.batch_id = copy_lines.batch_id
            and conflicts.file_name = copy_lines.file_name
            and conflicts.line_number = copy_lines.line_number

)

select * from final
{% endmacro %}


{#
    The body of <source>_dead_letters: every line of `lines` (validated) that is not valid,
    with its raw text as received (and its exact bytes in hex when they are not text), its
    batch, file, line number, reason and kind, and `columns` (what could be read of it).
#}
{% macro dead_letters(source_name, lines, columns) %}
{%- set entry = dayclose.landing_source(source_name) -%}

with

invalid_lines as (

    select * from {{ lines }}
    where not is_valid

),

staged as (

    select * from {{ ref('stg_landing__' ~ entry['table']) }}

),

final as (

    select
        invalid_lines.batch_id,
        invalid_lines.batch_completed_at,
        invalid_lines.file_name,
        invalid_lines.line_number,
        staged.raw_line,
        staged.raw_line_hex,
        invalid_lines.dead_letter_kind,
        invalid_lines.dead_letter_reason,
        {%- for c in columns %}
        invalid_lines.{{ c }}{{ ',' if not loop.last }}
        {%- endfor %}

    from invalid_lines
    inner join staged
        on
            invalid_lines.batch_id = staged.batch_id
            and invalid_lines.file_name = staged.file_name
            and invalid_lines.line_number = staged.line_number

)

select * from final
{% endmacro %}


{#
    The body of <source>_dead_letter_counts: dead letters per batch (arrival hour) and kind,
    for the batches loaded since the last build: small enough to publish whole and chart.
#}
{% macro dead_letter_counts(source_name, lines) %}
{%- set new_batches = dayclose.batches_loaded_since(source_name, this) -%}

with

dead_letters as (

    select * from {{ lines }}
    where not is_valid and {{ dayclose.batch_in(new_batches) }}

),

final as (

    select
        batch_id,
        cast(batch_arrived_at as date) as arrival_date,
        dead_letter_kind,
        max(batch_loaded_at) as batch_loaded_at,
        cast(count(*) as bigint) as dead_letters

    from dead_letters
    group by batch_id, cast(batch_arrived_at as date), dead_letter_kind

)

select * from final
{% endmacro %}


{#
    SQL columns dead_letter_kind and dead_letter_reason of a validated-lines model: the
    contract's decode error first, then the first of the source's business `rules` the
    line breaks, in their order. `rules` is a list of [kind, SQL condition that breaks the
    rule, SQL text of the reason]; the decoded line is `decoded`.
#}
{% macro line_verdict(rules) -%}
        case
            when decoded.decode_error_kind is not null then decoded.decode_error_kind
            {%- for kind, condition, _ in rules %}
            when {{ condition }} then '{{ kind }}'
            {%- endfor %}
        end as dead_letter_kind,
        case
            when decoded.decode_error_kind is not null then decoded.decode_error
            {%- for _, condition, reason in rules %}
            when {{ condition }} then {{ reason }}
            {%- endfor %}
        end as dead_letter_reason
{%- endmacro %}
