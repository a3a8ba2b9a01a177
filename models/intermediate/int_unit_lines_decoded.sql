{#-
    Every units line decoded once, by the landing contract (macros/contract.sql), in
    the nightly run after its batch was loaded; a replaced batch is decoded again whole.
-#}
{{ dayclose.decoded_lines('units', ref('stg_landing__unit_lines')) }}
