package experiments

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	gormmysql "gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/logger"

	"github.com/paysvc/paysvc/internal/db"
)

// ClaimStylesConfig sizes the claim-styles benchmark.
type ClaimStylesConfig struct {
	Claims int // claims per run, duplicates included
	// Distinct is the number of distinct keys among them; Claims-Distinct
	// claims repeat an earlier key (Claims/2: 50% duplicates).
	Distinct int
	Workers  int
	Runs     int // per style; styles are interleaved run by run
	Seed     uint64
	// Warmup claims per style before the measured runs (not reported).
	Warmup int
}

// DefaultClaimStyles: 20,000 claims, 50% duplicates, 4 workers, 5 runs.
func DefaultClaimStyles() ClaimStylesConfig {
	return ClaimStylesConfig{Claims: 20000, Distinct: 10000, Workers: 4, Runs: 5, Seed: 20261130, Warmup: 2000}
}

// ClaimStyle is one way to claim a key.
type ClaimStyle struct {
	Name  string
	claim func(ctx context.Context, conn *sql.Conn, key string) (bool, error)
}

// ClaimStyleResult is one style's runs.
type ClaimStyleResult struct {
	Style string
	Rates []float64 // claims per second, one per run, in run order
	// NewClaims and Rows are, per run, the claims the style reported as
	// new and the rows the table held afterwards; both must equal
	// Config.Distinct.
	NewClaims []int64
	Rows      []int64
}

// Median, Min and Max summarise Rates.
func (r ClaimStyleResult) Median() float64 { return median(r.Rates) }

// Min is the slowest run.
func (r ClaimStyleResult) Min() float64 { return slices.Min(r.Rates) }

// Max is the fastest run.
func (r ClaimStyleResult) Max() float64 { return slices.Max(r.Rates) }

// Spread is (max - min) / median.
func (r ClaimStyleResult) Spread() float64 { return (r.Max() - r.Min()) / r.Median() }

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// ClaimStylesResult holds every style, and the gorm trap check.
type ClaimStylesResult struct {
	Config ClaimStylesConfig
	Styles []ClaimStyleResult
	// GormTrap: RowsAffected that gorm's OnConflict{DoNothing} reports
	// for a key that already exists, with gorm's default MariaDB dialect
	// (RETURNING) and with DisableWithReturning (as db.Open sets it).
	GormTrapDefault, GormTrapDisabled int64
	GormTrapChecked                   bool
	// Server is the database server measured: the gorm trap depends on
	// it (GormTrapWant).
	Server Server
	// LoadBefore and LoadAfter are the host's 1-minute load average around
	// the measured runs ("" where /proc/loadavg is not readable): the
	// spreads mean little on a busy machine.
	LoadBefore, LoadAfter string
}

// Markdown renders the result.
func (r ClaimStylesResult) Markdown() string {
	t := newTable("claim style", ">median claims/s", ">min", ">max", ">spread (max−min)/median", ">new claims per run", ">rows per run")
	for _, s := range r.Styles {
		t.add(s.Style, fmt.Sprintf("%.0f", s.Median()), fmt.Sprintf("%.0f", s.Min()), fmt.Sprintf("%.0f", s.Max()),
			fmt.Sprintf("%.0f%%", 100*s.Spread()), sameOrList(s.NewClaims), sameOrList(s.Rows))
	}
	out := t.String() + fmt.Sprintf("\n%s claims per run (%s distinct keys, so %.0f%% duplicates, shuffled), %d workers on their own connections, "+
		"%d runs per style interleaved (the style order rotates each run), after a warm-up of %s claims per style; autocommit, raw SQL via database/sql, "+
		"interpolateParams=true.\n", thousands(int64(r.Config.Claims)), thousands(int64(r.Config.Distinct)),
		100*float64(r.Config.Claims-r.Config.Distinct)/float64(r.Config.Claims), r.Config.Workers, r.Config.Runs, thousands(int64(r.Config.Warmup)))
	if r.LoadBefore != "" {
		out += fmt.Sprintf("\nHost load average (1 min) before / after the measured runs: %s / %s.\n", r.LoadBefore, r.LoadAfter)
	}
	if r.GormTrapChecked {
		out += fmt.Sprintf("\nTrap check: gorm `Clauses(clause.OnConflict{DoNothing: true}).Create` of a key that already exists reports "+
			"RowsAffected = %d with gorm's default dialect (on MariaDB it appends RETURNING), %d with `DisableWithReturning: true` (db.Open); server %s (%s).\n",
			r.GormTrapDefault, r.GormTrapDisabled, r.Server.Version, r.Server.Comment)
	}
	return out
}

func sameOrList(xs []int64) string {
	for _, x := range xs {
		if x != xs[0] {
			return fmt.Sprint(xs)
		}
	}
	if len(xs) == 0 {
		return ""
	}
	return fmt.Sprintf("%s (all runs)", thousands(xs[0]))
}

// ClaimStyles are the three correct ways to claim a key: each reports a
// new claim exactly when this statement inserted the row.
var ClaimStyles = []ClaimStyle{
	{"INSERT IGNORE (RowsAffected 1/0)", func(ctx context.Context, conn *sql.Conn, key string) (bool, error) {
		res, err := conn.ExecContext(ctx, "INSERT IGNORE INTO claims (k, created_at) VALUES (?, NOW(6))", key)
		return affectedOne(res, err)
	}},
	{"INSERT … ON DUPLICATE KEY UPDATE k = k (RowsAffected 1/0)", func(ctx context.Context, conn *sql.Conn, key string) (bool, error) {
		// Without clientFoundRows (db.Config leaves it off) a no-op update
		// counts 0; with it, 1, and every duplicate would look new.
		res, err := conn.ExecContext(ctx, "INSERT INTO claims (k, created_at) VALUES (?, NOW(6)) ON DUPLICATE KEY UPDATE k = k", key)
		return affectedOne(res, err)
	}},
	{"plain INSERT, 1062 = duplicate", func(ctx context.Context, conn *sql.Conn, key string) (bool, error) {
		_, err := conn.ExecContext(ctx, "INSERT INTO claims (k, created_at) VALUES (?, NOW(6))", key)
		if db.IsDuplicate(err) {
			return false, nil
		}
		return err == nil, err
	}},
}

func affectedOne(res sql.Result, err error) (bool, error) {
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, err
	}
	switch n {
	case 0:
		return false, nil
	case 1:
		return true, nil
	}
	return false, fmt.Errorf("RowsAffected = %d, want 0 or 1", n)
}

const claimsDDL = `CREATE TABLE claims (
  k          VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
  created_at DATETIME(6) NOT NULL
) ENGINE=InnoDB`

// RunClaimStyles measures the three styles on one scratch database.
func RunClaimStyles(ctx context.Context, serverDSN string, cfg ClaimStylesConfig, logf func(string, ...any)) (ClaimStylesResult, error) {
	res := ClaimStylesResult{Config: cfg}
	if cfg.Distinct <= 0 || cfg.Distinct > cfg.Claims || cfg.Workers <= 0 || cfg.Runs <= 0 {
		return res, fmt.Errorf("bad configuration %+v", cfg)
	}
	err := withScratch(ctx, serverDSN, "claims", func(s *scratch) error {
		if err := s.exec(ctx, claimsDDL); err != nil {
			return err
		}
		conns := make([]*sql.Conn, cfg.Workers)
		for i := range conns {
			c, err := s.sql.Conn(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			conns[i] = c
		}
		for i, st := range ClaimStyles {
			res.Styles = append(res.Styles, ClaimStyleResult{Style: st.Name})
			if cfg.Warmup > 0 {
				warm := workload(cfg.Warmup, max(1, cfg.Warmup/2), cfg.Seed+uint64(i)+1000)
				if _, _, _, err := claimRun(ctx, s, conns, st, warm); err != nil {
					return err
				}
			}
		}
		keys := workload(cfg.Claims, cfg.Distinct, cfg.Seed)
		res.LoadBefore = loadAverage()
		for run := range cfg.Runs {
			for j := range ClaimStyles {
				i := (j + run) % len(ClaimStyles)
				st := ClaimStyles[i]
				rate, newClaims, rows, err := claimRun(ctx, s, conns, st, keys)
				if err != nil {
					return fmt.Errorf("%s: %w", st.Name, err)
				}
				r := &res.Styles[i]
				r.Rates = append(r.Rates, rate)
				r.NewClaims = append(r.NewClaims, newClaims)
				r.Rows = append(r.Rows, rows)
				logf("    run %d/%d %-24.24s %6.0f claims/s (%d new)", run+1, cfg.Runs, st.Name, rate, newClaims)
			}
		}
		res.LoadAfter = loadAverage()
		res.GormTrapDefault, res.GormTrapDisabled, res.GormTrapChecked = gormTrap(ctx, s)
		server, err := detectServer(ctx, s.sql)
		if err != nil {
			return fmt.Errorf("server version: %w", err)
		}
		res.Server = server
		return nil
	})
	return res, err
}

// workload is claims keys over distinct values, every value at least once,
// shuffled with seed.
func workload(claims, distinct int, seed uint64) []string {
	keys := make([]string, claims)
	for i := range keys {
		keys[i] = fmt.Sprintf("order-3-%06d", i%distinct)
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	return keys
}

// claimRun empties the table, then has each worker claim its share of keys
// (worker w takes keys w, w+W, w+2W, ...), all released together.
func claimRun(ctx context.Context, s *scratch, conns []*sql.Conn, st ClaimStyle, keys []string) (rate float64, newClaims, rows int64, err error) {
	if err := s.exec(ctx, "TRUNCATE TABLE claims"); err != nil {
		return 0, 0, 0, err
	}
	workers := len(conns)
	counts := make([]int64, workers)
	errs := make([]error, workers)
	barrier := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-barrier
			for i := w; i < len(keys); i += workers {
				ok, err := st.claim(ctx, conns[w], keys[i])
				if err != nil {
					errs[w] = err
					return
				}
				if ok {
					counts[w]++
				}
			}
		}()
	}
	start := time.Now()
	close(barrier)
	wg.Wait()
	elapsed := time.Since(start)
	for w := range workers {
		if errs[w] != nil {
			return 0, 0, 0, errs[w]
		}
		newClaims += counts[w]
	}
	if rows, err = s.count(ctx, "SELECT COUNT(*) FROM claims"); err != nil {
		return 0, 0, 0, err
	}
	return float64(len(keys)) / elapsed.Seconds(), newClaims, rows, nil
}

// loadAverage is the 1-minute load average, or "" off Linux.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return ""
}

// trapClaim is the gorm model of the trap check: an auto-increment id, the
// column gorm wants back through RETURNING, and the unique key.
type trapClaim struct {
	ID        uint64 `gorm:"column:id;primaryKey;autoIncrement"`
	K         string `gorm:"column:k"`
	CreatedAt time.Time
}

func (trapClaim) TableName() string { return "trap_claims" }

const trapClaimsDDL = `CREATE TABLE trap_claims (
  id         BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  k          VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  created_at DATETIME(6) NOT NULL,
  UNIQUE KEY uk_trap_claims_k (k)
) ENGINE=InnoDB`

// gormTrap inserts one key twice through gorm's OnConflict{DoNothing},
// once with gorm's default MariaDB dialect and once as db.Open configures
// it, and returns the RowsAffected of the second (existing-key) insert.
// ok is false if the check could not run; it is a footnote, not a result.
func gormTrap(ctx context.Context, s *scratch) (withReturning, disabled int64, ok bool) {
	second := func(gdb *gorm.DB, key string) (int64, error) {
		for i := range 2 {
			r := gdb.WithContext(ctx).Clauses(clause.OnConflict{DoNothing: true}).Create(&trapClaim{K: key, CreatedAt: time.Now().UTC()})
			if r.Error != nil {
				return 0, r.Error
			}
			if i == 1 {
				return r.RowsAffected, nil
			}
		}
		return 0, nil
	}
	if err := s.exec(ctx, trapClaimsDDL); err != nil {
		return 0, 0, false
	}
	plain, err := gorm.Open(gormmysql.New(gormmysql.Config{DSNConfig: s.cfg}), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return 0, 0, false
	}
	defer db.Close(plain)
	if withReturning, err = second(plain, "trap-returning"); err != nil {
		return 0, 0, false
	}
	if disabled, err = second(s.gorm, "trap-disabled"); err != nil {
		return 0, 0, false
	}
	return withReturning, disabled, true
}
