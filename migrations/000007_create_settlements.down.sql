DROP TABLE settlements
