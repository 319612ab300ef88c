package operator

import (
	"fmt"
	"math"
	"math/bits"
	"sort"
	"strconv"

	"github.com/jmcluster/jmcluster/transport/pb"
)

func init() {
	register("event_generator", runtime{source: func(op *pb.Operator, _ Info) Source { return NewGenerator(op.GetEventGenerator()) }})
}

// Generator is the event_generator source: split s (one per subtask) emits events i = 0, 1,
// ... (count of them, or forever when count is 0), each a pure function of (seed, s, i), paced
// to rate_per_second. A split's position is the i of its next event, so a restored source
// emits exactly the events it would have. Tests compute the expected results with Event.
type Generator struct {
	seed                         uint64
	count, keys, maxAmount       int64
	startMs, stepMs, maxDisorder int64
	rate                         float64
	idleSplits, parallelism      int32     // the last idleSplits of the parallelism splits are idle
	valueBytes                   int       // an event's JSON is padded to at least this many bytes
	cdf                          []float64 // cumulative Zipf weights of the users; nil: uniform
}

// GeneratorDefaultMaxAmount is the largest amount when max_amount is 0.
const GeneratorDefaultMaxAmount = 100

// NewGenerator returns the generator of a configuration the catalogue accepted (keys are
// bounded, so the skew's table is).
func NewGenerator(cfg *pb.EventGenerator) *Generator {
	g := &Generator{
		seed: cfg.GetSeed(), count: cfg.GetCount(), keys: max(cfg.GetKeys(), 1),
		maxAmount: cfg.GetMaxAmount(), startMs: cfg.GetStartMs(), stepMs: cfg.GetStepMs(),
		maxDisorder: cfg.GetMaxDisorderMs(), rate: cfg.GetRatePerSecond(), idleSplits: cfg.GetIdleSplits(),
		valueBytes: int(cfg.GetValueBytes()),
	}
	if g.maxAmount <= 0 {
		g.maxAmount = GeneratorDefaultMaxAmount
	}
	if s := cfg.GetKeySkew(); s > 0 && g.keys > 1 {
		g.cdf = make([]float64, g.keys)
		sum := 0.0
		for k := range g.cdf {
			sum += 1 / math.Pow(float64(k+1), s)
			g.cdf[k] = sum
		}
	}
	return g
}

// Event is one generated event: its user (the record's key), amount and event time.
type Event struct {
	User   string
	Amount int64
	TimeMs int64
}

// GeneratedEvent is event i of split s of the generator of cfg (NewGenerator(cfg).Event; a
// test computing many events keeps one Generator).
func GeneratedEvent(cfg *pb.EventGenerator, split int32, i int64) Event {
	return NewGenerator(cfg).Event(split, i)
}

// mix64 is splitmix64's finalizer: a bijection of the 64-bit integers that mixes every bit.
func mix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// below returns a number in [0, n) from the uniform 64 bits x.
func below(x uint64, n uint64) uint64 {
	hi, _ := bits.Mul64(x, n)
	return hi
}

// UserName is the user id of key index k: "user-" and k in decimal, at least 4 digits
// ("user-0042").
func UserName(k int64) string {
	return string(appendUser(make([]byte, 0, 16), k))
}

func appendUser(b []byte, k int64) []byte {
	b = append(b, "user-"...)
	for p := int64(1000); p > 1 && k < p; p /= 10 {
		b = append(b, '0')
	}
	return strconv.AppendInt(b, k, 10)
}

// Event returns event i of split s: its hash h = mix64(mix64(seed ^ mix64(s)) + i) draws the
// user (uniform, or by the Zipf table), mix64(h^1) the amount in [1, max_amount] and
// mix64(h^2) the jitter in [0, max_disorder_ms]; the event time is
// start_ms + i*step_ms - jitter.
func (g *Generator) Event(split int32, i int64) Event {
	h := mix64(mix64(g.seed^mix64(uint64(split))) + uint64(i))
	var k int64
	if g.cdf == nil {
		k = int64(below(h, uint64(g.keys)))
	} else {
		u := float64(h>>11) / (1 << 53) * g.cdf[len(g.cdf)-1]
		k = int64(sort.SearchFloat64s(g.cdf, u))
		if k < int64(len(g.cdf)) && g.cdf[k] == u {
			k++ // SearchFloat64s finds the first cdf >= u; the user is the first cdf > u
		}
		k = min(k, g.keys-1)
	}
	return Event{
		User:   UserName(k),
		Amount: 1 + int64(below(mix64(h^1), uint64(g.maxAmount))),
		TimeMs: g.startMs + i*g.stepMs - int64(below(mix64(h^2), uint64(g.maxDisorder)+1)),
	}
}

// JSON appends e's JSON object, {"user":"user-0042","amount":17,"ts":1700000000123}.
func (e Event) JSON(b []byte) []byte {
	b = append(b, `{"user":"`...)
	b = append(b, e.User...)
	b = append(b, `","amount":`...)
	b = strconv.AppendInt(b, e.Amount, 10)
	b = append(b, `,"ts":`...)
	b = strconv.AppendInt(b, e.TimeMs, 10)
	return append(b, '}')
}

// Record is e as the generator emits it for (split, i): value its JSON, key its user (a slice
// of the value), Time its event time, Origin the split and Seq i (the lineage the checkers
// read, as the sequence source sets it).
func (e Event) Record(split int32, i int64) Record {
	return e.record(split, i, 0)
}

// padField opens the padding of an event's JSON (value_bytes).
const padField = `,"pad":"`

// record is Record with the JSON padded by a "pad" field of 'x' to at least valueBytes bytes.
func (e Event) record(split int32, i int64, valueBytes int) Record {
	v := e.JSON(make([]byte, 0, max(48+len(e.User), valueBytes)))
	if valueBytes > len(v) {
		short := max(valueBytes-len(v)-len(padField)-1, 0)
		v = append(v[:len(v)-1], padField...)
		for range short {
			v = append(v, 'x')
		}
		v = append(v, `"}`...)
	}
	const userAt = len(`{"user":"`)
	end := userAt + len(e.User)
	return Record{Key: v[userAt:end:end], Value: v, Time: e.TimeMs, Origin: split, Seq: i}
}

// Splits is one split per subtask.
func (g *Generator) Splits(parallelism int32) []Split {
	g.parallelism = parallelism
	out := make([]Split, parallelism)
	for i := range out {
		out[i] = Split{ID: int32(i), End: g.count}
	}
	return out
}

// Read emits the events of each split in turn, from its position; with idle splits among
// them, it then waits until the task ends (SourceContext.Wait: its watermarks and idleness
// tick meanwhile).
func (g *Generator) Read(sc *SourceContext, splits []Split) error {
	idle := false
	for n, sp := range splits {
		if g.idle(sp.ID) {
			idle = true
			continue
		}
		if err := g.read(sc, n, sp); err != nil {
			return err
		}
	}
	if idle {
		return sc.Wait(-1)
	}
	return nil
}

// idle reports whether split id is one of the last idle_splits splits: it emits nothing and
// never ends.
func (g *Generator) idle(id int32) bool { return g.idleSplits > 0 && id >= g.parallelism-g.idleSplits }

func (g *Generator) read(sc *SourceContext, n int, sp Split) error {
	p := newPacer(g.rate)
	for i := sp.Next; g.count == 0 || i < g.count; i++ {
		if err := p.wait(sc, i); err != nil {
			return err
		}
		if g.stepMs > 0 && i > (math.MaxInt64-g.startMs)/g.stepMs {
			return fmt.Errorf("event_generator: split %d event %d: event time start_ms + i*step_ms overflows int64", sp.ID, i)
		}
		if err := sc.Emit(n, i, g.Event(sp.ID, i).record(sp.ID, i, g.valueBytes)); err != nil {
			return err
		}
	}
	return nil
}
