package bench

import (
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestQuickSizes runs the sizes section and its partition cell at smoke
// sizes, on the two private servers it starts: every size seeded, every
// cell measured with the server's counters, purge and DROP PARTITION
// done, the plot written, the servers' files removed. Speed is not
// looked at.
func TestQuickSizes(t *testing.T) {
	plotPath := filepath.Join(t.TempDir(), "sizes.png")
	before, _ := filepath.Glob(filepath.Join(os.TempDir(), "paysvc-bench-sizes-*"))
	opts, rep, out := runQuick(t, "-quick", "-only", "sizes,partition", "-size-plot", plotPath)
	if len(rep.Sizes) != len(opts.Sizes) {
		t.Fatalf("%d sizes measured, want %d", len(rep.Sizes), len(opts.Sizes))
	}
	for i, p := range rep.Sizes {
		if p.Size != opts.Sizes[i] || len(p.Layouts) != 2 {
			t.Fatalf("size %d: %+v", i, p)
		}
		for _, lp := range p.Layouts {
			name := lp.Layout + " at " + thousands(int64(p.Size))
			// The cells add records of their own; purge takes some away.
			if lp.Records < int64(p.Size)-int64(opts.SizePurgeRows) || p.Size > 0 && !(lp.RecordBytes > 0) {
				t.Errorf("%s: %d records, %.1f B/record", name, lp.Records, lp.RecordBytes)
			}
			for _, table := range seededTables {
				if lp.Tables[table] <= 0 {
					t.Errorf("%s: no size for %s", name, table)
				}
			}
			if len(lp.Cells) != 4 {
				t.Fatalf("%s: %d cells, want orders and callbacks, raw and service", name, len(lp.Cells))
			}
			for _, c := range lp.Cells {
				if len(c.Cell.Rounds) != opts.Rounds || c.Cell.Errs != 0 || !(c.Cell.MedianRate > 0) || !(c.Cell.P99 > 0) {
					t.Errorf("%s %s %s: %d rounds, %d errors (first: %s), %v ops/s, p99 %v", name, c.Workload, c.Side,
						len(c.Cell.Rounds), c.Cell.Errs, c.Cell.FirstErr, c.Cell.MedianRate, c.Cell.P99)
				}
				// A private server: its counters see this cell alone.
				for _, counter := range []string{"Questions", "Innodb_buffer_pool_read_requests", "Handler_read_key"} {
					if !(c.PerOp[counter] > 0) {
						t.Errorf("%s %s %s: %s per request = %v", name, c.Workload, c.Side, counter, c.PerOp[counter])
					}
				}
				if _, ok := c.PerOp["Innodb_buffer_pool_reads"]; !ok {
					t.Errorf("%s %s %s: no Innodb_buffer_pool_reads", name, c.Workload, c.Side)
				}
			}
			switch pr := lp.Purge; {
			case p.Size == 0 && pr != nil:
				t.Errorf("%s: purged an empty table", name)
			case p.Size > 0 && (pr == nil || pr.Deleted != int64(opts.SizePurgeRows) || pr.WriterErrs != 0 || pr.PurgeOps == 0):
				t.Errorf("%s: purge %+v, want %d rows deleted", name, pr, opts.SizePurgeRows)
			}
		}
		// The cells of the size before added records of their own, and
		// the first size is 0: at least the business rows were seeded.
		if p.Size > 0 && p.Layouts[0].SeedRows < 4*int64(p.Size/2) {
			t.Errorf("size %d: seeded %d rows, want the records missing and four tables of half as many", p.Size, p.Layouts[0].SeedRows)
		}
	}
	part := rep.Partition
	if part == nil {
		t.Fatal("no partition result")
	}
	perDay := int64(opts.PartitionRows / opts.PartitionDays)
	if part.Rows != int64(opts.PartitionRows) || part.Drop.Deleted < perDay-1 || part.Drop.Deleted > perDay+1 ||
		part.Delete.Deleted != part.Drop.Deleted || part.Drop.PurgeOps == 0 || part.Delete.PurgeOps == 0 {
		t.Errorf("partition: %+v", part)
	}
	f, err := os.Open(plotPath)
	if err != nil {
		t.Fatalf("plot: %v", err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil || img.Bounds().Dx() < 500 {
		t.Errorf("plot %s: %v, %v", plotPath, err, img)
	}
	if !strings.Contains(out, "| records | layout |") {
		t.Error("no size table printed")
	}
	after, _ := filepath.Glob(filepath.Join(os.TempDir(), "paysvc-bench-sizes-*"))
	if len(after) > len(before) {
		t.Errorf("server directories left behind: %v (before: %v)", after, before)
	}
}
