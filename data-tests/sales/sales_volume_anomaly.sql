{#
    Volume anomaly: a day's total sales_amount outside the band around the median
    of the same weekday in the weeks before (vars volume_anomaly_weeks,
    volume_anomaly_band). Warns by default; set volume_anomaly_severity to
    error to block publication.
#}
{{ config(tags=['gate', 'sales'], severity=var('volume_anomaly_severity')) }}

{{ dayclose.volume_anomalies('sales', ref('daily_sales'), 'sale_date', 'sales_amount') }}
