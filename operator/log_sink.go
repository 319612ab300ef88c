package operator

import (
	"context"

	"github.com/hashicorp/go-hclog"

	"github.com/jmcluster/jmcluster/transport/pb"
)

func init() {
	register("log_sink", runtime{sink: func(_ *pb.Operator, info Info, _ string) Sink { return &logSink{log: info.Logger} }})
}

// logSink logs every record at debug level; below it, a record costs nothing (no formatting, no
// allocation: the level is checked first).
type logSink struct {
	log hclog.Logger
}

func (s *logSink) Open(context.Context) error { return nil }

func (s *logSink) Write(r Record) error {
	if !s.log.IsDebug() {
		return nil
	}
	s.log.Debug("record", "key", FormatKey(r.Key), "value", FormatKey(r.Value), "time", r.Time, "origin", r.Origin, "seq", r.Seq)
	return nil
}

func (s *logSink) Finish() error { return nil }
func (s *logSink) Close() error  { return nil }
