package db_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// TestEnsureDatabaseNeedsNoCreateForAnExistingOne: a service whose
// database exists, run by an account with only the rights its requests
// need (migrations run as a job by another account, PAYSVC_AUTO_MIGRATE=
// false), starts: CREATE DATABASE IF NOT EXISTS is refused to such an
// account even when the database exists (1044), so it is sent only for a
// database the account cannot see.
func TestEnsureDatabaseNeedsNoCreateForAnExistingOne(t *testing.T) {
	t.Parallel()
	d := dbtest.NewEmpty(t)
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	user, password := "paysvc_dml_"+hex.EncodeToString(suffix), "pw-"+hex.EncodeToString(suffix)
	server := dbtest.Server(t)
	ctx := context.Background()
	// Names of hex digits only: account statements take no placeholders.
	account := "'" + user + "'@'%'"
	if _, err := server.ExecContext(ctx, "CREATE USER "+account+" IDENTIFIED BY '"+password+"'"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = server.ExecContext(context.Background(), "DROP USER "+account) })
	if _, err := server.ExecContext(ctx, "GRANT SELECT, INSERT, UPDATE, DELETE ON "+db.QuoteIdent(d.Name)+".* TO "+account); err != nil {
		t.Fatal(err)
	}
	cfg := d.Config.Clone()
	cfg.User, cfg.Passwd = user, password
	if err := db.EnsureDatabase(ctx, cfg); err != nil {
		t.Fatalf("EnsureDatabase of an existing database, as an account without CREATE: %v", err)
	}

	// A database the account may not create, and that does not exist, is
	// still an error of the server's own.
	missing := cfg.Clone()
	missing.DBName = d.Name + "_missing"
	if err := db.EnsureDatabase(ctx, missing); err == nil || !db.ServerAnswered(err) {
		t.Errorf("EnsureDatabase of a missing database without the right to create it: %v, want the server's refusal", err)
	}
}
