package bench

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/paysvc/paysvc/internal/db"
	"github.com/paysvc/paysvc/internal/idempotency"
	"github.com/paysvc/paysvc/internal/orders"
)

// Section (d): bytes per idempotency record. COMPLETED records in the
// service's own format are inserted in arrival order (created_at rising,
// keys random as real txn ids and UUIDs are) into scratch tables made LIKE
// idempotency_records, then measured after ANALYZE TABLE, and again after
// a rebuild (OPTIMIZE TABLE) to show what page fill costs.

// StorageTarget is the goal in bytes per record.
const StorageTarget = 250

// recordKind is the kind of request a record remembers.
type recordKind int

const (
	callbackRecord recordKind = iota
	orderRecord
)

// StorageSize is one measurement of one table.
type StorageSize struct {
	DataLength, IndexLength int64
	TableRows               int64 // the engine's estimate, as information_schema reports it
	AvgRowLength            int64
	BytesPerRow             float64 // (data_length + index_length) / COUNT(*)
	DataPerRow, IndexPerRow float64
	// Pages of the clustered (PRIMARY) and the secondary index from
	// mysql.innodb_index_stats: all pages the index holds, and its leaf
	// pages.
	PKPages, PKLeafPages, SecPages, SecLeafPages int64
}

// innodbPage is the page size (@@innodb_page_size, 16 KiB by default).
const innodbPage = 16384

// leafFill is how full the leaf pages are with what recordBytes per row
// says the records take.
func (s StorageSize) leafFill(rows int64, pkRecord, secRecord float64) (pk, sec float64) {
	if s.PKLeafPages > 0 {
		pk = pkRecord * float64(rows) / float64(s.PKLeafPages*innodbPage)
	}
	if s.SecLeafPages > 0 {
		sec = secRecord * float64(rows) / float64(s.SecLeafPages*innodbPage)
	}
	return pk, sec
}

// Storage is the measurement of one kind of table.
type Storage struct {
	Name      string
	Rows      int64
	RowFormat string
	Grown     StorageSize // as inserted in arrival order
	Rebuilt   StorageSize // after OPTIMIZE TABLE (a recreate for InnoDB)
	Columns   []ColumnCost
	// Estimated is the sum of the column costs: the bytes of the records
	// themselves, leaf level, before page fill.
	Estimated float64
	Met       bool
}

// ColumnCost is what one column (or the record overhead) costs per row in
// the clustered and the secondary (idx_idempotency_expires) index.
type ColumnCost struct {
	Name                 string
	Clustered, Secondary float64
}

// recordGen makes records of the service's format in arrival order.
type recordGen struct {
	r     *rand.Rand
	codec *idempotency.Codec
	start time.Time
	gap   time.Duration
}

// row is one COMPLETED idempotency_records row, in column order.
type row struct {
	keyHash, requestHash []byte
	respStatus           int
	format               uint8
	response             []byte
	expiresAt            time.Time
}

// next is the i-th record of kind k to arrive: a payment callback's
// {"result":"applied",...} under a derived key, or an order's 201 with its
// Location under a UUID key, encoded as the engine encodes them.
func (g *recordGen) next(k recordKind, i int) (row, error) {
	created := g.start.Add(time.Duration(i) * g.gap).UTC().Truncate(time.Microsecond)
	orderNo := orders.NewOrderNo()
	var (
		scope, key string
		ttl        time.Duration
		resp       idempotency.Response
	)
	if k == callbackRecord {
		scope, key, ttl = callbackScope, callbackKey(txnID(g.r)), callbackTTL
		resp = idempotency.Response{Status: 200, ContentType: "application/json", Body: callbackResponse(orderNo)}
	} else {
		scope, key, ttl = merchantScope, uuidV4(g.r), orderTTL
		resp = idempotency.Response{Status: 201, ContentType: "application/json", Location: "/v1/orders/" + orderNo,
			Body: orderResponse(orders.Order{OrderNo: orderNo, MerchantID: merchantID,
				MerchantOrderNo: randomBase62(g.r, 3), Status: orders.Created, Amount: amount, Currency: currency,
				Version: 1, CreatedAt: created, UpdatedAt: created})}
	}
	format, blob, err := g.codec.Encode(resp)
	if err != nil {
		return row{}, err
	}
	return row{keyHash: idempotency.KeyHash(scope, key), requestHash: randomHash(g.r)[:8], respStatus: resp.Status,
		format: format, response: blob, expiresAt: created.Add(ttl)}, nil
}

const insertColumns = `(key_hash, request_hash, status, response_status, response_format, response, expires_at)`

// insertRows inserts rows with multi-row INSERTs of chunk rows. The first
// row goes alone: MariaDB builds an index in one sorted pass when a
// statement inserts into an empty table, which would not be what a live
// table looks like.
func insertRows(ctx context.Context, raw *sql.DB, table string, n int, gen func(i int) (row, error)) error {
	const chunk = 1000
	for i := 0; i < n; {
		k := min(chunk, n-i)
		if i == 0 {
			k = 1
		}
		var sb strings.Builder
		sb.WriteString("INSERT INTO " + db.QuoteIdent(table) + " " + insertColumns + " VALUES ")
		args := make([]any, 0, 7*k)
		for j := range k {
			if j > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString("(?, ?, ?, ?, ?, ?, ?)")
			r, err := gen(i + j)
			if err != nil {
				return err
			}
			args = append(args, r.keyHash, r.requestHash, statusCompleted, r.respStatus, r.format, r.response, r.expiresAt)
		}
		if _, err := raw.ExecContext(ctx, sb.String(), args...); err != nil {
			return fmt.Errorf("insert into %s: %w", table, err)
		}
		i += k
	}
	return nil
}

func (b *bench) storage(ctx context.Context, raw *sql.DB) ([]Storage, error) {
	n := b.opts.StorageRows
	variants := []struct {
		name string
		kind func(i int) recordKind
	}{
		{"callback-only", func(int) recordKind { return callbackRecord }},
		{"order-only", func(int) recordKind { return orderRecord }},
		{"mixed 1:1", func(i int) recordKind { return recordKind(i % 2) }},
	}
	var out []Storage
	for _, v := range variants {
		table := "bench_storage_" + strings.NewReplacer("-", "_", " ", "_", ":", "_").Replace(v.name)
		start := time.Now()
		s, err := b.measureStorage(ctx, raw, table, v.name, n, v.kind)
		if err != nil {
			return out, err
		}
		fmt.Fprintf(b.stderr, "storage %s: %d rows, %.1f B/row grown, %.1f B/row rebuilt (%.1fs)\n",
			v.name, s.Rows, s.Grown.BytesPerRow, s.Rebuilt.BytesPerRow, time.Since(start).Seconds())
		out = append(out, s)
	}
	return out, nil
}

func (b *bench) measureStorage(ctx context.Context, raw *sql.DB, table, name string, n int, kind func(int) recordKind) (Storage, error) {
	q := db.QuoteIdent(table)
	if _, err := raw.ExecContext(ctx, "DROP TABLE IF EXISTS "+q); err != nil {
		return Storage{}, err
	}
	if _, err := raw.ExecContext(ctx, "CREATE TABLE "+q+" LIKE idempotency_records"); err != nil {
		return Storage{}, err
	}
	defer func() { _, _ = raw.ExecContext(context.WithoutCancel(ctx), "DROP TABLE IF EXISTS "+q) }()

	// Arrival over the last n × 10 ms, ending now.
	gap := 10 * time.Millisecond
	g := &recordGen{r: newRand(), codec: idempotency.NewCodec(), start: time.Now().Add(-time.Duration(n) * gap), gap: gap}
	if err := insertRows(ctx, raw, table, n, func(i int) (row, error) { return g.next(kind(i), i) }); err != nil {
		return Storage{}, err
	}
	s := Storage{Name: name}
	if err := raw.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+q).Scan(&s.Rows); err != nil {
		return s, err
	}
	var err error
	if s.Grown, s.RowFormat, err = tableSize(ctx, raw, table, "ANALYZE", s.Rows); err != nil {
		return s, err
	}
	if s.Columns, err = columnCosts(ctx, raw, table); err != nil {
		return s, err
	}
	for _, c := range s.Columns {
		s.Estimated += c.Clustered + c.Secondary
	}
	if s.Rebuilt, _, err = tableSize(ctx, raw, table, "OPTIMIZE", s.Rows); err != nil {
		return s, err
	}
	s.Met = s.Grown.BytesPerRow <= StorageTarget
	return s, nil
}

// tableSize runs ANALYZE TABLE or OPTIMIZE TABLE (which for InnoDB
// recreates and analyzes) and reads the sizes information_schema reports.
func tableSize(ctx context.Context, raw *sql.DB, table, stmt string, rows int64) (StorageSize, string, error) {
	// Both statements answer with a result set; a connection must read it.
	rs, err := raw.QueryContext(ctx, stmt+" TABLE "+db.QuoteIdent(table))
	if err != nil {
		return StorageSize{}, "", fmt.Errorf("%s %s: %w", stmt, table, err)
	}
	for rs.Next() {
	}
	if err := rs.Close(); err != nil {
		return StorageSize{}, "", err
	}
	if stmt != "ANALYZE" {
		// OPTIMIZE analyzes too, but say it outright.
		if err := drain(ctx, raw, "ANALYZE TABLE "+db.QuoteIdent(table)); err != nil {
			return StorageSize{}, "", err
		}
	}
	var (
		s      StorageSize
		format string
	)
	err = raw.QueryRowContext(ctx, `SELECT DATA_LENGTH, INDEX_LENGTH, TABLE_ROWS, AVG_ROW_LENGTH, ROW_FORMAT
		FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?`, table).
		Scan(&s.DataLength, &s.IndexLength, &s.TableRows, &s.AvgRowLength, &format)
	if err != nil {
		return s, "", fmt.Errorf("size of %s: %w", table, err)
	}
	rs, err = raw.QueryContext(ctx, `SELECT index_name, stat_name, stat_value FROM mysql.innodb_index_stats
		WHERE database_name = DATABASE() AND table_name = ? AND stat_name IN ('size', 'n_leaf_pages')`, table)
	if err != nil {
		return s, "", fmt.Errorf("index stats of %s: %w", table, err)
	}
	for rs.Next() {
		var (
			index, stat string
			v           int64
		)
		if err := rs.Scan(&index, &stat, &v); err != nil {
			rs.Close()
			return s, "", err
		}
		switch {
		case index == "PRIMARY" && stat == "size":
			s.PKPages = v
		case index == "PRIMARY":
			s.PKLeafPages = v
		case stat == "size":
			s.SecPages = v
		default:
			s.SecLeafPages = v
		}
	}
	if err := rs.Close(); err != nil {
		return s, "", err
	}
	if rows > 0 {
		s.BytesPerRow = float64(s.DataLength+s.IndexLength) / float64(rows)
		s.DataPerRow = float64(s.DataLength) / float64(rows)
		s.IndexPerRow = float64(s.IndexLength) / float64(rows)
	}
	return s, format, nil
}

func drain(ctx context.Context, raw *sql.DB, query string) error {
	rs, err := raw.QueryContext(ctx, query)
	if err != nil {
		return fmt.Errorf("%s: %w", query, err)
	}
	for rs.Next() {
	}
	return rs.Close()
}

// columnCosts estimates each column's bytes per row from the InnoDB
// COMPACT/DYNAMIC record format: a 5-byte record header, one length byte
// for the response BLOB (two from 128 bytes on), a 1-byte NULL bitmap (5
// nullable columns), the 13 bytes of DB_TRX_ID and DB_ROLL_PTR in the
// clustered record, NULLs free. The secondary index idx_idempotency_expires
// holds expires_at and the primary key key_hash with a 5-byte header.
// Lengths are the table's measured averages; fixed widths are MariaDB's
// (DATETIME(6) = 8 bytes).
func columnCosts(ctx context.Context, raw *sql.DB, table string) ([]ColumnCost, error) {
	var resp, respLong, statusN, formatN float64
	err := raw.QueryRowContext(ctx, `SELECT
		  AVG(COALESCE(LENGTH(response), 0)), AVG(COALESCE(LENGTH(response) >= 128, 0)),
		  AVG(response_status IS NOT NULL), AVG(response_format IS NOT NULL)
		FROM `+db.QuoteIdent(table)).
		Scan(&resp, &respLong, &statusN, &formatN)
	if err != nil {
		return nil, fmt.Errorf("column lengths of %s: %w", table, err)
	}
	return []ColumnCost{
		{Name: "record header (5) + length byte(s) + NULL bitmap (1)", Clustered: 5 + 1 + respLong + 1, Secondary: 5},
		{Name: "DB_TRX_ID + DB_ROLL_PTR", Clustered: 13},
		{Name: "key_hash BINARY(12) (PK)", Clustered: 12, Secondary: 12},
		{Name: "request_hash BINARY(8)", Clustered: 8},
		{Name: "status", Clustered: 1},
		{Name: "response_status", Clustered: 2 * statusN},
		{Name: "response_format", Clustered: 1 * formatN},
		{Name: "response (Location + body, deflated)", Clustered: resp},
		{Name: "expires_at DATETIME(6)", Clustered: 8, Secondary: 8},
	}, nil
}

// printStorage writes the storage table and the per-column estimate.
func printStorage(w io.Writer, ss []Storage) {
	fmt.Fprintf(w, "  %-14s %8s %9s %10s %10s %8s %8s %8s   %14s  %s\n",
		"table", "rows", "data MB", "index MB", "B/row", "data/row", "idx/row", "avg_row", "rebuilt B/row", "target ≤ 250")
	for _, s := range ss {
		fmt.Fprintf(w, "  %-14s %8d %9.2f %10.2f %10.1f %8.1f %8.1f %8d   %14.1f  %s\n",
			s.Name, s.Rows, mb(s.Grown.DataLength), mb(s.Grown.IndexLength), s.Grown.BytesPerRow,
			s.Grown.DataPerRow, s.Grown.IndexPerRow, s.Grown.AvgRowLength, s.Rebuilt.BytesPerRow, metMissed(s.Met))
	}
	if len(ss) == 0 {
		return
	}
	fmt.Fprintf(w, "\n  estimated bytes per row by column (clustered + secondary), row format %s:\n", ss[0].RowFormat)
	fmt.Fprintf(w, "  %-52s", "column")
	for _, s := range ss {
		fmt.Fprintf(w, " %16s", s.Name)
	}
	fmt.Fprintln(w)
	for i := range ss[0].Columns {
		fmt.Fprintf(w, "  %-52s", ss[0].Columns[i].Name)
		for _, s := range ss {
			c := s.Columns[i]
			fmt.Fprintf(w, " %16s", fmt.Sprintf("%.1f + %.1f", c.Clustered, c.Secondary))
		}
		fmt.Fprintln(w)
	}
	line := func(label string, f func(Storage) string) {
		fmt.Fprintf(w, "  %-52s", label)
		for _, s := range ss {
			fmt.Fprintf(w, " %16s", f(s))
		}
		fmt.Fprintln(w)
	}
	line("sum: the records themselves", func(s Storage) string { return fmt.Sprintf("%.1f", s.Estimated) })
	line("measured, as grown (B/row)", func(s Storage) string { return fmt.Sprintf("%.1f", s.Grown.BytesPerRow) })
	line("  of which page free space + page overhead", func(s Storage) string {
		return fmt.Sprintf("%.1f (%.0f%%)", s.Grown.BytesPerRow-s.Estimated, 100*(1-s.Estimated/s.Grown.BytesPerRow))
	})
	line("measured, rebuilt (B/row)", func(s Storage) string { return fmt.Sprintf("%.1f", s.Rebuilt.BytesPerRow) })
	fill := func(z func(Storage) StorageSize) func(Storage) string {
		return func(s Storage) string {
			pk, sec := z(s).leafFill(s.Rows, s.clustered(), s.secondary())
			return fmt.Sprintf("%.0f%% / %.0f%%", 100*pk, 100*sec)
		}
	}
	pages := func(z func(Storage) StorageSize) func(Storage) string {
		return func(s Storage) string {
			v := z(s)
			return fmt.Sprintf("%d/%d %d/%d", v.PKLeafPages, v.PKPages, v.SecLeafPages, v.SecPages)
		}
	}
	grown := func(s Storage) StorageSize { return s.Grown }
	rebuilt := func(s Storage) StorageSize { return s.Rebuilt }
	line("leaf fill PK / idx, as grown", fill(grown))
	line("leaf fill PK / idx, rebuilt", fill(rebuilt))
	line("pages leaf/all PK, idx, as grown", pages(grown))
	line("pages leaf/all PK, idx, rebuilt", pages(rebuilt))
}

// clustered and secondary are the estimated record bytes per row of each
// index.
func (s Storage) clustered() (n float64) {
	for _, c := range s.Columns {
		n += c.Clustered
	}
	return n
}

func (s Storage) secondary() (n float64) {
	for _, c := range s.Columns {
		n += c.Secondary
	}
	return n
}

func mb(n int64) float64 { return float64(n) / (1 << 20) }
