//! The blocking-lane rows, Tokio's side: `tokio::task::spawn_blocking`, awaited from a task.
//! weft's bench/lane.zig runs the same rows (same names, jobs, work and pool size) on
//! `weft.Lane`, `weft.Lane.Sharded`, weft's CPU lane and std.Io.Threaded; bench/lanes.sh puts
//! them side by side.
//!
//!   row (scenario lane_<row>)  jobs   callers                    work     blocking threads
//!   roundtrip_ok               10k    one task, each in turn     none     2
//!   roundtrip_error            10k    the same, the job fails    none     2
//!   sequential                 1000   one task, each in turn     10 us    2
//!   concurrent                 1000   a task per job             10 us    2
//!   contention_10              40     a task per job             100 us   4
//!   contention_100             400    a task per job             50 us    4
//!   contention_1000            2000   a task per job             10 us    2
//!
//! The blocking pool is capped at the row's thread count (`max_blocking_threads`), like the
//! weft lane it is compared with; `--threads` sets the runtime's workers (multi_thread for
//! more than 1). The work is a calibrated busy-wait: a xorshift loop whose iteration count is
//! measured before the timed region (the fastest of 7 probes). Each row runs 2 warm-up
//! iterations and `--iterations` (10) timed ones and reports the median (`wall_ns`) and the
//! fastest (`wall_min_ns`). Every job counts itself and returns a value its caller checks; a
//! lost job or a wrong result fails the row (`status=lost` / `status=failed`).

use crate::{elapsed_ns, Args, Line};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

const WARMUP: u64 = 2;

struct Shape {
    jobs: u64,
    fan_out: bool,
    work_ns: u64,
    pool_threads: usize,
    fails: bool,
}

fn shape_of(row: &str, rounds: u64) -> Option<Shape> {
    let us = 1000;
    let (jobs, fan_out, work_ns, pool_threads, fails) = match row {
        "roundtrip_ok" => (rounds, false, 0, 2, false),
        "roundtrip_error" => (rounds, false, 0, 2, true),
        "sequential" => (1000, false, 10 * us, 2, false),
        "concurrent" => (1000, true, 10 * us, 2, false),
        "contention_10" => (40, true, 100 * us, 4, false),
        "contention_100" => (400, true, 50 * us, 4, false),
        "contention_1000" => (2000, true, 10 * us, 2, false),
        _ => return None,
    };
    Some(Shape { jobs, fan_out, work_ns, pool_threads, fails })
}

/// The rows, for `main`'s usage text.
pub const ROWS: &[&str] = &[
    "roundtrip_ok",
    "roundtrip_error",
    "sequential",
    "concurrent",
    "contention_10",
    "contention_100",
    "contention_1000",
];

/// The busy-wait: a xorshift chain, whose every step depends on the last.
#[inline(never)]
fn spin(iterations: u64, seed: u64) -> u64 {
    let mut x = seed | 1;
    for _ in 0..iterations {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
    }
    x
}

/// Iterations of `spin` that take `work_ns` on this core (the fastest of 7 probes).
fn calibrate(work_ns: u64) -> u64 {
    if work_ns == 0 {
        return 0;
    }
    let probe: u64 = 2_000_000;
    let mut best_ns = u64::MAX;
    for trial in 0..7 {
        let start = Instant::now();
        std::hint::black_box(spin(std::hint::black_box(probe), trial));
        best_ns = best_ns.min(elapsed_ns(start).max(1));
    }
    probe * work_ns / best_ns
}

fn expected(index: u64) -> u64 {
    index.wrapping_mul(3).wrapping_add(1)
}

struct Shared {
    spin_iterations: u64,
    fails: bool,
    completed: AtomicU64,
    wrong: AtomicU64,
}

/// One call through `spawn_blocking`, its result checked.
async fn call_checked(shared: Arc<Shared>, index: u64) {
    let job_shared = shared.clone();
    let result = tokio::task::spawn_blocking(move || -> Result<u64, &'static str> {
        std::hint::black_box(spin(job_shared.spin_iterations, index));
        job_shared.completed.fetch_add(1, Relaxed);
        if job_shared.fails { Err("refused") } else { Ok(expected(index)) }
    })
    .await
    .expect("blocking job panicked");
    let right = match result {
        Ok(value) => !shared.fails && value == expected(index),
        Err(_) => shared.fails,
    };
    if !right {
        shared.wrong.fetch_add(1, Relaxed);
    }
}

async fn iterate(shared: &Arc<Shared>, shape: &Shape) -> u64 {
    let start = Instant::now();
    if shape.fan_out {
        let mut handles = Vec::with_capacity(shape.jobs as usize);
        for index in 0..shape.jobs {
            handles.push(tokio::spawn(call_checked(shared.clone(), index)));
        }
        for handle in handles {
            handle.await.expect("caller task panicked");
        }
    } else {
        for index in 0..shape.jobs {
            call_checked(shared.clone(), index).await;
        }
    }
    elapsed_ns(start)
}

/// `lane_<row>`: see the module doc.
pub fn run(row: &str, args: &Args, threads: usize) {
    let rounds = args.int("rounds", 10_000);
    let iterations = args.int("iterations", 10).max(1);
    let Some(shape) = shape_of(row, rounds) else {
        eprintln!("unknown lane row '{row}' (known: {})", ROWS.join(" "));
        std::process::exit(2)
    };
    let mut builder = if threads == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(threads);
        b
    };
    let runtime = builder
        .max_blocking_threads(shape.pool_threads)
        .enable_all()
        .build()
        .expect("building the Tokio runtime");
    let shared = Arc::new(Shared {
        spin_iterations: calibrate(shape.work_ns),
        fails: shape.fails,
        completed: AtomicU64::new(0),
        wrong: AtomicU64::new(0),
    });
    let task_shared = shared.clone();
    let jobs = shape.jobs;
    let mut walls = runtime.block_on(async move {
        tokio::spawn(async move {
            for _ in 0..WARMUP {
                iterate(&task_shared, &shape).await;
            }
            let mut walls = Vec::new();
            for _ in 0..iterations {
                walls.push(iterate(&task_shared, &shape).await);
            }
            walls
        })
        .await
        .expect("scenario task panicked")
    });
    runtime.shutdown_background();
    walls.sort_unstable();
    let shape = shape_of(row, rounds).expect("checked above");
    let median = walls[walls.len() / 2];
    let per_job = median as f64 / jobs as f64;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    let mut line = Line::new(&format!("lane_{row}"), threads);
    line.config("via", "spawn_blocking")
        .config("lane_threads", &shape.pool_threads.to_string())
        .config("jobs", &jobs.to_string())
        .config("work_ns", &shape.work_ns.to_string())
        .config("iterations", &iterations.to_string());
    line.int("wall_ns", median)
        .int("wall_min_ns", walls[0])
        .float("ns_per_job", per_job)
        .float("overhead_ns", per_job - shape.work_ns as f64)
        .int("ideal_ns", jobs * shape.work_ns / (shape.pool_threads as u64).min(cpus))
        .int("jobs", jobs)
        .int("spin_iterations", shared.spin_iterations);
    if shared.completed.load(Relaxed) != jobs * (WARMUP + iterations) {
        line.fail("lost", "not_every_job_ran");
    }
    if shared.wrong.load(Relaxed) != 0 {
        line.fail("failed", "wrong_result");
    }
    line.print_and_exit()
}
