package migrate_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/golang-migrate/migrate/v4/database"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/migrate"
	"github.com/paysvc/paysvc/lab/kit/dbtest"
)

// TestUpWaitsForAnotherInstancesMigration: an instance that starts while
// another one migrates waits for it, however long the migration takes,
// and then finds the schema up to date. golang-migrate's own lock gives up
// after 10 s, which made every instance but the one migrating exit at
// start during a slow migration.
func TestUpWaitsForAnotherInstancesMigration(t *testing.T) {
	d := dbtest.New(t)
	cfg, err := db.Config(d.DSN)
	if err != nil {
		t.Fatal(err)
	}
	// The lock another instance's migrator holds while it migrates.
	ctx := context.Background()
	other, err := d.Gorm.DB()
	if err != nil {
		t.Fatal(err)
	}
	conn, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	aid, err := database.GenerateAdvisoryLockId(fmt.Sprintf("%s:%s", cfg.DBName, "schema_migrations"))
	if err != nil {
		t.Fatal(err)
	}
	var got int
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK(?, 0)", aid).Scan(&got); err != nil || got != 1 {
		t.Fatalf("take the migration lock: %d, %v", got, err)
	}
	const held = 12 * time.Second
	start := time.Now()
	released := time.AfterFunc(held, func() {
		_, _ = conn.ExecContext(ctx, "SELECT RELEASE_LOCK(?)", aid)
	})
	defer released.Stop()
	if err := migrate.Up(cfg); err != nil {
		t.Fatalf("Up while another instance held the lock for %v: %v", held, err)
	}
	if waited := time.Since(start); waited < held {
		t.Errorf("Up returned after %v, while the lock was held for %v", waited.Round(time.Millisecond), held)
	}
	if err := migrate.Check(cfg); err != nil {
		t.Errorf("Check after Up: %v", err)
	}
}
