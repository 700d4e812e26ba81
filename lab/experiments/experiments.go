package experiments

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-sql-driver/mysql"
)

// Experiment names, as given to Run and to `go run ./lab/cmd/experiments`.
const (
	NameCheckThenInsert = "check-then-insert"
	NameCommitOrder     = "commit-order"
	NameWindow          = "window"
	NameClaimStyles     = "claim-styles"
	NamePartition       = "partition-by-day"
	NameKeyLayout       = "key-layout"
)

// experiment is one experiment at full size, its result rendered as a
// Markdown table.
type experiment struct {
	name string
	run  func(ctx context.Context, dsn string, logf func(string, ...any)) (string, error)
}

// catalog is every experiment, in the order Run runs them.
var catalog = []experiment{
	{NameCheckThenInsert, rendered(RunCheckThenInsert, DefaultCheckThenInsert)},
	{NameCommitOrder, rendered(RunCommitOrder, DefaultCommitOrder)},
	{NameWindow, rendered(RunWindow, DefaultWindow)},
	{NameClaimStyles, rendered(RunClaimStyles, DefaultClaimStyles)},
	{NamePartition, rendered(RunPartition, DefaultPartition)},
	{NameKeyLayout, rendered(RunKeyLayout, DefaultKeyLayout)},
}

// rendered is run with its default configuration, its result rendered.
func rendered[C any, R interface{ Markdown() string }](run func(context.Context, string, C, func(string, ...any)) (R, error),
	defaults func() C) func(context.Context, string, func(string, ...any)) (string, error) {
	return func(ctx context.Context, dsn string, logf func(string, ...any)) (string, error) {
		r, err := run(ctx, dsn, defaults(), logf)
		if err != nil {
			return "", err
		}
		return r.Markdown(), nil
	}
}

// Names lists the experiments in the order Run runs them.
func Names() []string {
	names := make([]string, len(catalog))
	for i, e := range catalog {
		names[i] = e.name
	}
	return names
}

// Run runs the named experiments (all of them when which is empty) at full
// size against the server of dsn (its database name is ignored: every
// experiment makes its own scratch database) and writes each one's Markdown
// table to w. logf receives progress lines; nil discards them.
func Run(ctx context.Context, dsn string, which []string, w io.Writer, logf func(string, ...any)) error {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if len(which) == 0 {
		which = Names()
	}
	for _, name := range which {
		if !slices.Contains(Names(), name) {
			return fmt.Errorf("unknown experiment %q (known: %s)", name, strings.Join(Names(), ", "))
		}
	}
	env, err := environment(ctx, dsn)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s\n\n", env)
	for i, name := range which {
		if i > 0 {
			fmt.Fprintln(w)
		}
		start := time.Now()
		logf("experiment %s: start", name)
		e := catalog[slices.IndexFunc(catalog, func(e experiment) bool { return e.name == name })]
		table, err := e.run(ctx, dsn, logf)
		if err != nil {
			return fmt.Errorf("experiment %s: %w", name, err)
		}
		fmt.Fprintf(w, "### %s\n\n%s", name, table)
		logf("experiment %s: done in %.1f s", name, time.Since(start).Seconds())
	}
	return nil
}

// environment describes where the tables are measured: server version,
// client toolchain and CPUs.
func environment(ctx context.Context, dsn string) (string, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "", fmt.Errorf("parse dsn: %w", err)
	}
	cfg.DBName = ""
	conn, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return "", err
	}
	defer conn.Close()
	var version string
	if err := conn.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		return "", fmt.Errorf("server %s: %w", cfg.Addr, err)
	}
	return fmt.Sprintf("Measured on %s (server %s), client %s %s/%s, %d CPUs, %s.", cfg.Addr, version,
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), time.Now().UTC().Format("2006-01-02 15:04 MST")), nil
}

// table renders a Markdown pipe table with padded columns. Columns whose
// header starts with '>' are right-aligned (the '>' is dropped).
type table struct {
	header []string
	right  []bool
	rows   [][]string
}

func newTable(header ...string) *table {
	t := &table{}
	for _, h := range header {
		r := strings.HasPrefix(h, ">")
		t.header = append(t.header, strings.TrimPrefix(h, ">"))
		t.right = append(t.right, r)
	}
	return t
}

func (t *table) add(cells ...any) {
	row := make([]string, len(t.header))
	for i := range row {
		if i < len(cells) {
			row[i] = fmt.Sprint(cells[i])
		}
	}
	t.rows = append(t.rows, row)
}

func (t *table) String() string {
	width := make([]int, len(t.header))
	for i, h := range t.header {
		width[i] = max(3, utf8.RuneCountInString(h))
	}
	for _, r := range t.rows {
		for i, c := range r {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	line := func(cells []string) {
		b.WriteString("|")
		for i, c := range cells {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if t.right[i] {
				b.WriteString(" " + pad + c + " |")
			} else {
				b.WriteString(" " + c + pad + " |")
			}
		}
		b.WriteString("\n")
	}
	line(t.header)
	b.WriteString("|")
	for i := range t.header {
		if t.right[i] {
			b.WriteString(" " + strings.Repeat("-", width[i]-1) + ": |")
		} else {
			b.WriteString(" " + strings.Repeat("-", width[i]) + " |")
		}
	}
	b.WriteString("\n")
	for _, r := range t.rows {
		line(r)
	}
	return b.String()
}

// seconds formats a duration as seconds with two decimals.
func seconds(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

// thousands formats n with comma separators.
func thousands(n int64) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return "-" + thousands(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
