package experiments

import (
	"context"
	"database/sql"
	"strings"
)

// Server names the database server an experiment ran on. MariaDB and
// MySQL 8 differ where the experiments look: gorm's MySQL driver appends
// RETURNING to inserts on MariaDB only (see GormTrapWant).
type Server struct {
	Version string // SELECT VERSION()
	Comment string // @@version_comment
	MariaDB bool
}

// IsMariaDB reports whether VERSION() and @@version_comment are MariaDB's:
// MariaDB puts "MariaDB" in its version ("10.11.6-MariaDB-0+deb12u1") and
// usually in its comment ("mariadb.org binary distribution"); MySQL has
// neither ("8.4.3", "MySQL Community Server - GPL").
func IsMariaDB(version, comment string) bool {
	return strings.Contains(strings.ToLower(version), "mariadb") || strings.Contains(strings.ToLower(comment), "mariadb")
}

func detectServer(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}) (Server, error) {
	var s Server
	if err := q.QueryRowContext(ctx, "SELECT VERSION(), @@version_comment").Scan(&s.Version, &s.Comment); err != nil {
		return Server{}, err
	}
	s.MariaDB = IsMariaDB(s.Version, s.Comment)
	return s, nil
}

// GormTrapWant is the RowsAffected that gorm's
// Clauses(clause.OnConflict{DoNothing: true}).Create reports for a key
// that already exists, with the driver's default dialect: on MariaDB gorm
// appends RETURNING and counts the returned row, 1 (docs/EXPERIMENTS.md, 4);
// on MySQL the statement is INSERT … ON DUPLICATE KEY UPDATE k = k, which
// reports 0 for an unchanged row without clientFoundRows.
func GormTrapWant(mariaDB bool) int64 {
	if mariaDB {
		return 1
	}
	return 0
}
