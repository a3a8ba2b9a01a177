{#- The sales landing lines as received, one row per line: macros/landing_lines.sql. -#}
{{ config(tags=['sales']) }}

{{ dayclose.staged_lines('sale_lines') }}
