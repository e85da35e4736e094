package cluster

import (
	"io"
	"log/slog"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Logger writes JSON lines as Metacontroller's zap logger does, with the keys the e2e tests read:
// "msg", and objects as {apiVersion, kind, namespace, name}.
type Logger struct {
	out *slog.Logger
	// verbosity is --zap-log-level: lines of a higher verbosity are not written.
	verbosity int
}

// NewLogger writes to w the lines up to verbosity.
func NewLogger(w io.Writer, verbosity int) *Logger {
	return &Logger{out: slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug})), verbosity: verbosity}
}

// Info writes a line at verbosity 0.
func (l *Logger) Info(msg string, args ...any) { l.out.Info(msg, args...) }

// Error writes an error line.
func (l *Logger) Error(err error, msg string, args ...any) {
	l.out.Error(msg, append(args, "error", err.Error())...)
}

// V writes a line of verbosity level when --zap-log-level asks for it.
func (l *Logger) V(level int, msg string, args ...any) {
	if level <= l.verbosity {
		l.out.Debug(msg, args...)
	}
}

// objectRef is how a log line names an object.
type objectRef struct {
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind,omitempty"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name"`
}

func refOf(obj *unstructured.Unstructured) objectRef {
	return objectRef{APIVersion: obj.GetAPIVersion(), Kind: obj.GetKind(), Namespace: obj.GetNamespace(), Name: obj.GetName()}
}
