DROP TABLE orders
