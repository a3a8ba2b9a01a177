{#
    Volume anomaly: a day's total good_units outside the band around the median
    of the same weekday in the weeks before (vars volume_anomaly_weeks,
    volume_anomaly_band). Warns by default; set volume_anomaly_severity to
    error to block publication.
#}
{{ config(tags=['gate', 'units'], severity=var('volume_anomaly_severity')) }}

{{ dayclose.volume_anomalies('units', ref('daily_good_units'), 'production_date', 'good_units') }}
