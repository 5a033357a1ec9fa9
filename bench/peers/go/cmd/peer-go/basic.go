package main

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"weft/bench/peers/go/internal/result"
)

// sleep: --tasks N goroutines each time.Sleep(1 s); wait for all (WaitGroup).
func sleep(label string, o options) {
	tasks := orDefault(o.tasks, 10_000)
	var wg sync.WaitGroup
	var woke atomic.Int64
	start := time.Now()
	for range tasks {
		wg.Add(1)
		go func() {
			time.Sleep(time.Second)
			woke.Add(1)
			wg.Done()
		}()
	}
	spawnNs := result.Since(start)
	wg.Wait()
	wall := result.Since(start)
	l := result.New("sleep", label).Config("threads", o.threads).Config("tasks", tasks)
	l.Int("wall_ns", wall).Seconds("wall_s", wall).Int("spawn_ns", spawnNs).Int("woke", woke.Load())
	if woke.Load() != tasks {
		l.Fail("lost", "not_every_sleeper_woke")
	}
	l.PrintAndExit()
}

// spawn: --tasks N (default 1,000,000) no-op goroutines, waited for with one WaitGroup;
// ns_per_spawn = total wall / tasks (spawn, run and wait).
func spawn(label string, o options) {
	tasks := orDefault(o.tasks, 1_000_000)
	var wg sync.WaitGroup
	var ran atomic.Int64
	start := time.Now()
	for range tasks {
		wg.Add(1)
		go func() {
			ran.Add(1)
			wg.Done()
		}()
	}
	wg.Wait()
	wall := result.Since(start)
	l := result.New("spawn", label).Config("threads", o.threads).Config("tasks", tasks)
	l.Int("wall_ns", wall).Float("ns_per_spawn", float64(wall)/float64(tasks)).Int("ran", ran.Load())
	if ran.Load() != tasks {
		l.Fail("lost", "not_every_task_ran")
	}
	l.PrintAndExit()
}

// pingpong: --pairs P pairs of goroutines; the pinger sends i on one buffered chan of 1 and
// waits for i+1 on another, the ponger replies. --rounds is the total over all pairs (each
// pair does rounds/P); ns_per_round = wall / total rounds.
func pingpong(label string, o options) {
	pairs := max(o.pairs, 1)
	perPair := o.rounds / pairs
	total := perPair * pairs
	var wg sync.WaitGroup
	var ok atomic.Int64
	start := time.Now()
	for range pairs {
		ping := make(chan int64, 1)
		pong := make(chan int64, 1)
		go func() {
			for value := range ping {
				pong <- value + 1
			}
		}()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(ping)
			var good int64
			for i := range perPair {
				ping <- i
				if <-pong != i+1 {
					break
				}
				good++
			}
			ok.Add(good)
		}()
	}
	wg.Wait()
	wall := result.Since(start)
	l := result.New("pingpong", label).Config("threads", o.threads).Config("pairs", pairs).Config("rounds", total)
	l.Int("wall_ns", wall).Float("ns_per_round", float64(wall)/float64(max(total, 1))).Int("rounds_ok", ok.Load())
	if ok.Load() != total {
		l.Fail("lost", "reply_missing_or_wrong")
	}
	l.PrintAndExit()
}

// yield: --tasks K (default 100) goroutines each call runtime.Gosched --yields M (default
// 10,000) times; ns_per_yield = wall / (K × M).
func yieldStorm(label string, o options) {
	tasks := orDefault(o.tasks, 100)
	yields := o.yields
	var wg sync.WaitGroup
	var done atomic.Int64
	start := time.Now()
	for range tasks {
		wg.Add(1)
		go func() {
			for range yields {
				runtime.Gosched()
			}
			done.Add(yields)
			wg.Done()
		}()
	}
	wg.Wait()
	wall := result.Since(start)
	total := tasks * yields
	l := result.New("yield", label).Config("threads", o.threads).Config("tasks", tasks).Config("yields", yields)
	l.Int("wall_ns", wall).Float("ns_per_yield", float64(wall)/float64(max(total, 1))).Int("yields_done", done.Load())
	if done.Load() != total {
		l.Fail("lost", "yields_missing")
	}
	l.PrintAndExit()
}

// node is one task of the tree: above the last level it starts two child goroutines and
// waits for both. Returns the number of tasks in its subtree, itself included.
func node(level, depth int64) int64 {
	if level+1 >= depth {
		return 1
	}
	var counts [2]int64
	var wg sync.WaitGroup
	wg.Add(2)
	for child := range 2 {
		go func() {
			counts[child] = node(level+1, depth)
			wg.Done()
		}()
	}
	wg.Wait()
	return 1 + counts[0] + counts[1]
}

// spawn_tree: a binary tree of goroutines, --depth D levels (default 20): 2^D - 1 tasks, the
// root (also a new goroutine) included; ns_per_task = wall / tasks.
func spawnTree(label string, o options) {
	depth := min(max(o.depth, 1), 30)
	expected := int64(1)<<depth - 1
	start := time.Now()
	done := make(chan int64)
	go func() { done <- node(0, depth) }()
	counted := <-done
	wall := result.Since(start)
	l := result.New("spawn_tree", label).Config("threads", o.threads).Config("depth", depth)
	l.Int("tasks", counted).Int("wall_ns", wall).Float("ns_per_task", float64(wall)/float64(expected))
	if counted != expected {
		l.Fail("lost", "task_count_mismatch")
	}
	l.PrintAndExit()
}

// chain: --tasks K (default 100) goroutines in a ring, each waiting on its own channel of
// capacity 1 (a stored wake-up, as Tokio's Notify permit); a token goes round the ring --laps L
// times (default 10,000): the goroutine holding it checks and advances the hop count, then
// wakes the next one. One goroutine runs at a time, so each hop is one wake-up. The clock
// starts at the first wake, after every goroutine is started; ns_per_wake = wall / (K × L).
func chain(label string, o options) {
	tasks := max(orDefault(o.tasks, 100), 1)
	laps := max(o.laps, 1)
	total := tasks * laps
	wakes := make([]chan struct{}, tasks)
	for i := range wakes {
		wakes[i] = make(chan struct{}, 1)
	}
	// Handed from goroutine to goroutine with the token: the channel operations order every
	// access, and wg.Wait orders the final reads.
	var hops, wrong int64
	var wg sync.WaitGroup
	for index := range tasks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			next := wakes[(index+1)%tasks]
			for lap := range laps {
				<-wakes[index]
				if hops != lap*tasks+index {
					wrong++
				}
				hops++
				// The last hop wakes nobody: every goroutine is then on its way out.
				if hops < total {
					next <- struct{}{}
				}
			}
		}()
	}
	start := time.Now()
	wakes[0] <- struct{}{}
	wg.Wait()
	wall := result.Since(start)
	l := result.New("chain", label).Config("threads", o.threads).Config("tasks", tasks).Config("laps", laps)
	l.Int("wall_ns", wall).Float("ns_per_wake", float64(wall)/float64(total)).Int("hops", hops)
	if hops != total || wrong != 0 {
		l.Fail("lost", "wake_missing_or_out_of_order")
	}
	l.PrintAndExit()
}
