// Package result builds the one-line results in the format of weft's harness
// (bench/support/harness.zig):
//
//	bench=<name> runtime=<rt> <config key=value...> status=ok <result key=value...> peak_rss_kib=<n>
package result

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// Line is a result line under construction.
type Line struct {
	bench  string
	config strings.Builder
	result strings.Builder
	status string
	err    string
	rssKey string
}

// New starts a line for bench on runtime label (e.g. go-1).
func New(bench, runtime string) *Line {
	l := &Line{bench: bench, status: "ok", rssKey: "peak_rss_kib"}
	l.Config("runtime", runtime)
	return l
}

// Config adds a configuration word (printed before status=).
func (l *Line) Config(key string, value any) *Line {
	fmt.Fprintf(&l.config, " %s=%v", key, value)
	return l
}

// Int adds an integer result word.
func (l *Line) Int(key string, value int64) *Line {
	fmt.Fprintf(&l.result, " %s=%d", key, value)
	return l
}

// Float adds a float result word with one decimal, like the harness.
func (l *Line) Float(key string, value float64) *Line {
	fmt.Fprintf(&l.result, " %s=%.1f", key, value)
	return l
}

// Seconds adds a duration in seconds with three decimals (for wall_s).
func (l *Line) Seconds(key string, ns int64) *Line {
	fmt.Fprintf(&l.result, " %s=%.3f", key, float64(ns)/1e9)
	return l
}

// RSSKey renames this process's peak-RSS word, for a program (such as a load generator) whose
// own memory is not what the line is about.
func (l *Line) RSSKey(key string) *Line {
	l.rssKey = key
	return l
}

// Fail marks the run as failed its own check; status is "lost" or "failed".
func (l *Line) Fail(status, why string) *Line {
	if l.status == "ok" {
		l.status = status
		l.err = strings.ReplaceAll(why, " ", "_")
	}
	return l
}

// PrintAndExit prints the line (with this process's peak RSS) and exits 0 when ok, else 1.
func (l *Line) PrintAndExit() {
	var out strings.Builder
	fmt.Fprintf(&out, "bench=%s%s status=%s", l.bench, l.config.String(), l.status)
	if l.err != "" {
		fmt.Fprintf(&out, " error=%s", l.err)
	}
	out.WriteString(l.result.String())
	fmt.Fprintf(&out, " %s=%d\n", l.rssKey, PeakRSSKiB())
	os.Stdout.WriteString(out.String())
	if l.status == "ok" {
		os.Exit(0)
	}
	os.Exit(1)
}

// PeakRSSKiB is VmHWM from /proc/self/status (0 if unreadable).
func PeakRSSKiB() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

// Since is the nanoseconds elapsed since start.
func Since(start time.Time) int64 { return int64(time.Since(start)) }
