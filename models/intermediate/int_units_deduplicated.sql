{#-
    Each valid unit once, at its first arrival over the whole history: a replayed or
    retried unit (same line_id and plc_seq), on whatever day and in whatever batch, is a
    copy and counts never again (macros/landing_lines.sql). Read incrementally: the
    nightly cost follows the batches loaded, not the history.
-#}
{{
    dayclose.first_arrivals('units', ref('int_unit_lines_validated'), [
        'plant_id', 'sku', 'verdict', 'fill_level_ml', 'capper_torque_nm', 'temperature_c',
        'has_sensor_out_of_spec',
    ])
}}
