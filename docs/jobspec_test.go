package docs

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/jmcluster/jmcluster/graph"
	"github.com/jmcluster/jmcluster/operator"
	"github.com/jmcluster/jmcluster/transport/pb"
)

// jobSpecDoc is the reference of a job spec that TestJobSpecDocumentsEveryField keeps current.
const jobSpecDoc = "job-spec.md"

// mdSection is one heading of a markdown page and the lines up to the next heading (of any
// level), fenced code blocks included but never read as headings.
type mdSection struct {
	heading string
	names   []string // the back-quoted names of the heading
	lines   []string
}

func mdSections(doc string) []mdSection {
	var out []mdSection
	fenced := false
	for _, l := range strings.Split(doc, "\n") {
		if strings.HasPrefix(l, "```") {
			fenced = !fenced
		}
		if !fenced && strings.HasPrefix(l, "#") {
			h := strings.TrimSpace(strings.TrimLeft(l, "#"))
			out = append(out, mdSection{heading: h, names: quoted(h)})
			continue
		}
		if len(out) > 0 {
			out[len(out)-1].lines = append(out[len(out)-1].lines, l)
		}
	}
	return out
}

// sectionNaming returns the first section whose heading names name in back quotes.
func sectionNaming(secs []mdSection, name string) *mdSection {
	for i := range secs {
		if slices.Contains(secs[i].names, name) {
			return &secs[i]
		}
	}
	return nil
}

// row returns the cells of the table row of the section whose first cell is `name`, or nil.
func (s *mdSection) row(name string) []string {
	for _, l := range s.lines {
		if strings.HasPrefix(l, "| `"+name+"` |") {
			cells := strings.Split(strings.Trim(strings.TrimSpace(l), "|"), "|")
			for i := range cells {
				cells[i] = strings.TrimSpace(cells[i])
			}
			return cells
		}
	}
	return nil
}

// specMessages returns every message a spec can set, reached from root through its message
// fields, root first, each once; and the enums of their fields, each once.
func specMessages(root protoreflect.MessageDescriptor) ([]protoreflect.MessageDescriptor, []protoreflect.EnumDescriptor) {
	msgs := []protoreflect.MessageDescriptor{root}
	var enums []protoreflect.EnumDescriptor
	seen := map[protoreflect.FullName]bool{root.FullName(): true}
	for i := 0; i < len(msgs); i++ {
		fields := msgs[i].Fields()
		for j := 0; j < fields.Len(); j++ {
			f := fields.Get(j)
			if m := f.Message(); m != nil && !seen[m.FullName()] {
				seen[m.FullName()] = true
				msgs = append(msgs, m)
			}
			if e := f.Enum(); e != nil && !seen[e.FullName()] {
				seen[e.FullName()] = true
				enums = append(enums, e)
			}
		}
	}
	return msgs, enums
}

// jobSpecProblems returns what doc lacks of the messages and enums a spec can set from root:
// each message needs a section whose heading names it in back quotes, with a table row per
// field whose first cell is the field's name in back quotes; each enum alike, a row per value.
func jobSpecProblems(doc string, root protoreflect.MessageDescriptor) []string {
	secs := mdSections(doc)
	msgs, enums := specMessages(root)
	var ps []string
	for _, m := range msgs {
		s := sectionNaming(secs, string(m.Name()))
		if s == nil {
			ps = append(ps, fmt.Sprintf("message %s has no section in docs/%s: add a heading naming `%s` in back quotes (\"### `kind` (`%s`)\") with a table row per field",
				m.FullName(), jobSpecDoc, m.Name(), m.Name()))
			continue
		}
		fields := m.Fields()
		for j := 0; j < fields.Len(); j++ {
			f := fields.Get(j)
			if s.row(string(f.Name())) == nil {
				ps = append(ps, fmt.Sprintf("field %s.%s is not documented: add a row \"| `%s` | type | default (zero) | bounds | meaning |\" to the table under %q in docs/%s",
					m.Name(), f.Name(), f.Name(), s.heading, jobSpecDoc))
			}
		}
	}
	for _, e := range enums {
		s := sectionNaming(secs, string(e.Name()))
		if s == nil {
			ps = append(ps, fmt.Sprintf("enum %s has no section in docs/%s: add \"### `%s`\" under \"Enums\" with a table row per value",
				e.FullName(), jobSpecDoc, e.Name()))
			continue
		}
		values := e.Values()
		for j := 0; j < values.Len(); j++ {
			v := values.Get(j)
			if s.row(string(v.Name())) == nil {
				ps = append(ps, fmt.Sprintf("enum value %s.%s is not documented: add a row \"| `%s` | meaning |\" to the table under %q in docs/%s",
					e.Name(), v.Name(), v.Name(), s.heading, jobSpecDoc))
			}
		}
	}
	return ps
}

// deadLetterProblems returns the keys of the dead-letter JSON (operator.DeadLetter's json
// tags) that doc's section on operator.DeadLetter has no row for.
func deadLetterProblems(doc string) []string {
	const name = "operator.DeadLetter"
	s := sectionNaming(mdSections(doc), name)
	if s == nil {
		return []string{fmt.Sprintf("docs/%s has no section naming `%s`: add one with a row per key of the dead-letter JSON", jobSpecDoc, name)}
	}
	var ps []string
	t := reflect.TypeFor[operator.DeadLetter]()
	for i := 0; i < t.NumField(); i++ {
		key, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if key != "" && key != "-" && s.row(key) == nil {
			ps = append(ps, fmt.Sprintf("dead-letter key %q (operator.DeadLetter.%s) is not documented: add a row \"| `%s` | type | meaning |\" under %q in docs/%s",
				key, t.Field(i).Name, key, s.heading, jobSpecDoc))
		}
	}
	return ps
}

func readJobSpecDoc(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(jobSpecDoc)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestJobSpecDocumentsEveryField: docs/job-spec.md has a section per message a spec can set
// (from JobGraph down: JobVertex, JobEdge, Operator and every kind's message, EventTime,
// DeadLetters, RestartStrategy, CheckpointConfig, ProjectField, ...) with a row per field, a
// section per enum with a row per value, and a row per key of the dead-letter JSON.
func TestJobSpecDocumentsEveryField(t *testing.T) {
	root := (&pb.JobGraph{}).ProtoReflect().Descriptor()
	msgs, enums := specMessages(root)
	var reached []string
	for _, m := range msgs {
		reached = append(reached, string(m.Name()))
	}
	for _, e := range enums {
		reached = append(reached, string(e.Name()))
	}
	for _, want := range []string{"JobVertex", "JobEdge", "Operator", "EventTime", "DeadLetters", "RestartStrategy",
		"CheckpointConfig", "ProjectField", "WindowOperator", "KeyBySumOperator", "WindowKind", "TimeFormat", "JobType"} {
		if !slices.Contains(reached, want) {
			t.Errorf("the walk from JobGraph does not reach %s; it reached %v", want, reached)
		}
	}
	doc := readJobSpecDoc(t)
	for _, p := range append(jobSpecProblems(doc, root), deadLetterProblems(doc)...) {
		t.Error(p)
	}
}

// TestJobSpecOperatorTableMatchesTheCatalogue: the operator table names each kind of the
// catalogue with its role and whether it can send dead letters.
func TestJobSpecOperatorTableMatchesTheCatalogue(t *testing.T) {
	s := sectionNaming(mdSections(readJobSpecDoc(t)), "Operator")
	if s == nil {
		t.Fatalf("docs/%s has no section naming `Operator`", jobSpecDoc)
	}
	for _, k := range graph.OperatorKinds() {
		cells := s.row(k.Name)
		if len(cells) < 3 {
			t.Errorf("operator kind %s: no row \"| `%s` | role | dead letters | configuration |\" under %q", k.Name, k.Name, s.heading)
			continue
		}
		if cells[1] != k.Role.String() {
			t.Errorf("operator kind %s: the table says role %q, the catalogue %q", k.Name, cells[1], k.Role)
		}
		want := "no"
		switch {
		case k.DeadLetters(&pb.Operator{}):
			want = "yes"
		case k.Role == graph.RoleSource:
			want = "with `event_time.time_path`"
		}
		if cells[2] != want {
			t.Errorf("operator kind %s: the table says dead letters %q, the catalogue %q", k.Name, cells[2], want)
		}
	}
}

// specSnippetTypes are what a JSON block of the page may be: a message of a spec, or (a
// block opening with a quoted key) a fragment of a JobGraph.
var specSnippetTypes = []proto.Message{&pb.JobGraph{}, &pb.JobVertex{}, &pb.JobEdge{}, &pb.Operator{}}

// TestJobSpecSnippetsDecode: every JSON block of the page decodes as jmnode decodes a spec
// (no unknown field), as a JobGraph (or a fragment of one), a vertex, an edge or an operator,
// or else as a dead letter with no unknown key; a whole job also passes JobGraph validation.
func TestJobSpecSnippetsDecode(t *testing.T) {
	blocks := regexp.MustCompile("(?s)```json\n(.*?)```").FindAllStringSubmatch(readJobSpecDoc(t), -1)
	if len(blocks) < 10 {
		t.Fatalf("docs/%s: %d JSON blocks, expected a snippet per kind", jobSpecDoc, len(blocks))
	}
	for _, b := range blocks {
		text := strings.TrimSpace(b[1])
		if strings.HasPrefix(text, `"`) {
			text = "{" + text + "}"
		}
		var errs []string
		ok := false
		for _, m := range specSnippetTypes {
			m = m.ProtoReflect().New().Interface()
			err := protojson.Unmarshal([]byte(text), m)
			if err == nil {
				ok = true
				if jg, isJob := m.(*pb.JobGraph); isJob && len(jg.Vertices) > 0 {
					if err := graph.Validate(jg, graph.DefaultLimits()); err != nil {
						t.Errorf("the job of this block is invalid: %v\n%s", err, text)
					}
				}
				break
			}
			errs = append(errs, fmt.Sprintf("%T: %v", m, err))
		}
		if !ok {
			dec := json.NewDecoder(bytes.NewReader([]byte(text)))
			dec.DisallowUnknownFields()
			var d operator.DeadLetter
			if err := dec.Decode(&d); err != nil {
				t.Errorf("a JSON block of docs/%s is neither a spec's message nor a dead letter:\n%s\n%s; operator.DeadLetter: %v", jobSpecDoc, text, strings.Join(errs, "\n"), err)
			}
		}
	}
}

// TestJobSpecLinksResolve: every link to an anchor of the page names one of its headings
// (GitHub's anchors: lower case, spaces to hyphens, other punctuation dropped).
func TestJobSpecLinksResolve(t *testing.T) {
	doc := readJobSpecDoc(t)
	anchors := map[string]bool{}
	for _, s := range mdSections(doc) {
		a := strings.Map(func(r rune) rune {
			switch {
			case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
				return r
			case r >= 'A' && r <= 'Z':
				return r + 'a' - 'A'
			case r == ' ':
				return '-'
			}
			return -1
		}, s.heading)
		anchors[a] = true
	}
	for _, m := range regexp.MustCompile(`\]\(#([^)]*)\)`).FindAllStringSubmatch(doc, -1) {
		if !anchors[m[1]] {
			t.Errorf("docs/%s links to #%s: no heading has that anchor", jobSpecDoc, m[1])
		}
	}
}

// TestJobSpecCheckerNamesWhatIsMissing: the checker of TestJobSpecDocumentsEveryField on
// copies of the page with one line removed or changed names the message, field or value and
// where to add it; a field named only in another row or section does not count.
func TestJobSpecCheckerNamesWhatIsMissing(t *testing.T) {
	doc := readJobSpecDoc(t)
	root := (&pb.JobGraph{}).ProtoReflect().Descriptor()
	// What the page itself lacks is TestJobSpecDocumentsEveryField's to report; here only the
	// problems a change adds count.
	base := jobSpecProblems(doc, root)
	drop := func(prefix string) string {
		var out []string
		n := 0
		for _, l := range strings.Split(doc, "\n") {
			if strings.HasPrefix(l, prefix) {
				n++
				continue
			}
			out = append(out, l)
		}
		if n == 0 {
			t.Fatalf("no line of the page starts with %q", prefix)
		}
		return strings.Join(out, "\n")
	}
	for _, c := range []struct {
		name string
		doc  string
		want []string
	}{
		{"a field's row removed (size_ms is still named in the slide_ms row)",
			drop("| `size_ms` |"),
			[]string{"WindowOperator.size_ms is not documented", "| `size_ms` |", "under \"`window` (`WindowOperator`)\""}},
		{"a job field's row removed",
			drop("| `dead_letters` | [`DeadLetters`]"),
			[]string{"JobGraph.dead_letters is not documented", "The job (`JobGraph`)"}},
		{"an EventTime field's row removed",
			drop("| `idle_timeout_ms` |"),
			[]string{"EventTime.idle_timeout_ms is not documented", "Event time (`EventTime`)"}},
		{"a kind's heading no longer names its message",
			strings.Replace(doc, "### `json_project` (`JsonProject`)", "### `json_project`", 1),
			[]string{"message jmcluster.v1.JsonProject has no section", "`JsonProject`"}},
		{"an enum value's row removed",
			drop("| `WINDOW_KIND_SESSION` |"),
			[]string{"enum value WindowKind.WINDOW_KIND_SESSION is not documented", "under \"`WindowKind`\""}},
		{"an enum's section removed",
			strings.Replace(doc, "### `CompareOp`", "### Comparisons", 1),
			[]string{"enum jmcluster.v1.CompareOp has no section"}},
	} {
		ps := slices.DeleteFunc(jobSpecProblems(c.doc, root), func(p string) bool { return slices.Contains(base, p) })
		if len(ps) != 1 {
			t.Errorf("%s: want one problem, got %d: %q", c.name, len(ps), ps)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(ps[0], w) {
				t.Errorf("%s: the problem %q does not say %q", c.name, ps[0], w)
			}
		}
	}
	dlBase := deadLetterProblems(doc)
	ps := slices.DeleteFunc(deadLetterProblems(strings.Replace(doc, "| `value_base64` |", "| value_base64 |", 1)),
		func(p string) bool { return slices.Contains(dlBase, p) })
	if len(ps) != 1 || !strings.Contains(ps[0], `"value_base64" (operator.DeadLetter.ValueBase64) is not documented`) {
		t.Errorf("a dead-letter key's row removed: got %q", ps)
	}
}
