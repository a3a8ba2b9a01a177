{#
    A 63-bit integer hash of an event's key columns `keys`, joined by '|' as text: the first 16
    hex digits of their md5, shifted right by one bit (a non-negative bigint, the same value on
    every engine). For finding events in a whole first-arrivals registry by one integer column
    instead of their text keys (docs/decisions/0002-first-arrival-registry.md). From md5
    because every engine and version computes it alike (an engine's own fast hash may change
    between versions, and a registry keeps its hashes for years). Two keys that share a hash
    are harmless where it is used: copies are ranked by their keys.
#}
{% macro event_hash(keys) -%}
    {%- set parts = [] -%}
    {%- for k in keys -%}
        {%- do parts.append('cast(' ~ k ~ ' as ' ~ dbt.type_string() ~ ')') -%}
        {%- if not loop.last %}{% do parts.append("'|'") %}{% endif -%}
    {%- endfor -%}
    {{ return(adapter.dispatch('event_hash', 'dayclose')(dbt.concat(parts) if parts | length > 1 else parts[0])) }}
{%- endmacro %}

{% macro default__event_hash(text) -%}
    cast(cast('0x' || substr(md5({{ text }}), 1, 16) as ubigint) >> 1 as bigint)
{%- endmacro %}

{#- Spark: conv gives the 16 hex digits' unsigned value in decimal digits -#}
{% macro spark__event_hash(text) -%}
    cast(floor(cast(conv(substr(md5({{ text }}), 1, 16), 16, 10) as decimal(20, 0)) / 2) as bigint)
{%- endmacro %}

{% macro postgres__event_hash(text) -%}
    ((('x' || substr(md5({{ text }}), 1, 16))::bit(64) >> 1)::bigint)
{%- endmacro %}


{#
    SQL condition: the event of the row `alias` (its key columns `keys`) is among the events
    of the relation or CTE `events`. Postgres finds them through the registry's unique index on
    the keys. DuckDB compares one integer per registered event (event_hash) instead of its text
    key, which joins several times faster over a long history; a registered event that only
    shares a hash with one of `events` comes along harmlessly (copies are ranked by their keys).
#}
{% macro event_among(alias, keys, events) -%}
    {{ return(adapter.dispatch('event_among', 'dayclose')(alias, keys, events)) }}
{%- endmacro %}

{% macro default__event_among(alias, keys, events) -%}
    {{ alias }}.event_hash in (select event_hash from {{ events }})
{%- endmacro %}

{% macro postgres__event_among(alias, keys, events) -%}
    ({{ alias }}.{{ keys | join(', ' ~ alias ~ '.') }}) in (select {{ keys | join(', ') }} from {{ events }})
{%- endmacro %}
