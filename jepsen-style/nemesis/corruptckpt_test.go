package nemesis

import (
	"bytes"
	"context"
	"math/rand"
	"reflect"
	"syscall"
	"testing"
)

// TestCorruptCheckpointResolves: the fault kills one TM (one running a stream source when the
// view names them) and carries a damage, both from its pick alone; the TM counts as affected.
func TestCorruptCheckpointResolves(t *testing.T) {
	v := View{JMs: []string{"jm1", "jm2", "jm3"}, TMs: []string{"tm1", "tm2", "tm3"}, Client: "cl", Leader: "jm1"}
	kinds := map[DamageKind]bool{}
	for pick := range int64(30) {
		a, err := Resolve(Fault{Kind: CorruptCheckpoint, Pick: pick}, v)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := Resolve(Fault{Kind: CorruptCheckpoint, Pick: pick}, v)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("pick %d: resolution not deterministic: %+v, %+v", pick, a, b)
		}
		if len(a.Kill) != 1 || a.CorruptCheckpoint == nil {
			t.Fatalf("pick %d: %+v, want one TM killed and a damage", pick, a)
		}
		if got := a.AffectedTMs(v.JMs, v.TMs); !reflect.DeepEqual(got, a.Kill) {
			t.Fatalf("pick %d: affected %v, want %v", pick, got, a.Kill)
		}
		kinds[a.CorruptCheckpoint.Kind] = true
	}
	v.SourceTMs = []string{"tm3"}
	for pick := range int64(10) {
		if a, _ := Resolve(Fault{Kind: CorruptCheckpoint, Pick: pick}, v); !reflect.DeepEqual(a.Kill, []string{"tm3"}) {
			t.Fatalf("pick %d: kill %v, want the source TM tm3", pick, a.Kill)
		}
	}
	if len(kinds) != len(DamageKinds()) {
		t.Fatalf("30 picks chose the damages %v, not all of %v", kinds, DamageKinds())
	}
}

// TestDamage: each damage changes the file, the same seed the same way; a bit flip keeps the
// header and turns a number's last digit into another digit; a copied chunk keeps the length
// and the header; a truncation shortens the file.
func TestDamage(t *testing.T) {
	header := bytes.Repeat([]byte{'H'}, 20)
	file := append(append([]byte(nil), header...), []byte(`{"next":12345,"splits":[{"id":0,"next":678}]}`)...)
	for _, k := range DamageKinds() {
		for seed := range int64(20) {
			out, what, err := Damage(file, len(header), k, rand.New(rand.NewSource(seed)))
			if err != nil {
				t.Fatal(err)
			}
			again, _, _ := Damage(file, len(header), k, rand.New(rand.NewSource(seed)))
			if !bytes.Equal(out, again) {
				t.Fatalf("%s seed %d: not deterministic", k, seed)
			}
			if bytes.Equal(out, file) {
				t.Fatalf("%s seed %d: nothing changed (%s)", k, seed, what)
			}
			switch k {
			case BitFlip, CopyChunk:
				if len(out) != len(file) || !bytes.Equal(out[:len(header)], header) {
					t.Fatalf("%s seed %d: %q (%s): the length or the header changed", k, seed, out, what)
				}
				if k == BitFlip {
					for i := range out {
						if out[i] != file[i] && (!isDigit(out[i]) || !isDigit(file[i]) || (i+1 < len(out) && isDigit(out[i+1]))) {
							t.Fatalf("bit flip seed %d: byte %d %q -> %q is not a number's last digit", seed, i, file[i], out[i])
						}
					}
				}
			case Truncate:
				if len(out) >= len(file) || len(out) == 0 {
					t.Fatalf("truncate seed %d: %d bytes of %d", seed, len(out), len(file))
				}
			}
		}
	}
	if _, _, err := Damage(header, len(header), BitFlip, rand.New(rand.NewSource(1))); err == nil {
		t.Fatal("a file without a payload was damaged")
	}
}

// corruptTarget records the calls of a corrupt-checkpoint fault.
type corruptTarget struct {
	calls []string
}

func (c *corruptTarget) Kill(node string) error              { c.calls = append(c.calls, "kill "+node); return nil }
func (c *corruptTarget) Signal(string, syscall.Signal) error { return nil }
func (c *corruptTarget) Revive(_ context.Context, node string) error {
	c.calls = append(c.calls, "revive "+node)
	return nil
}
func (c *corruptTarget) Exec(context.Context, string, string, ...string) (string, error) {
	return "", nil
}
func (c *corruptTarget) CorruptCheckpoint(_ context.Context, tm string, d CheckpointDamage) (string, error) {
	c.calls = append(c.calls, "damage "+tm+" "+string(d.Kind))
	return "", nil
}

// TestCorruptCheckpointAppliesAfterTheKill: the damage is made once the TM is down, and the
// heal starts it again.
func TestCorruptCheckpointAppliesAfterTheKill(t *testing.T) {
	tg := &corruptTarget{}
	e := &Executor{T: tg}
	a := Action{Kill: []string{"tm2"}, CorruptCheckpoint: &CheckpointDamage{Kind: Truncate, Seed: 7}}
	if err := e.Apply(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	if err := e.Heal(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	want := []string{"kill tm2", "damage tm2 truncate", "revive tm2"}
	if !reflect.DeepEqual(tg.calls, want) {
		t.Fatalf("calls %v, want %v", tg.calls, want)
	}
	if err := (&Executor{T: &plainTarget{}}).Apply(context.Background(), a); err == nil {
		t.Fatal("a target that cannot damage a checkpoint accepted the fault")
	}
}

type plainTarget struct{}

func (plainTarget) Kill(string) error                                               { return nil }
func (plainTarget) Signal(string, syscall.Signal) error                             { return nil }
func (plainTarget) Revive(context.Context, string) error                            { return nil }
func (plainTarget) Exec(context.Context, string, string, ...string) (string, error) { return "", nil }

// TestTMFaultsAimedAtThePipeline: kill-tm and restart-tm pick among the pipeline's TMs when the
// view names them, among every TM when it names none, the same way for the same pick.
func TestTMFaultsAimedAtThePipeline(t *testing.T) {
	v := View{JMs: []string{"jm1", "jm2", "jm3"}, TMs: []string{"tm1", "tm2", "tm3"}, Leader: "jm1"}
	for _, k := range []Kind{KillTM, RestartTM} {
		seen := map[string]bool{}
		for pick := range int64(30) {
			a, err := Resolve(Fault{Kind: k, Pick: pick}, v)
			if err != nil {
				t.Fatal(err)
			}
			seen[a.Kill[0]] = true
		}
		if len(seen) != 3 {
			t.Fatalf("%s without pipeline TMs: 30 picks killed %v, want every TM", k, seen)
		}
		aimed := v
		aimed.PipelineTMs = []string{"tm1", "tm3"}
		seen = map[string]bool{}
		for pick := range int64(30) {
			a, _ := Resolve(Fault{Kind: k, Pick: pick}, aimed)
			b, _ := Resolve(Fault{Kind: k, Pick: pick}, aimed)
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("%s pick %d: not deterministic: %+v, %+v", k, pick, a, b)
			}
			seen[a.Kill[0]] = true
		}
		if !reflect.DeepEqual(seen, map[string]bool{"tm1": true, "tm3": true}) {
			t.Fatalf("%s aimed at tm1, tm3: 30 picks killed %v", k, seen)
		}
	}
}
