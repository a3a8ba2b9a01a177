{#
    Each loaded batch is summarized once (int_batches_summarized): these macros pick the
    batches still to summarize and select rows of given batches with bounds every engine
    prunes by.
#}


{#
    The loaded batches each source still has to summarize into the incremental
    model being built (int_batches_summarized): those seen at this run's as-of
    whose loaded version (manifest) `this` has no summary of, and that the source's
    events model has registered already.
    {source_name: ['YYYY-MM-DDTHH', ...]}; empty while parsing and on a first
    build (which summarizes every batch without a list).
#}
{% macro batches_to_summarize() -%}
    {%- set loads = ref('stg_landing__batch_loads') -%}
    {%- set to_summarize = {} -%}
    {%- if execute and is_incremental() -%}
        {%- set registered = dayclose.events_registered_through() -%}
        {%- set rows = run_query(
            "select source_name, batch_id from " ~ loads ~ " as loads"
            ~ " where is_loaded and batch_completed_at <= " ~ dayclose.as_of_at()
            ~ " and (" ~ (dayclose.registered_condition(registered) or '1 = 0') ~ ")"
            ~ " and not exists (select 1 from " ~ this ~ " as summaries"
            ~ " where summaries.source_name = loads.source_name"
            ~ " and summaries.batch_id = loads.batch_id"
            ~ " and summaries.manifest_sha256 = loads.manifest_sha256)"
        ) -%}
        {%- for row in rows -%}
            {%- do to_summarize.setdefault(row[0], []).append(row[1]) -%}
        {%- endfor -%}
    {%- endif -%}
    {{- return(to_summarize) -}}
{%- endmacro %}


{#
    SQL condition: the row's (source_name, batch_id) is one of `batches_by_source`
    ({source_name: [batch_id, ...]}); false when there are none.
#}
{% macro in_batches(batches_by_source) -%}
    {%- set terms = [] -%}
    {%- for source_name, batch_ids in batches_by_source.items() if batch_ids -%}
        {%- do terms.append("(source_name = '" ~ source_name ~ "' and " ~ dayclose.batch_in(batch_ids) ~ ")") -%}
    {%- endfor -%}
    {{- '(' ~ terms | join(' or ') ~ ')' if terms else '1 = 0' -}}
{%- endmacro %}


{# SQL condition on (source_name, batch_completed_at): the source's events model has registered the batch. #}
{% macro registered_condition(registered) -%}
    {%- set terms = [] -%}
    {%- for source_name, through in registered.items() -%}
        {%- do terms.append(
            "(source_name = '" ~ source_name ~ "' and batch_completed_at <= "
            ~ dayclose.timestamp_literal(through) ~ ")"
        ) -%}
    {%- endfor -%}
    {{- terms | join(' or ') -}}
{%- endmacro %}
