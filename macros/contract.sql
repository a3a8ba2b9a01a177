{#
    The landing contract, decoded in SQL: a line is a flat JSON object whose keys are
    exactly the source's fields (landing_sources.<source>.fields), each value of its
    field's kind. The rules, one per kind (README, "The landing contract"):

    - id:        a JSON string of 1 to 128 characters from A-Z a-z 0-9 _ . : / -
    - timestamp: a JSON string, RFC 3339 with a time zone: YYYY-MM-DDTHH:MM:SS, 0 to 6
                 fraction digits, then Z or +HH:MM / -HH:MM (at most 14 hours); a real
                 calendar day; stored as UTC
    - decimal:   a JSON string or number, optional minus, 1 to 15 digits, at most 2
                 decimals, no exponent
    - sequence:  a JSON integer from 0 to 9223372036854775807
    - number:    a finite JSON number, at most 16 integer digits, 15 decimals and a
                 two-digit exponent

    No statement can fail on any input: the shape of the whole line is checked by a
    regular expression first (the same text on DuckDB's RE2 and Postgres' regex engine;
    a line without a backslash by the same grammar without its escapes, which cannot
    occur there),
    every JSON function and cast runs only on lines and tokens that passed their check,
    and a timestamp is taken to UTC by its offset (by arithmetic on its text; on DuckDB
    through a timestamp with time zone: utc_timestamp). Values are taken verbatim from the
    line's text, so both engines read the same thing (DuckDB's JSON functions take the
    first of duplicated keys and rewrite numbers; Postgres takes the last).
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
    {#- decimal_as_json: a decimal as JSON allows it, a number without leading zeros (a JSON
        parser refuses 012.50); blank: the blanks JSON allows between tokens -#}
    {{ return({
        'flat_object': ws ~ '\\{' ~ ws ~ '(?:' ~ member ~ ws ~ '(?:,' ~ ws ~ member ~ ws ~ ')*)?\\}' ~ ws,
        'flat_object_without_escapes': ws ~ '\\{' ~ ws ~ '(?:' ~ plain_member ~ ws ~ '(?:,' ~ ws ~ plain_member ~ ws ~ ')*)?\\}' ~ ws,
        'id': '"[A-Za-z0-9_.:/-]+"',
        'timestamp': '"' ~ date ~ 'T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]{1,6})?(?:Z|[+-](?:0[0-9]|1[0-4]):[0-5][0-9])"',
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


{# SQL: `expression` matches `pattern` whole (true, false, or null for null). #}
{% macro regexp_full(expression, pattern) -%}
    {{ return(adapter.dispatch('regexp_full', 'dayclose')(expression, pattern)) }}
{%- endmacro %}

{% macro duckdb__regexp_full(expression, pattern) -%}
    regexp_full_match({{ expression }}, '{{ pattern }}')
{%- endmacro %}

{% macro postgres__regexp_full(expression, pattern) -%}
    ({{ expression }} ~ '^(?:{{ pattern }})$')
{%- endmacro %}


{# SQL: `pattern` occurs somewhere in `expression`. #}
{% macro regexp_has(expression, pattern) -%}
    {{ return(adapter.dispatch('regexp_has', 'dayclose')(expression, pattern)) }}
{%- endmacro %}

{% macro duckdb__regexp_has(expression, pattern) -%}
    regexp_matches({{ expression }}, '{{ pattern }}')
{%- endmacro %}

{% macro postgres__regexp_has(expression, pattern) -%}
    ({{ expression }} ~ '{{ pattern }}')
{%- endmacro %}


{#
    SQL: `line` is a plain line of `fields` (true or false; null for a null line): a flat JSON
    object of exactly the fields, in their configured order, each value written as its kind's
    rule asks (contract_patterns) and JSON allows, blanks where JSON allows them. Such a line
    needs none of the general checks (the object's shape, its keys, each token's expression)
    but the rules' lengths and ranges (token_is_valid with pattern_checked), and holds no
    backslash, so its tokens read as on any flat object. What a writer of the contract puts in a line;
    any other line takes the general path to the same verdict. None: no such test, every
    line takes the general path.
    DuckDB: one full match in place of the flat-object expression, the key list and a match
    per field (31 days of sales, 3 M lines, into a temporary table: 2.23-2.44 s without it,
    1.86-1.98 s with it, the same rows).
    Postgres: none, not measured there (its engine runs bounded repetitions such as a
    timestamp's {4} slowly).
#}
{% macro plain_line_test(line, fields) -%}
    {{ return(adapter.dispatch('plain_line_test', 'dayclose')(line, fields)) }}
{%- endmacro %}

{% macro default__plain_line_test(line, fields) -%}
    {{ return(none) }}
{%- endmacro %}

{% macro duckdb__plain_line_test(line, fields) -%}
    {%- set patterns = dayclose.contract_patterns() -%}
    {%- set ws = patterns.blank -%}
    {%- set members = [] -%}
    {%- for name, kind in fields.items() -%}
        {#- each kind's expression, where it is also JSON -#}
        {%- set value = patterns.decimal_as_json if kind == 'decimal' else patterns[kind] -%}
        {%- do members.append('"' ~ name ~ '"' ~ ws ~ ':' ~ ws ~ '(?:' ~ value ~ ')') -%}
    {%- endfor -%}
    {{ return(dayclose.regexp_full(line, ws ~ '\\{' ~ ws ~ members | join(ws ~ ',' ~ ws) ~ ws ~ '\\}' ~ ws)) }}
{%- endmacro %}


{#
    SQL select over `relation` (lines with raw_line, is_flat_object and is_plain_line, the
    latter read on DuckDB only: plain_line_test): every column,
    plus key_count, distinct_key_count, duplicated_key, unknown_key and, for each field,
    token_<field>: the field's value exactly as written in the line (a string with its
    quotes), null when the field is absent. Only meaningful where is_flat_object.
#}
{% macro json_field_tokens(relation, fields) -%}
    {{ return(adapter.dispatch('json_field_tokens', 'dayclose')(relation, fields)) }}
{%- endmacro %}

{#
    DuckDB: the line is parsed twice (json_keys, json_extract of every field at once), and
    the regular expression that reads a token verbatim runs only where the parser's text
    can differ from the line's: numbers (it rewrites 12.50 as 12.5) and lines holding a
    backslash (it decodes escapes); strings, true, false and null come back as written.
    A line whose keys are exactly the fields (nearly all) skips the list work that names
    a duplicated or unknown key.
#}
{% macro duckdb__json_field_tokens(relation, fields) -%}
    {%- set patterns = dayclose.contract_patterns() -%}
    {%- set names = fields.keys() | list -%}
    {%- set name_list = "['" ~ names | join("', '") ~ "']" -%}
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
        {%- for name in names %}
        case
            when parsed_tokens[{{ loop.index }}] is null then null
            when has_backslash or left(parsed_tokens[{{ loop.index }}], 1) not in ('"', 't', 'f', 'n')
                then regexp_extract(raw_line, '"{{ name }}"{{ patterns.field_token }}', 1)
            else parsed_tokens[{{ loop.index }}]
        end as token_{{ name }}{{ ',' if not loop.last }}
        {%- endfor %}
    from (
        select
            *,
            case
                when is_plain_line then true
                else len(keys) = {{ names | length }}
                {%- for name in names %} and list_contains(keys, '{{ name }}'){% endfor %}
            end as has_exactly_the_fields
        from (
            select
                *,
                case
                    when is_plain_line then {{ name_list }}
                    when is_flat_object then json_keys(raw_line)
                    else []
                end as keys,
                case
                    when is_flat_object
                        then json_extract(raw_line, ['$.{{ names | join("', '$.") }}'])
                end as parsed_tokens,
                strpos(raw_line, chr(92)) > 0 as has_backslash
            from {{ relation }}
        ) as parsed
    ) as keyed
{%- endmacro %}

{% macro postgres__json_field_tokens(relation, fields) -%}
    {%- set names = fields.keys() | list -%}
    {#- distinct keys: the fields present, plus the distinct unknown keys (a count(distinct)
        of every key would sort each line's keys) -#}
    {%- set distinct_key_count -%}
        members.distinct_unknown_key_count
        {%- for name in names %} + case when members.token_{{ name }} is null then 0 else 1 end{% endfor %}
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
        {%- for name in names %}
        members.token_{{ name }}{{ ',' if not loop.last }}
        {%- endfor %}
    from {{ relation }} as lines
    left join lateral (
        select
            count(*) as key_count,
            count(distinct key) filter (where key not in ('{{ names | join("', '") }}')) as distinct_unknown_key_count,
            min(key) filter (where key not in ('{{ names | join("', '") }}')) as unknown_key,
            {%- for name in names %}
            max(value::text) filter (where key = '{{ name }}') as token_{{ name }}{{ ',' if not loop.last }}
            {%- endfor %}
        from json_each(case when lines.is_flat_object then lines.raw_line::json end)
    ) as members on true
{%- endmacro %}


{#
    SQL: the token of a `kind` field passes its rule (true or false; null only for a null
    token). `pattern_checked`: the token is known to match its kind's expression (a plain
    line's, plain_line_test); only the rest of the rule is checked (an id's length, a
    sequence's range).
#}
{% macro token_is_valid(token, kind, pattern_checked=false) -%}
    {%- set patterns = dayclose.contract_patterns() -%}
    {%- set matches = 'true' if pattern_checked or kind not in patterns else dayclose.regexp_full(token, patterns[kind]) -%}
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
    {%- elif kind in ('timestamp', 'decimal', 'number') -%}
        {{ matches }}
    {%- else -%}
        {{ exceptions.raise_compiler_error("unknown field kind " ~ kind ~ ": expected id, timestamp, decimal, sequence or number") }}
    {%- endif -%}
{%- endmacro %}


{# SQL: what a `kind` field must be, for dead-letter reasons. #}
{% macro kind_rule(kind) -%}
    {{- {
        'id': 'not an id (1 to 128 of A-Z a-z 0-9 _ . : / -)',
        'timestamp': 'not an RFC 3339 timestamp with a time zone',
        'decimal': 'not a decimal with at most 2 decimals',
        'sequence': 'not an integer from 0 to 9223372036854775807',
        'number': 'not a finite number',
    }[kind] -}}
{%- endmacro %}


{# SQL: the typed value of a valid token of a `kind` field. #}
{% macro token_value(token, kind) -%}
    {%- if kind == 'id' -%}
        substr({{ token }}, 2, length({{ token }}) - 2)
    {%- elif kind == 'decimal' -%}
        cast(replace({{ token }}, '"', '') as decimal(18, 2))
    {%- elif kind == 'sequence' -%}
        cast({{ token }} as bigint)
    {%- elif kind == 'number' -%}
        cast({{ token }} as double precision)
    {%- elif kind == 'timestamp' -%}
        {{ dayclose.utc_timestamp(token) }}
    {%- endif -%}
{%- endmacro %}


{#
    SQL: the UTC time of a valid RFC 3339 timestamp token (a JSON string: quotes, the local
    time, then Z or an offset +HH:MM / -HH:MM), as a timestamp without time zone. By default
    the local time less the offset, taken apart by position. DuckDB reads the offset itself
    when it casts the text to a timestamp with time zone, and its instant's microseconds
    since the epoch make the timestamp, whatever the session's time zone: 3 M tokens, 0.195 ->
    0.111 s, the same values (a cast to a timestamp without time zone ignores the offset).
#}
{% macro utc_timestamp(token) -%}
    {{ return(adapter.dispatch('utc_timestamp', 'dayclose')(token)) }}
{%- endmacro %}

{% macro default__utc_timestamp(token) -%}
    {%- set is_utc = token ~ " like '%Z\"'" -%}
    {%- set local = "cast(substr(" ~ token ~ ", 2, length(" ~ token ~ ") - case when " ~ is_utc ~ " then 3 else 8 end) as " ~ dbt.type_timestamp() ~ ")" -%}
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

{% macro duckdb__utc_timestamp(token) -%}
    make_timestamp(epoch_us(cast(substr({{ token }}, 2, length({{ token }}) - 2) as timestamptz)))
{%- endmacro %}


{#
    SQL select over `relation` (staged landing lines: raw_line, byte_error, ...) that
    decodes each line by the contract of `source_name`: every column of `relation`, then
    decode_error_kind and decode_error (null for a line that keeps the contract; the
    reason names the field, the rule and the value) and one typed column per field (null
    unless the whole line keeps the contract). The kinds: not_text, empty_line,
    not_json_object, duplicate_field, unknown_field, missing_field, bad_value.
#}
{% macro decode_lines(relation, source_name) -%}
    {%- set fields = dayclose.landing_source(source_name)['fields'] -%}
    {%- set patterns = dayclose.contract_patterns() -%}
    {%- set names = fields.keys() | list -%}
    {%- set plain_test = dayclose.plain_line_test('raw_line', fields) -%}
    with
    {%- if plain_test is not none %}

    plain as {{ dayclose.cte_computed_once() }} (

        select
            *,
            coalesce(byte_error is null and {{ plain_test }}, false) as is_plain_line

        from {{ relation }}

    ),
    {%- endif %}

    shaped as {{ dayclose.cte_computed_once() }} (

        {# the same answer both ways; on Postgres, 3 M lines: 13.6-14.3 s with the whole grammar, 9.0-9.4 s so #}
        {%- set flat_object -%}
            coalesce(
                byte_error is null
                and case
                    when strpos(raw_line, chr(92)) = 0
                        then {{ dayclose.regexp_full('raw_line', patterns.flat_object_without_escapes) }}
                    else {{ dayclose.regexp_full('raw_line', patterns.flat_object) }}
                end,
                false
            )
        {%- endset %}
        select
            *,
            {%- if plain_test is none %}
            false as is_plain_line,
            {{ flat_object }} as is_flat_object
            {%- else %}
            {#- a case, not an or: DuckDB evaluates both sides of an or for every line #}
            case when is_plain_line then true else {{ flat_object }} end as is_flat_object
            {%- endif %}

        from {{ 'plain' if plain_test is not none else relation }}

    ),

    tokens as {{ dayclose.cte_computed_once() }} (

        {{ dayclose.json_field_tokens('shaped', fields) }}

    ),

    checked as {{ dayclose.cte_computed_once() }} (

        select
            *,
            case
                when byte_error is not null then 'not_text'
                {%- if plain_test is not none %}
                when is_plain_line then
                    case
                        {%- for name, kind in fields.items() %}
                        when not {{ dayclose.token_is_valid('token_' ~ name, kind, pattern_checked=true) }} then 'bad_value'
                        {%- endfor %}
                    end
                {%- endif %}
                when not is_flat_object then
                    case
                        when {{ dayclose.regexp_full('raw_line', '[ \\t\\n\\r]*') }} then 'empty_line'
                        else 'not_json_object'
                    end
                when duplicated_key is not null then 'duplicate_field'
                when unknown_key is not null then 'unknown_field'
                {%- for name in names %}
                when token_{{ name }} is null or token_{{ name }} = 'null' then 'missing_field'
                {%- endfor %}
                {%- for name, kind in fields.items() %}
                when not {{ dayclose.token_is_valid('token_' ~ name, kind) }} then 'bad_value'
                {%- endfor %}
            end as decode_error_kind,
            case
                when is_flat_object then null
                when byte_error is not null then byte_error
                when {{ dayclose.regexp_full('raw_line', '[ \\t\\n\\r]*') }} then 'empty line'
                when {{ dayclose.regexp_has('raw_line', patterns.starts_array) }} then 'a JSON array, not an object'
                when not {{ dayclose.regexp_has('raw_line', patterns.starts_object) }} then 'not a JSON object'
                when not {{ dayclose.regexp_has('raw_line', patterns.ends_object) }}
                    then 'invalid JSON: truncated (no closing brace)'
                when {{ dayclose.regexp_has('raw_line', patterns.nul_escape) }}
                    then 'a string holds the escape \u0000 (NUL), which no field may hold'
                when {{ dayclose.regexp_has('raw_line', patterns.surrogate_escape) }}
                    then 'a string holds an unpaired surrogate escape (not Unicode text)'
                when {{ dayclose.regexp_has('raw_line', patterns.not_a_number) }}
                    then 'NaN and Infinity are not JSON numbers'
                when {{ dayclose.regexp_has('raw_line', patterns.nested_value) }}
                    then 'a field holds an object or array (values are strings and numbers)'
                else 'invalid JSON: not a flat object of strings, numbers, true, false and null'
            end as shape_error

        from tokens

    ),

    reasoned as {{ dayclose.cte_computed_once() }} (

        select
            *,
            case
                when decode_error_kind in ('not_text', 'empty_line', 'not_json_object') then shape_error
                when decode_error_kind = 'duplicate_field' then {{ dbt.concat(["'duplicate field '", 'duplicated_key']) }}
                when decode_error_kind = 'unknown_field' then {{ dbt.concat(["'unknown field '", 'unknown_key']) }}
                when decode_error_kind is not null then concat_ws(
                    '; ',
                    {%- for name, kind in fields.items() %}
                    case
                        when token_{{ name }} is null then 'missing field {{ name }}'
                        when token_{{ name }} = 'null' then 'missing field {{ name }} (null)'
                        when not {{ dayclose.token_is_valid('token_' ~ name, kind) }}
                            then {{ dbt.concat(["'" ~ name ~ ": " ~ dayclose.kind_rule(kind) ~ ": '", 'substr(token_' ~ name ~ ', 1, 60)']) }}
                    end{{ ',' if not loop.last }}
                    {%- endfor %}
                )
            end as decode_error

        from checked

    )

    select
        reasoned.*,
        {%- for name, kind in fields.items() %}
        case
            when reasoned.decode_error_kind is null then {{ dayclose.token_value('reasoned.token_' ~ name, kind) }}
        end as {{ name }}{{ ',' if not loop.last }}
        {%- endfor %}
    from reasoned
{%- endmacro %}
