-- The payments that took money no order keeps (result duplicate_payment,
-- late_payment or amount_mismatch, status SUCCEEDED: "flagged", to be
-- refunded automatically or by hand) are a few among many applied ones:
-- idx_payments_flagged makes their list (payments.ListFlagged, reconcile's
-- "payment to refund") a range of its own instead of a scan of the table.
ALTER TABLE payments ADD KEY idx_payments_flagged (result, status, id)
