DROP TABLE refunds
