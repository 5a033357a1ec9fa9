// Command peer-go runs Go's side of weft's peer benchmarks, one scenario per invocation (a
// fresh process, so that the peak RSS read from /proc/self/status belongs to that scenario):
//
//	peer-go <scenario> [--threads N] [scenario flags...]
//
// --threads sets GOMAXPROCS (runtime=go-N). Scenarios: sleep, spawn, pingpong, yield,
// spawn_tree, chain, echo_server, http_server, files_* (bench/files.zig's rows). The measuring ones print one line in the format
// of weft's harness and exit 1 when their own check fails (status=lost); the servers print
// "listening port=<n>" and serve until killed.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
)

type options struct {
	threads, tasks, yields, pairs, rounds, depth, laps, port int64
	dir                                                      string
}

// unset marks a flag the scenario gives its own default.
const unset = -1

func usage() {
	fmt.Fprintln(os.Stderr, "usage: peer-go <sleep|spawn|pingpong|yield|spawn_tree|chain|echo_server|http_server> [--threads N] [flags]")
	os.Exit(2)
}

func main() {
	if len(os.Args) < 2 || strings.HasPrefix(os.Args[1], "-") {
		usage()
	}
	scenario := os.Args[1]
	var o options
	fs := flag.NewFlagSet(scenario, flag.ExitOnError)
	fs.Int64Var(&o.threads, "threads", 1, "GOMAXPROCS")
	fs.Int64Var(&o.tasks, "tasks", unset, "tasks (sleep: 10000, spawn: 1000000, yield: 100, chain: 100)")
	fs.Int64Var(&o.yields, "yields", 10_000, "yields per task (yield)")
	fs.Int64Var(&o.pairs, "pairs", 1, "task pairs (pingpong)")
	fs.Int64Var(&o.rounds, "rounds", 1_000_000, "total round trips over all pairs (pingpong)")
	fs.Int64Var(&o.depth, "depth", 20, "tree levels (spawn_tree)")
	fs.Int64Var(&o.laps, "laps", 10_000, "times the token goes round the ring (chain)")
	fs.Int64Var(&o.port, "port", 0, "port on 127.0.0.1 (servers; 0 = any free port)")
	fs.StringVar(&o.dir, "dir", "/var/tmp/weft-bench-files", "fixtures of bench-files (files_*)")
	fs.Parse(os.Args[2:])
	if o.threads < 1 {
		o.threads = 1
	}
	runtime.GOMAXPROCS(int(o.threads))
	label := fmt.Sprintf("go-%d", o.threads)

	switch scenario {
	case "sleep":
		sleep(label, o)
	case "spawn":
		spawn(label, o)
	case "pingpong":
		pingpong(label, o)
	case "yield":
		yieldStorm(label, o)
	case "spawn_tree":
		spawnTree(label, o)
	case "chain":
		chain(label, o)
	case "echo_server":
		echoServer(o)
	case "http_server":
		httpServer(o)
	case "files_small", "files_random_hot", "files_seq_cold", "files_random_cold",
		"files_write_fsync", "files_walk":
		filesScenario(scenario, label, o, o.dir)
	default:
		fmt.Fprintf(os.Stderr, "unknown scenario %q\n", scenario)
		usage()
	}
}

func orDefault(value, fallback int64) int64 {
	if value == unset {
		return fallback
	}
	return value
}
