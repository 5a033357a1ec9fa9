//! The task-core scenarios: sleep, spawn, pingpong, yield, spawn_tree, chain.
//!
//! Each runs its body as one spawned task (see `run_on`) and times only the scenario, not the
//! runtime's start-up or shutdown. Every scenario counts what ran, so a lost task or message
//! fails the run instead of flattering it.

use crate::{elapsed_ns, run_on, Args, Line};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, Notify};

/// sleep: `--tasks N` tasks each sleep 1 s (tokio::time::sleep); wait for all.
pub fn sleep(args: &Args, threads: usize) {
    let tasks = args.int("tasks", 10_000);
    let (wall_ns, spawn_ns, woke) = run_on(threads, async move {
        let woke = Arc::new(AtomicU64::new(0));
        let start = Instant::now();
        let mut handles = Vec::with_capacity(tasks as usize);
        for _ in 0..tasks {
            let woke = woke.clone();
            handles.push(tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(1)).await;
                woke.fetch_add(1, Relaxed);
            }));
        }
        let spawn_ns = elapsed_ns(start);
        for handle in handles {
            handle.await.expect("sleeper panicked");
        }
        (elapsed_ns(start), spawn_ns, woke.load(Relaxed))
    });
    let mut line = Line::new("sleep", threads);
    line.config("tasks", &tasks.to_string());
    line.int("wall_ns", wall_ns)
        .seconds("wall_s", wall_ns)
        .int("spawn_ns", spawn_ns)
        .int("woke", woke);
    if woke != tasks {
        line.fail("lost", "not_every_sleeper_woke");
    }
    line.print_and_exit()
}

/// spawn: `--tasks N` (default 1,000,000) no-op tasks, each spawned with tokio::spawn and
/// awaited through its JoinHandle; ns_per_spawn = total wall / tasks (spawn, run and await).
pub fn spawn(args: &Args, threads: usize) {
    let tasks = args.int("tasks", 1_000_000);
    let (wall_ns, ran) = run_on(threads, async move {
        let ran = Arc::new(AtomicU64::new(0));
        let start = Instant::now();
        let mut handles = Vec::with_capacity(tasks as usize);
        for _ in 0..tasks {
            let ran = ran.clone();
            handles.push(tokio::spawn(async move {
                ran.fetch_add(1, Relaxed);
            }));
        }
        for handle in handles {
            handle.await.expect("no-op task panicked");
        }
        (elapsed_ns(start), ran.load(Relaxed))
    });
    let mut line = Line::new("spawn", threads);
    line.config("tasks", &tasks.to_string());
    line.int("wall_ns", wall_ns)
        .float("ns_per_spawn", wall_ns as f64 / tasks as f64)
        .int("ran", ran);
    if ran != tasks {
        line.fail("lost", "not_every_task_ran");
    }
    line.print_and_exit()
}

/// pingpong: `--pairs P` pairs of tasks; in each pair the pinger sends `i` on one capacity-1
/// tokio::sync::mpsc channel and waits for `i + 1` on the other, the ponger replies.
/// `--rounds R` is the total over all pairs (default 1,000,000; each pair does R / P);
/// ns_per_round = wall / total rounds.
pub fn pingpong(args: &Args, threads: usize) {
    let pairs = args.int("pairs", 1).max(1);
    let per_pair = args.int("rounds", 1_000_000) / pairs;
    let total = per_pair * pairs;
    let (wall_ns, ok_rounds) = run_on(threads, async move {
        let start = Instant::now();
        let mut pingers = Vec::new();
        for _ in 0..pairs {
            let (ping_tx, mut ping_rx) = mpsc::channel::<u64>(1);
            let (pong_tx, mut pong_rx) = mpsc::channel::<u64>(1);
            tokio::spawn(async move {
                while let Some(value) = ping_rx.recv().await {
                    if pong_tx.send(value + 1).await.is_err() {
                        return;
                    }
                }
            });
            pingers.push(tokio::spawn(async move {
                let mut ok = 0u64;
                for i in 0..per_pair {
                    ping_tx.send(i).await.expect("ponger gone");
                    match pong_rx.recv().await {
                        Some(reply) if reply == i + 1 => ok += 1,
                        _ => break,
                    }
                }
                ok
            }));
        }
        let mut ok = 0;
        for pinger in pingers {
            ok += pinger.await.expect("pinger panicked");
        }
        (elapsed_ns(start), ok)
    });
    let mut line = Line::new("pingpong", threads);
    line.config("pairs", &pairs.to_string())
        .config("rounds", &total.to_string());
    line.int("wall_ns", wall_ns)
        .float("ns_per_round", wall_ns as f64 / total.max(1) as f64)
        .int("rounds_ok", ok_rounds);
    if ok_rounds != total {
        line.fail("lost", "reply_missing_or_wrong");
    }
    line.print_and_exit()
}

/// yield: `--tasks K` (default 100) tasks each call tokio::task::yield_now `--yields M`
/// (default 10,000) times; ns_per_yield = wall / (K × M).
pub fn yield_storm(args: &Args, threads: usize) {
    let tasks = args.int("tasks", 100);
    let yields = args.int("yields", 10_000);
    let (wall_ns, done) = run_on(threads, async move {
        let done = Arc::new(AtomicU64::new(0));
        let start = Instant::now();
        let mut handles = Vec::with_capacity(tasks as usize);
        for _ in 0..tasks {
            let done = done.clone();
            handles.push(tokio::spawn(async move {
                for _ in 0..yields {
                    tokio::task::yield_now().await;
                }
                done.fetch_add(yields, Relaxed);
            }));
        }
        for handle in handles {
            handle.await.expect("yielder panicked");
        }
        (elapsed_ns(start), done.load(Relaxed))
    });
    let total = tasks * yields;
    let mut line = Line::new("yield", threads);
    line.config("tasks", &tasks.to_string())
        .config("yields", &yields.to_string());
    line.int("wall_ns", wall_ns)
        .float("ns_per_yield", wall_ns as f64 / total.max(1) as f64)
        .int("yields_done", done);
    if done != total {
        line.fail("lost", "yields_missing");
    }
    line.print_and_exit()
}

type Subtree = Pin<Box<dyn Future<Output = u64> + Send>>;

/// One node of the tree: at depth d < depth - 1 it spawns two children and awaits both.
/// Returns the number of tasks in its subtree (itself included).
fn node(level: u64, depth: u64) -> Subtree {
    Box::pin(async move {
        if level + 1 >= depth {
            return 1;
        }
        let left = tokio::spawn(node(level + 1, depth));
        let right = tokio::spawn(node(level + 1, depth));
        1 + left.await.expect("child panicked") + right.await.expect("child panicked")
    })
}

/// spawn_tree: a binary tree of tasks, `--depth D` levels (default 20): every task above the
/// last level spawns two children and awaits them; 2^D - 1 tasks (1,048,575 for D = 20), the
/// root included. ns_per_task = wall / tasks.
pub fn spawn_tree(args: &Args, threads: usize) {
    let depth = args.int("depth", 20).clamp(1, 30);
    let expected = (1u64 << depth) - 1;
    let (wall_ns, counted) = run_on(threads, async move {
        let start = Instant::now();
        let counted = tokio::spawn(node(0, depth)).await.expect("root panicked");
        (elapsed_ns(start), counted)
    });
    let mut line = Line::new("spawn_tree", threads);
    line.config("depth", &depth.to_string());
    line.int("tasks", counted)
        .int("wall_ns", wall_ns)
        .float("ns_per_task", wall_ns as f64 / expected as f64);
    if counted != expected {
        line.fail("lost", "task_count_mismatch");
    }
    line.print_and_exit()
}

/// chain: `--tasks K` (default 100) tasks in a ring, each waiting on its own tokio::sync::Notify;
/// a token goes round the ring `--laps L` times (default 10,000): the task holding it checks
/// and advances the hop count, then wakes the next task (`notify_one`, which stores a permit
/// if that task is not waiting yet). One task runs at a time, so each hop is one wake-up.
/// The clock starts at the first wake, after every task is spawned; ns_per_wake = wall / (K × L).
pub fn chain(args: &Args, threads: usize) {
    let tasks = args.int("tasks", 100).max(1);
    let laps = args.int("laps", 10_000).max(1);
    let total = tasks * laps;
    let (wall_ns, hops, wrong) = run_on(threads, async move {
        let wakes: Arc<Vec<Notify>> = Arc::new((0..tasks).map(|_| Notify::new()).collect());
        // Handed from task to task with the token. Notify orders a notify_one before the
        // wake-up it causes (its docs: as std's unpark before park), so Relaxed suffices.
        let hops = Arc::new(AtomicU64::new(0));
        let wrong = Arc::new(AtomicU64::new(0));
        let mut handles = Vec::with_capacity(tasks as usize);
        for index in 0..tasks {
            let (wakes, hops, wrong) = (wakes.clone(), hops.clone(), wrong.clone());
            handles.push(tokio::spawn(async move {
                let next = ((index + 1) % tasks) as usize;
                for lap in 0..laps {
                    wakes[index as usize].notified().await;
                    let hop = hops.load(Relaxed);
                    if hop != lap * tasks + index {
                        wrong.fetch_add(1, Relaxed);
                    }
                    hops.store(hop + 1, Relaxed);
                    // The last hop wakes nobody: every task is then on its way out.
                    if hop + 1 < total {
                        wakes[next].notify_one();
                    }
                }
            }));
        }
        let start = Instant::now();
        wakes[0].notify_one();
        for handle in handles {
            handle.await.expect("chain task panicked");
        }
        (elapsed_ns(start), hops.load(Relaxed), wrong.load(Relaxed))
    });
    let mut line = Line::new("chain", threads);
    line.config("tasks", &tasks.to_string())
        .config("laps", &laps.to_string());
    line.int("wall_ns", wall_ns)
        .float("ns_per_wake", wall_ns as f64 / total as f64)
        .int("hops", hops);
    if hops != total || wrong != 0 {
        line.fail("lost", "wake_missing_or_out_of_order");
    }
    line.print_and_exit()
}
