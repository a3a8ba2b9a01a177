{#
    The landing contract's primitives (docs/contract.md): what a line and each kind of field
    must be, as SQL that reads the same on every engine. The decoded-lines models
    (int_<entity>_lines_decoded) use them field by field.

    No statement can fail on any input: the shape of the whole line is checked by a regular
    expression first, every JSON function and cast runs only on lines and tokens that passed
    their check, and values are taken verbatim from the line's text (a token is a field's value
    exactly as written, a string with its quotes), so every engine reads the same thing.
#}


{#
    The regular expressions of the contract, by name. Only non-capturing groups, except in
    field_token. Lengths are checked apart (token_is_valid): Postgres' regex engine runs a
    bounded repetition such as {1,128} about eight times slower than a plain +.
#}
{% macro contract_patterns() %}
    {%- set ws -%}[ \t\n\r]*{%- endset -%}
    {%- set u_escape -%}u(?:0(?:0(?:0[1-9a-fA-F]|[1-9a-fA-F][0-9a-fA-F])|[1-9a-fA-F][0-9a-fA-F]{2})|[1-9a-cA-CeEfF][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2}|[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}){%- endset -%}
    {%- set string -%}"(?:[^"\\\x00-\x1f]|\\(?:["\\/bfnrt]|{{ u_escape }}))*"{%- endset -%}
    {%- set number -%}-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?{%- endset -%}
    {%- set value -%}(?:{{ string }}|{{ number }}|true|false|null){%- endset -%}
    {%- set plain_key -%}"[^"\\\x00-\x1f]*"{%- endset -%}
    {%- set member -%}{{ plain_key }}{{ ws }}:{{ ws }}{{ value }}{%- endset -%}
    {#- a line without a backslash holds no escape: its strings are plain, like its keys -#}
    {%- set plain_member -%}{{ plain_key }}{{ ws }}:{{ ws }}(?:{{ plain_key }}|{{ number }}|true|false|null){%- endset -%}
    {%- set date -%}(?:[1-9][0-9]{3}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))|(?:[1-9][0-9](?:0[48]|[2468][048]|[13579][26])|(?:[2468][048]|[13579][26])00)-02-29){%- endset -%}
    {{ return({
        'flat_object': ws ~ '\\{' ~ ws ~ '(?:' ~ member ~ ws ~ '(?:,' ~ ws ~ member ~ ws ~ ')*)?\\}' ~ ws,
        'flat_object_without_escapes': ws ~ '\\{' ~ ws ~ '(?:' ~ plain_member ~ ws ~ '(?:,' ~ ws ~ plain_member ~ ws ~ ')*)?\\}' ~ ws,
        'id': '"[A-Za-z0-9_.:/-]+"',
        'timestamp': '"' ~ date ~ '[Tt](?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]+)?(?:[Zz]|[+-](?:0[0-9]|1[0-4]):[0-5][0-9])"',
        'decimal': '"-?[0-9]{1,15}(?:\\.[0-9]{1,2})?"|-?[0-9]{1,15}(?:\\.[0-9]{1,2})?',
        'decimal_as_json': '"-?[0-9]{1,15}(?:\\.[0-9]{1,2})?"|-?(?:0|[1-9][0-9]{0,14})(?:\\.[0-9]{1,2})?',
        'sequence': '0|[1-9][0-9]*',
        'number': '-?(?:0|[1-9][0-9]{0,15})(?:\\.[0-9]{1,15})?(?:[eE][+-]?[0-9]{1,2})?',
        'field_token': ws ~ ':' ~ ws ~ '((?:"(?:[^"\\\\]|\\\\.)*"|[^,}" \\t\\n\\r]+))',
        'starts_array': '^' ~ ws ~ '\\[',
        'starts_object': '^' ~ ws ~ '\\{',
        'ends_object': '\\}' ~ ws ~ '$',
        'nested_value': ':' ~ ws ~ '[\\{\\[]',
        'nul_escape': '\\\\u0000',
        'surrogate_escape': '\\\\u[dD][89a-fA-F][0-9a-fA-F]{2}',
        'not_a_number': ':' ~ ws ~ '-?(?:NaN|Infinity)',
        'blank': ws,
    }) }}
{% endmacro %}


{#
    SQL: `line` is one flat JSON object (keys plain strings; values strings, numbers, true,
    false or null), false for null. A line without a backslash holds no escape, and is checked
    by the same grammar without them, which Postgres' regular expressions run much faster.
#}
{% macro is_flat_json_object(line) -%}
    {%- set patterns = dayclose.contract_patterns() -%}
    coalesce(
        case
            when position(chr(92) in {{ line }}) = 0
                then {{ dayclose.regexp_full(line, patterns.flat_object_without_escapes) }}
            else {{ dayclose.regexp_full(line, patterns.flat_object) }}
        end,
        false
    )
{%- endmacro %}


{#
    SQL: why `line`, not a flat JSON object, breaks the contract, in words (null for a line
    that is one): empty, an array, not an object, truncated, a NUL or unpaired surrogate escape,
    NaN or Infinity, a nested value, else invalid JSON.
#}
{% macro not_a_flat_object_reason(line) -%}
    {%- set patterns = dayclose.contract_patterns() -%}
    case
        when {{ dayclose.regexp_full(line, patterns.blank) }} then 'empty line'
        when {{ dayclose.regexp_has(line, patterns.starts_array) }} then 'a JSON array, not an object'
        when not {{ dayclose.regexp_has(line, patterns.starts_object) }} then 'not a JSON object'
        when not {{ dayclose.regexp_has(line, patterns.ends_object) }} then 'invalid JSON: truncated (no closing brace)'
        when {{ dayclose.regexp_has(line, patterns.nul_escape) }}
            {# the backslash by chr(92): Spark's string literals read \u0000 as an escape #}
            then {{ dbt.concat(["'a string holds the escape '", 'chr(92)', "'u0000 (NUL), which no field may hold'"]) }}
        when {{ dayclose.regexp_has(line, patterns.surrogate_escape) }}
            then 'a string holds an unpaired surrogate escape (not Unicode text)'
        when {{ dayclose.regexp_has(line, patterns.not_a_number) }} then 'NaN and Infinity are not JSON numbers'
        when {{ dayclose.regexp_has(line, patterns.nested_value) }}
            then 'a field holds an object or array (values are strings and numbers)'
        else 'invalid JSON: not a flat object of strings, numbers, true, false and null'
    end
{%- endmacro %}


{#
    SQL: `line` is a plain line of `fields` ({name: kind}, in their order): one flat JSON object of
    exactly those fields, in that order, each value written as its kind asks and as JSON allows,
    blanks where JSON allows them, and no backslash. What the contract's writers write, so nearly
    every line. Such a line needs none of the general checks (the object's shape, its keys, each
    token's expression) but an id's length and a sequence's range (token_is_valid with
    `is_plain`); any other line takes the general path to the same verdict.
    DuckDB and Spark test it in one match, cheaper than the general path's several. Postgres
    takes the general path for every line (false): the match was not measured there.
#}
{% macro is_plain_json_line(line, fields) -%}
    {%- if dayclose.matches_plain_lines() -%}
        coalesce({{ dayclose.regexp_full(line, dayclose.plain_json_line_pattern(fields)) }}, false)
    {%- else -%}
        false
    {%- endif -%}
{%- endmacro %}

{#- whether is_plain_json_line matches lines on this engine (not on Postgres) -#}
{% macro matches_plain_lines() -%}
    {{ return(adapter.dispatch('matches_plain_lines', 'dayclose')()) }}
{%- endmacro %}

{% macro default__matches_plain_lines() -%}
    {{ return(true) }}
{%- endmacro %}

{% macro postgres__matches_plain_lines() -%}
    {{ return(false) }}
{%- endmacro %}

{#- the regular expression of a plain line of `fields` (is_plain_json_line) -#}
{% macro plain_json_line_pattern(fields) -%}
    {%- set patterns = dayclose.contract_patterns() -%}
    {%- set ws = patterns.blank -%}
    {%- set members = [] -%}
    {%- for name, kind in fields.items() -%}
        {%- set value = patterns.decimal_as_json if kind == 'decimal' else patterns[kind] -%}
        {%- do members.append('"' ~ name ~ '"' ~ ws ~ ':' ~ ws ~ '(?:' ~ value ~ ')') -%}
    {%- endfor -%}
    {{ return(ws ~ '\\{' ~ ws ~ members | join(ws ~ ',' ~ ws) ~ ws ~ '\\}' ~ ws) }}
{%- endmacro %}


{# SQL: `line` is empty or blank (JSON's blanks only). #}
{% macro is_blank_line(line) -%}
    {{ dayclose.regexp_full(line, dayclose.contract_patterns().blank) }}
{%- endmacro %}


{#
    SQL select over `relation` (lines with raw_line, is_plain_line and is_flat_object): every column, plus
    key_count, distinct_key_count, duplicated_key (a key written twice), unknown_key (a key
    not among `fields`), new_fields (every such key, sorted bytewise, joined by ', '; null
    when none) and, for each field, token_<field>: the field's value exactly as
    written in the line (a string with its quotes), null when absent. Only meaningful where
    is_flat_object.
#}
{% macro json_object_tokens(relation, fields) -%}
    {{ return(adapter.dispatch('json_object_tokens', 'dayclose')(relation, fields)) }}
{%- endmacro %}

{#
    DuckDB: the line is parsed twice (json_keys, json_extract of every field at once); the
    regular expression that reads a token verbatim runs only where the parser's text can differ
    from the line's: numbers (it rewrites 12.50 as 12.5) and lines holding a backslash (it
    decodes escapes); strings, true, false and null come back as written. A line whose keys are
    exactly the fields (nearly all) skips the list work that names a repeated or unknown key.
#}
{% macro default__json_object_tokens(relation, fields) -%}
    {%- set field_token = dayclose.contract_patterns().field_token -%}
    {%- set name_list = "['" ~ fields | join("', '") ~ "']" -%}
    select
        *,
        len(keys) as key_count,
        case when has_exactly_the_fields then len(keys) else len(list_distinct(keys)) end as distinct_key_count,
        case
            when not has_exactly_the_fields
                then list_filter(list_distinct(keys), lambda k: len(list_filter(keys, lambda j: j = k)) > 1)[1]
        end as duplicated_key,
        case
            when not has_exactly_the_fields
                then list_filter(keys, lambda k: not list_contains({{ name_list }}, k))[1]
        end as unknown_key,
        case
            when not has_exactly_the_fields
                then nullif(array_to_string(
                    list_sort(list_distinct(list_filter(keys, lambda k: not list_contains({{ name_list }}, k)))),
                    ', '
                ), '')
        end as new_fields,
        {%- for name in fields %}
        case
            when parsed_tokens[{{ loop.index }}] is null then null
            when has_backslash or left(parsed_tokens[{{ loop.index }}], 1) not in ('"', 't', 'f', 'n')
                then regexp_extract(raw_line, '"{{ name }}"{{ field_token }}', 1)
            else parsed_tokens[{{ loop.index }}]
        end as token_{{ name }}{{ ',' if not loop.last }}
        {%- endfor %}
    from (
        select
            *,
            case
                when is_plain_line then true
                else len(keys) = {{ fields | length }}
                {%- for name in fields %} and list_contains(keys, '{{ name }}'){% endfor %}
            end as has_exactly_the_fields
        from (
            select
                *,
                case
                    when is_plain_line then {{ name_list }}
                    when is_flat_object then json_keys(raw_line)
                    else []
                end as keys,
                case when is_flat_object then json_extract(raw_line, ['$.{{ fields | join("', '$.") }}']) end
                    as parsed_tokens,
                strpos(raw_line, chr(92)) > 0 as has_backslash
            from {{ relation }}
        ) as parsed
    ) as keyed
{%- endmacro %}

{#
    Postgres: one pass over the line's members (json_each keeps each value's text as written);
    the distinct keys are the fields present plus the distinct unknown keys (a count(distinct)
    of every key would sort each line's keys).
#}
{% macro postgres__json_object_tokens(relation, fields) -%}
    {%- set field_list = "('" ~ fields | join("', '") ~ "')" -%}
    {%- set distinct_key_count -%}
        members.distinct_unknown_key_count
        {%- for name in fields %} + case when members.token_{{ name }} is null then 0 else 1 end{% endfor %}
    {%- endset %}
    select
        lines.*,
        members.key_count,
        {{ distinct_key_count }} as distinct_key_count,
        case
            when members.key_count > {{ distinct_key_count }}
                then (
                    select min(repeated.key) from (
                        select key from json_each(lines.raw_line::json) group by key having count(*) > 1
                    ) as repeated
                )
        end as duplicated_key,
        members.unknown_key,
        members.new_fields,
        {%- for name in fields %}
        members.token_{{ name }}{{ ',' if not loop.last }}
        {%- endfor %}
    from {{ relation }} as lines
    left join lateral (
        select
            count(*) as key_count,
            count(distinct key) filter (where key not in {{ field_list }}) as distinct_unknown_key_count,
            min(key) filter (where key not in {{ field_list }}) as unknown_key,
            string_agg(distinct key collate "C", ', ' order by key collate "C")
                filter (where key not in {{ field_list }}) as new_fields,
            {%- for name in fields %}
            max(value::text) filter (where key = '{{ name }}') as token_{{ name }}{{ ',' if not loop.last }}
            {%- endfor %}
        from json_each(case when lines.is_flat_object then lines.raw_line::json end)
    ) as members on true
{%- endmacro %}


{#
    Spark: the members of a flat object read by one regular expression, left to right (the line
    matched the grammar, so each match is a key and its value as written); from_json into a map
    would refuse a line that repeats a key. A repeated or unknown key: the least, as on Postgres.
    A plain line's keys are the fields, in their order: only its values are read, and the
    lambdas that look for a repeated or unknown key do not run.
#}
{% macro spark__json_object_tokens(relation, fields) -%}
    {%- set ws = dayclose.contract_patterns().blank -%}
    {%- set member = '"([^"\\\\]*)"' ~ ws ~ ':' ~ ws ~ '("[^"\\\\]*(?:\\\\.[^"\\\\]*)*"|[^,}" \\t\\n\\r]+)' -%}
    {%- set name_list = "array('" ~ fields | join("', '") ~ "')" -%}
    select
        *,
        size(keys) as key_count,
        case when is_plain_line then size(keys) else size(array_distinct(keys)) end as distinct_key_count,
        case
            when not is_plain_line
                then array_min(filter(array_distinct(keys), k -> size(filter(keys, j -> j = k)) > 1))
        end as duplicated_key,
        case
            when not is_plain_line then array_min(filter(keys, k -> not array_contains({{ name_list }}, k)))
        end as unknown_key,
        case
            when not is_plain_line
                then nullif(array_join(array_sort(array_distinct(filter(keys, k -> not array_contains({{ name_list }}, k)))), ', '), '')
        end as new_fields,
        {%- for name in fields %}
        case
            when is_plain_line then element_at(tokens, {{ loop.index }})
            when array_contains(keys, '{{ name }}') then element_at(tokens, cast(array_position(keys, '{{ name }}') as int))
        end as token_{{ name }}{{ ',' if not loop.last }}
        {%- endfor %}
    from (
        select
            *,
            case
                when is_plain_line then {{ name_list }}
                when is_flat_object then regexp_extract_all(raw_line, '{{ member | replace('\\', '\\\\') }}', 1)
                else array()
            end as keys,
            case when is_flat_object then regexp_extract_all(raw_line, '{{ member | replace('\\', '\\\\') }}', 2) else array() end as tokens
        from {{ relation }}
    ) as parsed
{%- endmacro %}


{#
    SQL: the token of a field of `kind` keeps its kind's rule (true or false; null only for a
    null token). `is_plain`: SQL saying the token is known to match its kind's expression (a
    plain line's, is_plain_json_line): only the rest of the rule is checked. The kinds:
    - id:        a JSON string of 1 to 128 characters from A-Z a-z 0-9 _ . : / -
    - timestamp: a JSON string, an RFC 3339 date-time (section 5.6: T and Z in either case, any
                 number of fraction digits, kept to the microsecond by truncation), year 1000
                 or later, offset at most 14:59; no leap second (:60)
    - decimal:   a JSON string or number, optional minus, 1 to 15 digits, at most 2 decimals
    - sequence:  a JSON integer from 0 to 9223372036854775807
    - number:    a finite JSON number, at most 16 integer digits, 15 decimals, a two-digit exponent
#}
{% macro token_is_valid(token, kind, is_plain='false') -%}
    {%- set patterns = dayclose.contract_patterns() -%}
    {%- if kind not in ('id', 'timestamp', 'decimal', 'sequence', 'number') -%}
        {{ exceptions.raise_compiler_error("unknown field kind " ~ kind ~ ": expected id, timestamp, decimal, sequence or number") }}
    {%- endif -%}
    {#- a case, not an or: DuckDB computes both sides of an or for every line -#}
    {%- set matches = 'case when ' ~ is_plain ~ ' then true else ' ~ dayclose.regexp_full(token, patterns[kind]) ~ ' end' -%}
    {%- if kind == 'sequence' -%}
        case
            when length({{ token }}) <= 19 and {{ matches }}
                then length({{ token }}) < 19
                or cast(substr({{ token }}, 1, 18) as bigint) < 922337203685477580
                or (cast(substr({{ token }}, 1, 18) as bigint) = 922337203685477580 and substr({{ token }}, 19, 1) <= '7')
            else false
        end
    {%- elif kind == 'id' -%}
        (length({{ token }}) <= 130 and {{ matches }})
    {%- else -%}
        {{ matches }}
    {%- endif -%}
{%- endmacro %}


{# What a field of `kind` must be, in words, for dead-letter reasons. #}
{% macro kind_rule(kind) -%}
    {{- {
        'id': 'not an id (1 to 128 of A-Z a-z 0-9 _ . : / -)',
        'timestamp': 'not an RFC 3339 date-time (YYYY-MM-DDTHH:MM:SS, optional fraction, Z or +-HH:MM up to 14:59, year from 1000)',
        'decimal': 'not a decimal with at most 2 decimals',
        'sequence': 'not an integer from 0 to 9223372036854775807',
        'number': 'not a finite number',
    }[kind] -}}
{%- endmacro %}


{#
    SQL: why a field named `name` of `kind` breaks the contract, in words (null when it keeps
    it): missing, null, or its kind's rule and the value as written (at most 60 characters).
    `is_valid`: SQL of the token's verdict (token_is_valid, computed once by the model).
#}
{% macro field_error(token, name, kind, is_valid) -%}
    case
        when {{ token }} is null then 'missing field {{ name }}'
        when {{ token }} = 'null' then 'missing field {{ name }} (null)'
        when not {{ is_valid }}
            then {{ dbt.concat(["'" ~ name ~ ": " ~ dayclose.kind_rule(kind) ~ ": '", 'substr(' ~ token ~ ', 1, 60)']) }}
    end
{%- endmacro %}


{# SQL: the typed value of a valid token of `kind` (a timestamp in UTC, without time zone). #}
{% macro token_value(token, kind) -%}
    {%- if kind == 'id' -%}
        substr({{ token }}, 2, length({{ token }}) - 2)
    {%- elif kind == 'decimal' -%}
        cast(replace({{ token }}, '"', '') as decimal(18, 2))
    {%- elif kind == 'sequence' -%}
        cast({{ token }} as bigint)
    {%- elif kind == 'number' -%}
        cast({{ token }} as {{ dayclose.type_double() }})
    {%- elif kind == 'timestamp' -%}
        {{ dayclose.utc_timestamp(token) }}
    {%- endif -%}
{%- endmacro %}


{#
    SQL: the UTC time of a valid RFC 3339 timestamp token (a JSON string: quotes, the local
    time with any number of fraction digits, then Z or an offset +HH:MM / -HH:MM, T and Z in
    either case), as a timestamp without time zone. The local time is rewritten as
    `YYYY-MM-DD HH:MM:SS[.ffffff]`: the fraction cut to microseconds (truncated, never rounded,
    so the last nanosecond of a day stays in its day). By default the local time less the
    offset, taken apart by position. DuckDB reads the offset itself when it casts the text to
    a timestamp with time zone, and its instant's microseconds since the epoch make the
    timestamp, whatever the session's time zone (faster than by position there).
#}
{% macro utc_timestamp(token) -%}
    {{ return(adapter.dispatch('utc_timestamp', 'dayclose')(token)) }}
{%- endmacro %}

{% macro default__utc_timestamp(token) -%}
    {%- set is_utc = "upper(substr(" ~ token ~ ", length(" ~ token ~ ") - 1, 1)) = 'Z'" -%}
    {%- set fraction = "case when substr(" ~ token ~ ", 21, 1) = '.' then substr(" ~ token ~ ", 21, least(7, length(" ~ token ~ ") - case when " ~ is_utc ~ " then 22 else 27 end)) else '' end" -%}
    {%- set local = "cast(substr(" ~ token ~ ", 2, 10) || ' ' || substr(" ~ token ~ ", 13, 8) || " ~ fraction ~ " as " ~ dbt.type_timestamp() ~ ")" -%}
    {%- set offset_minutes -%}
        case
            when {{ is_utc }} then 0
            else
                (case when substr({{ token }}, length({{ token }}) - 6, 1) = '-' then -1 else 1 end)
                * (cast(substr({{ token }}, length({{ token }}) - 5, 2) as integer) * 60
                    + cast(substr({{ token }}, length({{ token }}) - 2, 2) as integer))
        end
    {%- endset -%}
    cast({{ dbt.dateadd('minute', '-1 * (' ~ offset_minutes ~ ')', local) }} as {{ dbt.type_timestamp() }})
{%- endmacro %}

{#- Spark: the local time less the offset by timestampadd (dbt's dateadd there drops the fraction) -#}
{% macro spark__utc_timestamp(token) -%}
    {%- set is_utc = "upper(substr(" ~ token ~ ", length(" ~ token ~ ") - 1, 1)) = 'Z'" -%}
    {%- set fraction = "case when substr(" ~ token ~ ", 21, 1) = '.' then substr(" ~ token ~ ", 21, least(7, length(" ~ token ~ ") - case when " ~ is_utc ~ " then 22 else 27 end)) else '' end" -%}
    {%- set local = "cast(concat(substr(" ~ token ~ ", 2, 10), ' ', substr(" ~ token ~ ", 13, 8), " ~ fraction ~ ") as timestamp)" -%}
    timestampadd(minute, -1 * (
        case
            when {{ is_utc }} then 0
            else
                (case when substr({{ token }}, length({{ token }}) - 6, 1) = '-' then -1 else 1 end)
                * (cast(substr({{ token }}, length({{ token }}) - 5, 2) as integer) * 60
                    + cast(substr({{ token }}, length({{ token }}) - 2, 2) as integer))
        end
    ), {{ local }})
{%- endmacro %}

{% macro duckdb__utc_timestamp(token) -%}
    {%- set is_utc = "upper(substr(" ~ token ~ ", length(" ~ token ~ ") - 1, 1)) = 'Z'" -%}
    {%- set fraction = "case when substr(" ~ token ~ ", 21, 1) = '.' then substr(" ~ token ~ ", 21, least(7, length(" ~ token ~ ") - case when " ~ is_utc ~ " then 22 else 27 end)) else '' end" -%}
    {%- set zone = "case when " ~ is_utc ~ " then '+00:00' else substr(" ~ token ~ ", length(" ~ token ~ ") - 6, 6) end" -%}
    make_timestamp(epoch_us(cast(substr({{ token }}, 2, 10) || ' ' || substr({{ token }}, 13, 8) || {{ fraction }} || {{ zone }} as timestamptz)))
{%- endmacro %}
