// Command echo-client is the one load generator for every echo server (Tokio's, Go's and
// weft's): --conns connections each do --rounds round trips of --size bytes (write the
// message, read the same number of bytes back, check every byte, repeat). It prints one line
//
//	bench=echo runtime=<--label> client=go conns=10 rounds=50000 size=64 status=ok ... msgs_per_s=<n>
//
// where a message is one round trip of one connection (msgs_per_s = conns × rounds / wall).
// The whole run is bounded by --timeout: a connection that is still going then fails with
// status=timeout. Exits 1 on any failure (status=failed, lost or timeout).
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"weft/bench/peers/go/internal/result"
)

func main() {
	host := flag.String("host", "127.0.0.1", "server address")
	port := flag.Int("port", 0, "server port (required)")
	conns := flag.Int64("conns", 10, "connections")
	rounds := flag.Int64("rounds", 50_000, "round trips per connection")
	size := flag.Int64("size", 64, "message size in bytes")
	timeout := flag.Duration("timeout", 60*time.Second, "bound on the whole run")
	label := flag.String("label", "unknown", "name of the server under test (runtime= in the line)")
	threads := flag.Int("threads", 2, "the client's GOMAXPROCS")
	flag.Parse()
	if *port == 0 {
		fmt.Fprintln(os.Stderr, "echo-client: --port is required")
		os.Exit(2)
	}
	runtime.GOMAXPROCS(*threads)

	// The client's own RSS is printed as client_peak_rss_kib; run.sh appends the server's
	// peak_rss_kib, so that peak_rss_kib always belongs to the runtime under test.
	line := result.New("echo", *label).RSSKey("client_peak_rss_kib").Config("client", "go").Config("client_threads", *threads).
		Config("conns", *conns).Config("rounds", *rounds).Config("size", *size)
	address := net.JoinHostPort(*host, fmt.Sprint(*port))
	deadline := time.Now().Add(*timeout)

	// Connect everything first, so that connection set-up is not in the timed region.
	sockets := make([]net.Conn, *conns)
	for i := range sockets {
		conn, err := net.DialTimeout("tcp", address, 5*time.Second)
		if err != nil {
			line.Fail("failed", "connect:"+err.Error()).PrintAndExit()
		}
		conn.SetDeadline(deadline)
		sockets[i] = conn
	}

	var wg sync.WaitGroup
	var verified, completed atomic.Int64
	var firstErr atomic.Pointer[error]
	start := time.Now()
	for c, conn := range sockets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer conn.Close()
			out := make([]byte, *size)
			in := make([]byte, *size)
			for r := range *rounds {
				// A pattern that differs per connection, round and offset, so a misrouted or
				// stale reply cannot pass the check.
				for i := range out {
					out[i] = byte(int64(c)*131 + r*7 + int64(i))
				}
				if _, err := conn.Write(out); err != nil {
					firstErr.CompareAndSwap(nil, &err)
					return
				}
				if _, err := io.ReadFull(conn, in); err != nil {
					firstErr.CompareAndSwap(nil, &err)
					return
				}
				if !bytes.Equal(in, out) {
					err := errors.New("echoed_bytes_differ")
					firstErr.CompareAndSwap(nil, &err)
					return
				}
				verified.Add(*size)
			}
			completed.Add(*rounds)
		}()
	}
	wg.Wait()
	wall := result.Since(start)
	total := *conns * *rounds
	line.Int("wall_ns", wall).Float("msgs_per_s", float64(completed.Load())/(float64(wall)/1e9)).
		Int("msgs", completed.Load()).Int("bytes_verified", verified.Load())
	if errp := firstErr.Load(); errp != nil {
		var netErr net.Error
		if errors.As(*errp, &netErr) && netErr.Timeout() {
			line.Fail("timeout", fmt.Sprintf("no_reply_within_%ds", int(timeout.Seconds())))
		} else {
			line.Fail("failed", (*errp).Error())
		}
	} else if completed.Load() != total || verified.Load() != total**size {
		line.Fail("lost", "round_trips_missing")
	}
	line.PrintAndExit()
}
