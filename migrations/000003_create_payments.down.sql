DROP TABLE payments
