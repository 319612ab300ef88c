package report

import (
	"fmt"
	"hash/fnv"
	"html/template"
	"math"
	"os"
	"path/filepath"
	"time"

	"github.com/jmcluster/jmcluster/jepsen-style/history"
)

// Timeline geometry.
const (
	svgWidth  = 1100
	labelW    = 110
	plotW     = svgWidth - labelW - 20
	rowH      = 26
	latencyH  = 160
	rowFaults = 0
	rowLeader = 1
	rowJob    = 2
)

type rect struct {
	X, Y, W, H float64
	Fill       string
	Title      string
	Label      string
}

type dot struct {
	X, Y  float64
	Fill  string
	Title string
}

type tick struct {
	X     float64
	Label string
}

type svgData struct {
	Width, Height   float64
	LabelW          float64
	Rows            []string
	RowY            []float64
	Rects           []rect
	Dots            []dot
	Ticks           []tick
	HealX           float64
	LatTop, LatBot  float64
	LatLabels       []tick
	PlotRight       float64
	AxisY           float64
	TicksBottomText float64
}

// timeline lays out faults, leaders, job states and latencies against wall time.
func (r *Report) timeline() svgData {
	start, end := r.Start, r.End
	if !end.After(start) {
		end = start.Add(time.Second)
	}
	span := end.Sub(start).Seconds()
	x := func(t time.Time) float64 {
		v := t.Sub(start).Seconds() / span
		return labelW + math.Max(0, math.Min(1, v))*plotW
	}
	d := svgData{Width: svgWidth, LabelW: labelW, Rows: []string{"faults", "leader", "stream job"}, PlotRight: labelW + plotW}
	for i := range d.Rows {
		d.RowY = append(d.RowY, float64(10+i*rowH))
	}
	rowY := func(i int) float64 { return d.RowY[i] + 2 }
	for _, f := range r.Faults {
		x0, x1 := x(f.Start), x(f.End)
		d.Rects = append(d.Rects, rect{X: x0, Y: rowY(rowFaults), W: math.Max(2, x1-x0), H: rowH - 6, Fill: color(f.Kind),
			Title: fmt.Sprintf("%s %v %s", f.Kind, f.Nodes, f.Error), Label: f.Kind})
	}
	for i, e := range r.Elections {
		next := end
		if i+1 < len(r.Elections) {
			next = r.Elections[i+1].Time
		}
		x0, x1 := x(e.Time), x(next)
		d.Rects = append(d.Rects, rect{X: x0, Y: rowY(rowLeader), W: math.Max(2, x1-x0), H: rowH - 6, Fill: color(e.Leader),
			Title: fmt.Sprintf("%s epoch %d from %s", e.Leader, e.Epoch, e.Time.Format("15:04:05.000")), Label: fmt.Sprintf("%s e%d", e.Leader, e.Epoch)})
	}
	for i, s := range r.JobStates {
		next := end
		if i+1 < len(r.JobStates) {
			next = r.JobStates[i+1].Time
		}
		x0, x1 := x(s.Time), x(next)
		d.Rects = append(d.Rects, rect{X: x0, Y: rowY(rowJob), W: math.Max(2, x1-x0), H: rowH - 6, Fill: statusColor(s.Status),
			Title: s.Status + " from " + s.Time.Format("15:04:05.000"), Label: shortStatus(s.Status)})
	}
	d.LatTop = float64(10 + len(d.Rows)*rowH + 10)
	d.LatBot = d.LatTop + latencyH
	maxMs := 1.0
	for _, l := range r.Latencies {
		maxMs = math.Max(maxMs, l.Ms)
	}
	logMax := math.Log10(maxMs + 1)
	for _, l := range r.Latencies {
		y := d.LatBot - math.Log10(l.Ms+1)/logMax*latencyH
		d.Dots = append(d.Dots, dot{X: x(l.Time), Y: y, Fill: outcomeColor(l.Type), Title: fmt.Sprintf("%s %s %.1f ms", l.F, l.Type, l.Ms)})
	}
	for _, ms := range []float64{1, 10, 100, 1000, 10000} {
		if ms <= maxMs*1.01 {
			d.LatLabels = append(d.LatLabels, tick{X: d.LatBot - math.Log10(ms+1)/logMax*latencyH, Label: fmt.Sprintf("%g ms", ms)})
		}
	}
	d.AxisY = d.LatBot + 4
	d.TicksBottomText = d.LatBot + 18
	step := niceStep(span)
	for s := 0.0; s <= span; s += step {
		d.Ticks = append(d.Ticks, tick{X: labelW + s/span*plotW, Label: fmt.Sprintf("%gs", s)})
	}
	if !r.HealAt.IsZero() {
		d.HealX = x(r.HealAt)
	}
	d.Height = d.LatBot + 30
	return d
}

func niceStep(span float64) float64 {
	for _, s := range []float64{1, 2, 5, 10, 15, 30, 60, 120, 300} {
		if span/s <= 12 {
			return s
		}
	}
	return 600
}

var palette = []string{"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"}

func color(key string) string {
	h := fnv.New32a()
	h.Write([]byte(key))
	return palette[int(h.Sum32())%len(palette)]
}

func statusColor(s string) string {
	switch s {
	case "JOB_STATUS_RUNNING":
		return "#59a14f"
	case "JOB_STATUS_RECONCILING":
		return "#edc948"
	case "JOB_STATUS_FAILING", "JOB_STATUS_FAILED", "JOB_STATUS_RESTARTING":
		return "#e15759"
	}
	return "#bab0ac"
}

func shortStatus(s string) string {
	const p = "JOB_STATUS_"
	if len(s) > len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}

func outcomeColor(t history.Type) string {
	switch t {
	case history.OK:
		return "#59a14f"
	case history.Fail:
		return "#f28e2b"
	}
	return "#e15759"
}

var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"ms":    func(d int64) string { return (time.Duration(d) * time.Millisecond).String() },
	"clock": func(t time.Time) string { return t.Format("15:04:05.000") },
	"since": func(a, b time.Time) string { return b.Sub(a).Round(time.Millisecond).String() },
}).Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>jepsen {{.R.RunID}}</title>
<style>
body{font-family:system-ui,sans-serif;margin:24px;color:#222}
table{border-collapse:collapse;margin:8px 0 16px}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;font-size:13px}
.pass{background:#dff0d8}.fail{background:#f2dede}.skipped{background:#eee}
h1 .pass,h1 .fail{padding:2px 10px;border-radius:4px}
svg text{font-size:11px;font-family:system-ui,sans-serif}
</style></head><body>
<h1>{{.R.Scenario}} · seed {{.R.Seed}} · {{if .R.Valid}}<span class="pass">valid</span>{{else}}<span class="fail">INVALID</span>{{end}}</h1>
<p>run <code>{{.R.RunID}}</code> from {{clock .R.Start}} to {{clock .R.End}} ({{since .R.Start .R.End}}){{if .R.Failpoints}} · failpoints: <b>{{.R.Failpoints}}</b>{{end}} · faults touched {{if .R.JMOnly}}only JMs{{else}}TMs too{{end}}</p>
<table><tr><th>elections</th><td>{{len .R.Elections}}</td><th>longest unavailability</th><td>{{ms .R.LongestUnavailability.Ms}}</td><th>time to healthy</th><td>{{ms .R.TimeToHealthyMs}}</td></tr></table>
<h2>Checkers</h2>
<table><tr><th>checker</th><th>verdict</th><th>summary</th><th>counts</th><th>problems</th></tr>
{{range .R.Checkers}}<tr class="{{.Verdict}}"><td>{{.Name}}</td><td>{{.Verdict}}</td><td>{{.Summary}}</td><td>{{range $k, $v := .Counts}}{{$k}}={{$v}} {{end}}</td><td>{{range .Problems}}{{.}}<br>{{end}}{{if .Truncated}}… {{.Truncated}} more{{end}}</td></tr>
{{end}}</table>
{{if .R.Visualization}}<p>Linearizability failed: <a href="{{.R.Visualization}}">porcupine visualization</a>.</p>{{end}}
<h2>Timeline</h2>
<svg xmlns="http://www.w3.org/2000/svg" width="{{.S.Width}}" height="{{.S.Height}}">
{{range $i, $name := .S.Rows}}<text x="4" y="{{index $.S.RowY $i}}" dy="16">{{$name}}</text>{{end}}
<text x="4" y="{{.S.LatTop}}" dy="12">latency (log)</text>
<line x1="{{.S.LabelW}}" x2="{{.S.PlotRight}}" y1="{{.S.AxisY}}" y2="{{.S.AxisY}}" stroke="#999"/>
{{range .S.Ticks}}<line x1="{{.X}}" x2="{{.X}}" y1="8" y2="{{$.S.AxisY}}" stroke="#eee"/><text x="{{.X}}" y="{{$.S.TicksBottomText}}" text-anchor="middle">{{.Label}}</text>{{end}}
{{range .S.LatLabels}}<text x="{{$.S.LabelW}}" y="{{.X}}" dx="-4" text-anchor="end">{{.Label}}</text><line x1="{{$.S.LabelW}}" x2="{{$.S.PlotRight}}" y1="{{.X}}" y2="{{.X}}" stroke="#f3f3f3"/>{{end}}
{{range .S.Rects}}<rect x="{{.X}}" y="{{.Y}}" width="{{.W}}" height="{{.H}}" fill="{{.Fill}}" opacity="0.85"><title>{{.Title}}</title></rect><text x="{{.X}}" y="{{.Y}}" dx="2" dy="14" fill="#111">{{.Label}}</text>{{end}}
{{range .S.Dots}}<circle cx="{{.X}}" cy="{{.Y}}" r="2" fill="{{.Fill}}"><title>{{.Title}}</title></circle>{{end}}
{{if .S.HealX}}<line x1="{{.S.HealX}}" x2="{{.S.HealX}}" y1="4" y2="{{.S.AxisY}}" stroke="#000" stroke-dasharray="4 3"/><text x="{{.S.HealX}}" y="8" dx="3">heal</text>{{end}}
</svg>
<p>Dots: green ok, orange fail, red info (indeterminate).</p>
<h2>Faults</h2>
<table><tr><th>#</th><th>kind</th><th>start</th><th>end</th><th>nodes</th><th>leader</th><th>affected TMs</th><th>detail</th><th>error</th></tr>
{{range .R.Faults}}<tr><td>{{.Index}}</td><td>{{.Kind}}</td><td>{{clock .Start}}</td><td>{{clock .End}}</td><td>{{.Nodes}}</td><td>{{.Leader}}</td><td>{{.AffectedTMs}}</td><td>{{.Detail}}</td><td>{{.Error}}</td></tr>
{{end}}</table>
<h2>Operations</h2>
<table><tr><th>f</th><th>outcomes</th></tr>{{range $f, $m := .R.OpsByOutcome}}<tr><td>{{$f}}</td><td>{{range $k, $v := $m}}{{$k}}={{$v}} {{end}}</td></tr>{{end}}</table>
<h2>Elections</h2>
<table><tr><th>time</th><th>leader</th><th>epoch</th></tr>{{range .R.Elections}}<tr><td>{{clock .Time}}</td><td>{{.Leader}}</td><td>{{.Epoch}}</td></tr>{{end}}</table>
<h2>Stalls</h2>
{{if .R.Stalls}}<table><tr><th>leader</th><th>epoch</th><th>commit / applied</th><th>last progress</th><th>detected</th><th>end</th><th>open ops</th><th>dumps</th><th>errors</th></tr>
{{range .R.Stalls}}<tr class="fail"><td>{{.Leader}}{{if not .LeaderAnswered}} (silent){{end}}</td><td>{{.Epoch}}</td><td>{{.Commit}} / {{.Applied}}</td><td>{{clock .Since}}</td><td>{{clock .Detected}}</td><td>{{if .End.IsZero}}run ended{{else}}{{clock .End}} ({{.EndedBy}}, {{since .Since .End}}){{end}}</td><td>{{.OpenOps}}</td><td>{{range .Dumps}}<a href="{{.}}">{{.}}</a><br>{{end}}</td><td>{{range .Errors}}{{.}}<br>{{end}}</td></tr>
{{end}}</table>{{else}}<p>None: the leader never stood still for the detector's threshold (10 s) while clients waited.</p>{{end}}
{{if .R.Notes}}<h2>Notes</h2><ul>{{range .R.Notes}}<li>{{.}}</li>{{end}}</ul>{{end}}
</body></html>
`))

// RenderHTML writes the report page to path.
func (r *Report) RenderHTML(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return page.Execute(f, struct {
		R *Report
		S svgData
	}{r, r.timeline()})
}

// Write writes report.json and report.html into dir.
func (r *Report) Write(dir string) error {
	if err := r.WriteJSON(dir); err != nil {
		return err
	}
	return r.RenderHTML(filepath.Join(dir, "report.html"))
}
