{#- The units landing lines as received, one row per line: macros/landing_lines.sql. -#}
{{ config(tags=['units']) }}

{{ dayclose.staged_lines('unit_lines') }}
