// Package migrations embeds the schema: golang-migrate files, one DDL
// statement each, because MySQL commits DDL at once and a half-applied
// multi-statement file would leave the schema dirty. The one exception,
// 000006 (events and their attempts under one number) and 000008 (provider
// calls, and orders.expires_at last), use IF NOT EXISTS so that they can be
// applied again after an interruption. The SQL files own
// the schema; nothing calls AutoMigrate.
package migrations

import "embed"

// FS holds the *.up.sql and *.down.sql files.
//
//go:embed *.sql
var FS embed.FS
