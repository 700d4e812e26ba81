package bench

import (
	"fmt"
	"image/color"
	"io"
	"os"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// printSizePoint writes one size's figures as they are measured.
func printSizePoint(w io.Writer, p SizePoint) {
	fmt.Fprintf(w, "\nsize %s records (load average %s at the start, %s at the end)\n", thousands(int64(p.Size)), p.LoadStart, p.LoadEnd)
	for _, lp := range p.Layouts {
		fmt.Fprintf(w, "  %-19s %s records, %.1f B/record (%.1f of it secondary indexes); all five tables %.0f MiB",
			lp.Layout, thousands(lp.Records), lp.RecordBytes, lp.RecordIndexBytes, mb(totalBytes(lp)))
		if lp.SeedRows > 0 {
			fmt.Fprintf(w, "; seeded %s rows in %.1fs (%.0f rows/s)", thousands(lp.SeedRows), lp.SeedTime.Seconds(),
				float64(lp.SeedRows)/lp.SeedTime.Seconds())
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "  %-9s %-7s %-19s %9s %8s %8s %10s %11s %12s %9s %8s %10s%s\n", "workload", "side", "layout",
		"ops/s", "p50 ms", "p99 ms", "rows read", "pages read", "page reqs", "flushed", "queries", "lock waits", "   (per request)")
	for _, c := range cellsInOrder(p) {
		fmt.Fprintf(w, "  %-9s %-7s %-19s %9.1f %8s %8s %10.1f %11.3f %12.1f %9.3f %8.2f %10.4f%s\n", c.Workload, c.Side, c.layout,
			c.Cell.MedianRate, ms(c.Cell.P50), ms(c.Cell.P99), c.rowsRead(), c.PerOp["Innodb_buffer_pool_reads"],
			c.PerOp["Innodb_buffer_pool_read_requests"], c.PerOp["Innodb_buffer_pool_pages_flushed"], c.PerOp["Questions"], c.PerOp["Innodb_row_lock_waits"], errNote(c.Cell))
	}
	for _, lp := range p.Layouts {
		if pr := lp.Purge; pr != nil {
			fmt.Fprintf(w, "  purge %-19s %s rows in %.2fs (%.0f rows/s, batches of %d resting 4× each); writer p99 %sms → %sms during (%.2f×), max %sms\n",
				lp.Layout, thousands(pr.Deleted), pr.PurgeTime.Seconds(), pr.RowsPerSecond, pr.Batch,
				ms(pr.BaselineP99), ms(pr.PurgeP99), pr.P99Ratio, ms(pr.PurgeMax))
		}
	}
}

// layoutCell is a cell with its layout's name.
type layoutCell struct {
	SizeCell
	layout string
}

// cellsInOrder lists a size's cells workload by workload, side by side,
// the layouts next to each other.
func cellsInOrder(p SizePoint) []layoutCell {
	var out []layoutCell
	if len(p.Layouts) == 0 {
		return nil
	}
	for i := range p.Layouts[0].Cells {
		for _, lp := range p.Layouts {
			if i < len(lp.Cells) {
				out = append(out, layoutCell{SizeCell: lp.Cells[i], layout: lp.Layout})
			}
		}
	}
	return out
}

func (lp LayoutPoint) cell(workload, side string) (SizeCell, bool) {
	for _, c := range lp.Cells {
		if c.Workload == workload && c.Side == side {
			return c, true
		}
	}
	return SizeCell{}, false
}

func totalBytes(lp LayoutPoint) int64 {
	var t int64
	for _, v := range lp.Tables {
		t += v
	}
	return t
}

// thousands formats n with comma separators.
func thousands(n int64) string {
	if n < 0 {
		return "-" + thousands(-n)
	}
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// printSizes writes the section's table: one row per size and layout.
func printSizes(w io.Writer, pts []SizePoint) {
	fmt.Fprintf(w, "\n  cells: median ops/s and p99 ms; per request of the service: pages read from disk (Innodb_buffer_pool_reads), rows read (Handler_read_*);\n  counted: records after the cells; B/record: idempotency_records' data + indexes per record\n\n")
	fmt.Fprintln(w, "| records | layout | counted | orders svc | orders raw | callbacks svc | callbacks raw | disk pages / order, callback (svc) | rows read / order, callback (svc) | B/record | all tables MiB | purge rows/s | writer p99 ms, during purge |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, p := range pts {
		for _, lp := range p.Layouts {
			cellText := func(workload, side string) string {
				c, ok := lp.cell(workload, side)
				if !ok {
					return "—"
				}
				return fmt.Sprintf("%.0f/s %s", c.Cell.MedianRate, ms(c.Cell.P99))
			}
			perReq := func(format string, v func(SizeCell) float64) string {
				var parts []string
				for _, wl := range []string{SectionOrders, SectionCallbacks} {
					c, _ := lp.cell(wl, "service")
					parts = append(parts, fmt.Sprintf(format, v(c)))
				}
				return strings.Join(parts, ", ")
			}
			purge := "—"
			writers := "—"
			if pr := lp.Purge; pr != nil {
				purge = fmt.Sprintf("%.0f", pr.RowsPerSecond)
				writers = fmt.Sprintf("%s → %s", ms(pr.BaselineP99), ms(pr.PurgeP99))
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %.0f | %.0f | %s | %s |\n", thousands(int64(p.Size)), lp.Layout, thousands(lp.Records),
				cellText(SectionOrders, "service"), cellText(SectionOrders, "raw"), cellText(SectionCallbacks, "service"),
				cellText(SectionCallbacks, "raw"), perReq("%.2f", func(c SizeCell) float64 { return c.PerOp["Innodb_buffer_pool_reads"] }), perReq("%.1f", SizeCell.rowsRead),
				lp.RecordBytes, mb(totalBytes(lp)), purge, writers)
		}
	}
}

func printPartition(w io.Writer, r PartitionResult) {
	fmt.Fprintf(w, "\n== (l) purge of a day: DROP PARTITION of a table partitioned by day vs the batched DELETE of idempotency_records ==\n")
	fmt.Fprintf(w, "  %s rows over %d daily partitions (seeded in %.1fs); idempotency_records %s rows; one writer inserting records into the table purged\n",
		thousands(r.Rows), r.Days, r.SeedTime.Seconds(), thousands(r.Records))
	fmt.Fprintf(w, "  %-38s %10s %10s %12s %12s %10s\n", "purge", "rows", "seconds", "p99 before", "p99 during", "max during")
	for _, x := range []struct {
		name string
		pr   PurgeRound
	}{{"ALTER TABLE … DROP PARTITION (oldest day)", r.Drop}, {"batched DELETE (the service's purge)", r.Delete}} {
		fmt.Fprintf(w, "  %-38s %10s %10.3f %12s %12s %10s\n", x.name, thousands(x.pr.Deleted), x.pr.PurgeTime.Seconds(),
			ms(x.pr.BaselineP99), ms(x.pr.PurgeP99), ms(x.pr.PurgeMax))
	}
}

// plotSizes draws throughput and p99 against size, one line per workload,
// side and layout, to a PNG at path.
func plotSizes(pts []SizePoint, path string, m Machine, o Options) error {
	tput, p99 := plot.New(), plot.New()
	tput.Title.Text = "throughput"
	tput.Y.Label.Text = "requests/s"
	p99.Title.Text = "p99 latency"
	p99.Y.Label.Text = "ms"
	for _, p := range []*plot.Plot{tput, p99} {
		p.X.Label.Text = "idempotency records (millions); orders, payments, ledger entries, events: half as many each"
		p.X.Label.TextStyle.Font.Size = vg.Points(9)
		p.Add(plotter.NewGrid())
		p.Legend.Top = true
		p.Legend.Left = true
		p.Legend.TextStyle.Font.Size = vg.Points(8)
	}
	colors := map[string]color.Color{
		SectionOrders + layoutRandom: color.RGBA{R: 200, G: 40, B: 40, A: 255}, SectionOrders + layoutTime: color.RGBA{R: 30, G: 90, B: 200, A: 255},
		SectionCallbacks + layoutRandom: color.RGBA{R: 230, G: 140, B: 20, A: 255}, SectionCallbacks + layoutTime: color.RGBA{R: 20, G: 150, B: 90, A: 255},
	}
	for _, workload := range []string{SectionOrders, SectionCallbacks} {
		for _, side := range []string{"service", "raw"} {
			for li, layout := range []string{layoutRandom, layoutTime} {
				var xyT, xyP plotter.XYs
				for _, p := range pts {
					if li >= len(p.Layouts) {
						continue
					}
					if c, ok := p.Layouts[li].cell(workload, side); ok {
						x := float64(p.Size) / 1e6
						xyT = append(xyT, plotter.XY{X: x, Y: c.Cell.MedianRate})
						xyP = append(xyP, plotter.XY{X: x, Y: float64(c.Cell.P99) / 1e6})
					}
				}
				name := fmt.Sprintf("%s %s, %s", workload, side, layout)
				for _, target := range []struct {
					p  *plot.Plot
					xy plotter.XYs
				}{{tput, xyT}, {p99, xyP}} {
					l, s, err := plotter.NewLinePoints(target.xy)
					if err != nil {
						return err
					}
					l.Color, s.Color = colors[workload+layout], colors[workload+layout]
					l.Width = vg.Points(1.5)
					if side == "raw" {
						l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
						s.Shape = draw.BoxGlyph{}
					}
					target.p.Add(l, s)
					target.p.Legend.Add(name, l, s)
				}
			}
		}
	}
	tput.Y.Min, p99.Y.Min = 0, 0
	const width, height = 13 * vg.Inch, 5.5 * vg.Inch
	img := vgimg.New(width, height)
	dc := draw.New(img)
	title := fmt.Sprintf("paysvc, %d workers per cell, buffer pool %d MiB; %d CPUs, %s; load %s at the start",
		o.SizeWorkers, o.SizePoolMiB, m.NumCPU, m.DBVersion, m.LoadStart)
	dc.FillText(draw.TextStyle{Color: color.Black, Font: font.From(plot.DefaultFont, vg.Points(11)), Handler: plot.DefaultTextHandler},
		vg.Point{X: vg.Points(20), Y: height - vg.Points(16)}, title)
	body := draw.Crop(dc, 0, 0, 0, -vg.Points(24))
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Points(20), PadY: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(6), PadBottom: vg.Points(6)}
	canvases := plot.Align([][]*plot.Plot{{tput, p99}}, tiles, body)
	tput.Draw(canvases[0][0])
	p99.Draw(canvases[0][1])
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
