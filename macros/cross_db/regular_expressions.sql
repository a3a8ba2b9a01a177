{#
    Regular expressions the same on every engine: the patterns are written so that DuckDB's
    RE2 and Postgres' engine read them alike (no lookaround, no backreferences, only
    non-capturing groups), and these say "matches whole" and "occurs" in each engine's words.
#}


{# SQL: `expression` matches `pattern` whole (true, false, or null for null). #}
{% macro regexp_full(expression, pattern) -%}
    {{ return(adapter.dispatch('regexp_full', 'dayclose')(expression, pattern)) }}
{%- endmacro %}

{% macro default__regexp_full(expression, pattern) -%}
    regexp_full_match({{ expression }}, '{{ pattern }}')
{%- endmacro %}

{% macro postgres__regexp_full(expression, pattern) -%}
    ({{ expression }} ~ '^(?:{{ pattern }})$')
{%- endmacro %}

{#-
    Spark: Java's regular expressions; a string literal's backslashes are escapes there, so
    doubled. Java's $ also matches before a line terminator that ends the text (U+0085 and
    U+2028 among them), so the end of the text is \z here.
-#}
{% macro spark__regexp_full(expression, pattern) -%}
    ({{ expression }} rlike '^(?:{{ pattern | replace('\\', '\\\\') }})\\z')
{%- endmacro %}


{# SQL: `pattern` occurs somewhere in `expression`. #}
{% macro regexp_has(expression, pattern) -%}
    {{ return(adapter.dispatch('regexp_has', 'dayclose')(expression, pattern)) }}
{%- endmacro %}

{% macro default__regexp_has(expression, pattern) -%}
    regexp_matches({{ expression }}, '{{ pattern }}')
{%- endmacro %}

{% macro postgres__regexp_has(expression, pattern) -%}
    ({{ expression }} ~ '{{ pattern }}')
{%- endmacro %}

{#- Spark: (?d), Java's UNIX_LINES, makes \n the only line terminator $ may match before -#}
{% macro spark__regexp_has(expression, pattern) -%}
    ({{ expression }} rlike '(?d){{ pattern | replace('\\', '\\\\') }}')
{%- endmacro %}
