{#
    Each event once: the first copy to arrive of every key (a resend, a producer
    retry, a replayed backlog all carry the same key). Renders a select over
    `relation` (a CTE or relation name) keeping all its columns but the rank.
    Ties on received_at fall back to the batch, file and line, so the choice is
    deterministic and a rerun picks the same copy.
#}
{% macro first_copies(relation, key_columns) %}
    select * from (
        select
            *,
            row_number() over (
                partition by {{ key_columns | join(', ') }}
                order by received_at, batch_id, file_name, line_number
            ) as copy_number

        from {{ relation }}
    ) as copies_ranked
    where copy_number = 1
{% endmacro %}
