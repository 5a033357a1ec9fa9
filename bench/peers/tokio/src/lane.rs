//! The blocking-lane rows, Tokio's side: `tokio::task::spawn_blocking`, awaited from a task
//! (weft's bench/lane.zig runs the same definitions on `weft.Lane`).
//!
//!   lane_roundtrip --path ok|error --rounds N   one task, N x spawn_blocking of a trivial
//!                                               closure (returning Ok / Err); ns per call
//!   lane_sequential                             one task, 1000 x a 10 us busy-wait; ns per call
//!                                               and overhead_ns = ns per call - 10 us
//!   lane_concurrent                             1000 tasks spawned at once, one 10 us job each
//!
//! Tokio's blocking pool is its default (up to 512 threads, started on demand, kept 10 s).
//! Every job is counted; a lost one fails the row (`status=lost`).

use crate::{elapsed_ns, run_on, Args, Line};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

const BUSY_JOBS: u64 = 1000;
const BUSY: Duration = Duration::from_micros(10);

fn busy_wait(counter: &AtomicU64) {
    let start = Instant::now();
    while start.elapsed() < BUSY {
        std::hint::spin_loop();
    }
    counter.fetch_add(1, Relaxed);
}

fn report(row: &str, threads: usize, config: &[(&str, String)], wall_ns: u64, ops: u64, job_ns: u64, counted: u64) -> ! {
    let mut line = Line::new(row, threads);
    for (key, value) in config {
        line.config(key, value);
    }
    let per_op = wall_ns as f64 / ops as f64;
    line.int("wall_ns", wall_ns)
        .float("ns_per_op", per_op)
        .float("overhead_ns", per_op - job_ns as f64)
        .int("ops", ops);
    if counted != ops {
        line.fail("lost", "not_every_job_ran");
    }
    line.print_and_exit()
}

pub fn roundtrip(args: &Args, threads: usize) {
    let rounds = args.int("rounds", 100_000);
    let error_path = args.int("error", 0) == 1;
    let (wall_ns, counted) = run_on(threads, async move {
        let counter = Arc::new(AtomicU64::new(0));
        let start = Instant::now();
        for _ in 0..rounds {
            let counter = counter.clone();
            let result = tokio::task::spawn_blocking(move || -> Result<u64, &'static str> {
                let n = counter.fetch_add(1, Relaxed) + 1;
                if error_path { Err("refused") } else { Ok(n) }
            })
            .await
            .expect("blocking job panicked");
            std::hint::black_box(result.is_ok());
        }
        (elapsed_ns(start), counter.load(Relaxed))
    });
    let path = if error_path { "error" } else { "ok" };
    let config = [("path", path.to_string()), ("rounds", rounds.to_string())];
    report("lane_roundtrip", threads, &config, wall_ns, rounds, 0, counted)
}

pub fn sequential(_args: &Args, threads: usize) {
    let (wall_ns, counted) = run_on(threads, async move {
        let counter = Arc::new(AtomicU64::new(0));
        let start = Instant::now();
        for _ in 0..BUSY_JOBS {
            let counter = counter.clone();
            tokio::task::spawn_blocking(move || busy_wait(&counter))
                .await
                .expect("blocking job panicked");
        }
        (elapsed_ns(start), counter.load(Relaxed))
    });
    let config = [("jobs", BUSY_JOBS.to_string())];
    report("lane_sequential", threads, &config, wall_ns, BUSY_JOBS, BUSY.as_nanos() as u64, counted)
}

pub fn concurrent(_args: &Args, threads: usize) {
    let (wall_ns, counted) = run_on(threads, async move {
        let counter = Arc::new(AtomicU64::new(0));
        let start = Instant::now();
        let mut handles = Vec::with_capacity(BUSY_JOBS as usize);
        for _ in 0..BUSY_JOBS {
            let counter = counter.clone();
            handles.push(tokio::spawn(async move {
                tokio::task::spawn_blocking(move || busy_wait(&counter))
                    .await
                    .expect("blocking job panicked");
            }));
        }
        for handle in handles {
            handle.await.expect("task panicked");
        }
        (elapsed_ns(start), counter.load(Relaxed))
    });
    let config = [("jobs", BUSY_JOBS.to_string())];
    report("lane_concurrent", threads, &config, wall_ns, BUSY_JOBS, 0, counted)
}
