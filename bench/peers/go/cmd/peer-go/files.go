package main

// The file scenarios of weft's bench/files.zig with Go's os package: the same fixtures (made
// by bench-files under --dir), the same definitions, the same checks. Each goroutine is a task;
// a read or write is a plain syscall on the goroutine's thread (Go hands its P on when one
// blocks). Rows: files_small files_random_hot files_seq_cold files_random_cold
// files_write_fsync files_walk, each with --tasks N.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"weft/bench/peers/go/internal/result"
)

const (
	blockBytes      = 4096
	smallFiles      = 10_000
	smallPasses     = 3
	hotName         = "hot-256m"
	hotBytes        = 256 << 20
	randomHotReads  = 200_000
	bigName         = "big-1g"
	bigBytes        = 1 << 30
	chunkBytes      = 1 << 20
	randomColdReads = 10_000
	writeFiles      = 1_000
	walkDirs        = 100
	walkFilesPerDir = 1_000
	walkEntries     = walkDirs*walkFilesPerDir + walkDirs
	fadviseDontneed = 4
	readyMarker     = "ready-v1"
)

var errWrongBytes = errors.New("WrongBytes")

// runTasks starts tasks goroutines, waits until all run, then times work(index) on each.
func runTasks(tasks int64, work func(index int64) error) (int64, error) {
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	var first atomic.Value
	ready.Add(int(tasks))
	done.Add(int(tasks))
	for i := range tasks {
		go func() {
			defer done.Done()
			ready.Done()
			<-start
			if err := work(i); err != nil {
				first.CompareAndSwap(nil, err)
			}
		}()
	}
	ready.Wait()
	begin := time.Now()
	close(start)
	done.Wait()
	wall := result.Since(begin)
	if err, ok := first.Load().(error); ok {
		return wall, err
	}
	return wall, nil
}

func check(b []byte, want uint64) error {
	if binary.LittleEndian.Uint64(b[:8]) != want {
		return errWrongBytes
	}
	return nil
}

func evict(f *os.File) error {
	_, _, e := syscall.Syscall6(syscall.SYS_FADVISE64, f.Fd(), 0, 0, fadviseDontneed, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

type counter struct {
	next  atomic.Int64
	total int64
}

func (c *counter) take() (int64, bool) {
	n := c.next.Add(1) - 1
	return n, n < c.total
}

func filesScenario(scenario, label string, o options, dir string) {
	tasks := orDefault(o.tasks, 1)
	l := result.New(scenario, label).Config("threads", o.threads).Config("tasks", tasks)
	if _, err := os.Stat(filepath.Join(dir, readyMarker)); err != nil {
		l.Fail("failed", "no_fixtures_run_bench-files_first").PrintAndExit()
	}
	var wall, ops, bytes int64
	var err error
	switch scenario {
	case "files_small":
		wall, ops, err = goSmall(dir, tasks)
		bytes = ops * blockBytes
	case "files_random_hot":
		wall, ops, err = goRandom(filepath.Join(dir, hotName), hotBytes, tasks, randomHotReads, false)
		bytes = ops * blockBytes
	case "files_random_cold":
		wall, ops, err = goRandom(filepath.Join(dir, bigName), bigBytes, tasks, randomColdReads, true)
		bytes = ops * blockBytes
	case "files_seq_cold":
		wall, ops, err = goSequential(filepath.Join(dir, bigName), tasks)
		bytes = bigBytes
	case "files_write_fsync":
		wall, ops, err = goWrites(dir, tasks)
		bytes = ops * blockBytes
	case "files_walk":
		wall, ops, err = goWalk(dir, tasks)
	default:
		fmt.Fprintf(os.Stderr, "unknown scenario %q\n", scenario)
		usage()
	}
	if err != nil {
		l.Fail("failed", err.Error())
	}
	if ops == 0 {
		ops = 1
	}
	l.Float("ns_per_op", float64(wall)/float64(ops)).Int("ops", ops).Int("wall_ns", wall)
	l.Float("mib_per_s", float64(bytes)/(1<<20)/(float64(wall)/1e9))
	l.PrintAndExit()
}

func goSmall(dir string, tasks int64) (int64, int64, error) {
	small := filepath.Join(dir, "small")
	pass := func(total int64) (int64, error) {
		c := &counter{total: total}
		return runTasks(tasks, func(int64) error {
			block := make([]byte, blockBytes)
			for {
				op, ok := c.take()
				if !ok {
					return nil
				}
				index := op % smallFiles
				f, err := os.Open(filepath.Join(small, strconv.FormatInt(index, 10)))
				if err != nil {
					return err
				}
				n, err := f.ReadAt(block, 0)
				f.Close()
				if err != nil || n != blockBytes {
					return fmt.Errorf("ShortRead")
				}
				if err := check(block, uint64(index)); err != nil {
					return err
				}
			}
		})
	}
	if _, err := pass(smallFiles); err != nil {
		return 0, 0, err
	}
	wall, err := pass(smallFiles * smallPasses)
	return wall, smallFiles * smallPasses, err
}

func goRandom(path string, size, tasks, reads int64, cold bool) (int64, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	if cold {
		if err := evict(f); err != nil {
			return 0, 0, err
		}
	} else {
		buffer := make([]byte, chunkBytes)
		for off := int64(0); off < size; off += chunkBytes {
			if _, err := f.ReadAt(buffer, off); err != nil {
				return 0, 0, err
			}
		}
	}
	perTask := reads / tasks
	blocks := uint64(size / blockBytes)
	wall, err := runTasks(tasks, func(index int64) error {
		prng := rand.New(rand.NewPCG(0x9e3779b97f4a7c15, uint64(index)))
		block := make([]byte, blockBytes)
		for range perTask {
			b := prng.Uint64N(blocks)
			n, err := f.ReadAt(block, int64(b*blockBytes))
			if err != nil || n != blockBytes {
				return fmt.Errorf("ShortRead")
			}
			if err := check(block, b); err != nil {
				return err
			}
		}
		return nil
	})
	return wall, perTask * tasks, err
}

func goSequential(path string, tasks int64) (int64, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	if err := evict(f); err != nil {
		return 0, 0, err
	}
	c := &counter{total: bigBytes / chunkBytes}
	wall, err := runTasks(tasks, func(int64) error {
		buffer := make([]byte, chunkBytes)
		for {
			chunk, ok := c.take()
			if !ok {
				return nil
			}
			off := chunk * chunkBytes
			n, err := f.ReadAt(buffer, off)
			if err != nil || n != chunkBytes {
				return fmt.Errorf("ShortRead")
			}
			if err := check(buffer, uint64(off/blockBytes)); err != nil {
				return err
			}
		}
	})
	return wall, c.total, err
}

func goWrites(dir string, tasks int64) (int64, int64, error) {
	writes := filepath.Join(dir, fmt.Sprintf("writes-go-%d", os.Getpid()))
	if err := os.MkdirAll(writes, 0o755); err != nil {
		return 0, 0, err
	}
	defer os.RemoveAll(writes)
	c := &counter{total: writeFiles}
	wall, err := runTasks(tasks, func(int64) error {
		block := make([]byte, blockBytes)
		for {
			index, ok := c.take()
			if !ok {
				return nil
			}
			binary.LittleEndian.PutUint64(block[:8], uint64(index))
			f, err := os.Create(filepath.Join(writes, strconv.FormatInt(index, 10)))
			if err != nil {
				return err
			}
			_, err = f.WriteAt(block, 0)
			if err == nil {
				err = f.Sync()
			}
			f.Close()
			if err != nil {
				return err
			}
		}
	})
	return wall, writeFiles, err
}

func goWalk(dir string, tasks int64) (int64, int64, error) {
	c := &counter{total: walkDirs}
	var entries atomic.Int64
	wall, err := runTasks(tasks, func(int64) error {
		for {
			d, ok := c.take()
			if !ok {
				return nil
			}
			sub := filepath.Join(dir, "tree", strconv.FormatInt(d, 10))
			if _, err := os.Stat(sub); err != nil {
				return err
			}
			f, err := os.Open(sub)
			if err != nil {
				return err
			}
			names, err := f.Readdirnames(-1)
			f.Close()
			if err != nil {
				return err
			}
			for _, name := range names {
				if _, err := os.Stat(filepath.Join(sub, name)); err != nil {
					return err
				}
			}
			if len(names) != walkFilesPerDir {
				return fmt.Errorf("WrongCount")
			}
			entries.Add(int64(len(names)) + 1)
		}
	})
	if err == nil && entries.Load() != walkEntries {
		err = fmt.Errorf("WrongCount")
	}
	return wall, entries.Load(), err
}
