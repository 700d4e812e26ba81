DROP TABLE merchants
