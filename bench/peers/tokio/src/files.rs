//! The file rows of weft's bench/files.zig on Tokio: the same fixtures (made by bench-files
//! under `--dir`), definitions and checks; `--tasks N` spawned tasks share the work.
//!
//! `tokio::fs` runs every call on the blocking pool (`spawn_blocking`, one hop per call). It has
//! no positional read, so the random and sequential rows call `std::os::unix::fs::FileExt::
//! read_at` inside `spawn_blocking` themselves, which is what `tokio::fs` does for each of its
//! calls (rejected: a `File` per task with `seek` + `read`, two hops per read). The others use
//! `tokio::fs` as a program would: `File::open` + `read` + drop, `File::create` + `write_all` +
//! `sync_all`, `read_dir` + `metadata` per entry.

use crate::{elapsed_ns, run_on, Args, Line};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const BLOCK_BYTES: u64 = 4096;
const SMALL_FILES: u64 = 10_000;
const SMALL_PASSES: u64 = 3;
const HOT_BYTES: u64 = 256 << 20;
const RANDOM_HOT_READS: u64 = 200_000;
const BIG_BYTES: u64 = 1 << 30;
const CHUNK_BYTES: u64 = 1 << 20;
const RANDOM_COLD_READS: u64 = 10_000;
const WRITE_FILES: u64 = 1_000;
const WALK_DIRS: u64 = 100;
const WALK_FILES_PER_DIR: u64 = 1_000;
const WALK_ENTRIES: u64 = WALK_DIRS * WALK_FILES_PER_DIR + WALK_DIRS;

extern "C" {
    fn posix_fadvise(fd: i32, offset: i64, len: i64, advice: i32) -> i32;
}
const POSIX_FADV_DONTNEED: i32 = 4;

type Error = String;

fn check(bytes: &[u8], expected: u64) -> Result<(), Error> {
    let got = u64::from_le_bytes(bytes[..8].try_into().unwrap());
    if got == expected {
        Ok(())
    } else {
        Err("WrongBytes".to_string())
    }
}

fn evict(file: &std::fs::File) -> Result<(), Error> {
    // SAFETY: a plain syscall on a descriptor this function borrows.
    let rc = unsafe { posix_fadvise(file.as_raw_fd(), 0, 0, POSIX_FADV_DONTNEED) };
    if rc == 0 {
        Ok(())
    } else {
        Err(format!("fadvise_{rc}"))
    }
}

/// A shared counter of work items.
struct Counter {
    next: AtomicU64,
    total: u64,
}

impl Counter {
    fn new(total: u64) -> Arc<Counter> {
        Arc::new(Counter { next: AtomicU64::new(0), total })
    }
    fn take(&self) -> Option<u64> {
        let n = self.next.fetch_add(1, Relaxed);
        (n < self.total).then_some(n)
    }
}

/// Spawns `tasks` tasks running `work(index)`, starts the clock once all are running (a
/// barrier), and returns the wall time until the last one ends, or the first error.
async fn run_tasks<F, Fut>(tasks: u64, work: F) -> Result<u64, Error>
where
    F: Fn(u64) -> Fut,
    Fut: std::future::Future<Output = Result<(), Error>> + Send + 'static,
{
    let barrier = Arc::new(tokio::sync::Barrier::new(tasks as usize + 1));
    let mut handles = Vec::with_capacity(tasks as usize);
    for index in 0..tasks {
        let barrier = barrier.clone();
        let future = work(index);
        handles.push(tokio::spawn(async move {
            barrier.wait().await;
            future.await
        }));
    }
    barrier.wait().await;
    let start = Instant::now();
    let mut first: Result<(), Error> = Ok(());
    for handle in handles {
        let outcome = handle.await.map_err(|e| e.to_string()).and_then(|r| r);
        if first.is_ok() {
            first = outcome;
        }
    }
    let wall = elapsed_ns(start);
    first.map(|_| wall)
}

pub fn run(scenario: &str, args: &Args, threads: usize, dir: PathBuf) {
    let tasks = args.int("tasks", 1).max(1);
    let mut line = Line::new(scenario, threads);
    line.config("tasks", &tasks.to_string());
    if !dir.join("ready-v1").exists() {
        line.fail("failed", "no_fixtures_run_bench-files_first").print_and_exit()
    }
    let name = scenario.to_string();
    let outcome = run_on(threads, async move {
        match name.as_str() {
            "files_small" => small(dir, tasks).await,
            "files_random_hot" => random(dir.join("hot-256m"), HOT_BYTES, tasks, false).await,
            "files_random_cold" => random(dir.join("big-1g"), BIG_BYTES, tasks, true).await,
            "files_seq_cold" => sequential(dir.join("big-1g"), tasks).await,
            "files_write_fsync" => writes(dir, tasks).await,
            "files_walk" => walk(dir, tasks).await,
            other => Err(format!("unknown_scenario_{other}")),
        }
    });
    let (wall, ops, bytes) = match outcome {
        Ok(numbers) => numbers,
        Err(error) => {
            line.fail("failed", &error);
            (0, 1, 0)
        }
    };
    line.float("ns_per_op", wall as f64 / ops as f64)
        .int("ops", ops)
        .int("wall_ns", wall)
        .float("mib_per_s", bytes as f64 / (1u64 << 20) as f64 / (wall as f64 / 1e9));
    line.print_and_exit()
}

type Numbers = Result<(u64, u64, u64), Error>;

async fn small(dir: PathBuf, tasks: u64) -> Numbers {
    let small = Arc::new(dir.join("small"));
    let pass = |total: u64| {
        let counter = Counter::new(total);
        let small = small.clone();
        run_tasks(tasks, move |_| {
            let counter = counter.clone();
            let small = small.clone();
            async move {
                let mut block = vec![0u8; BLOCK_BYTES as usize];
                while let Some(op) = counter.take() {
                    let index = op % SMALL_FILES;
                    let path = small.join(index.to_string());
                    let mut file = tokio::fs::File::open(&path).await.map_err(|e| e.to_string())?;
                    let read = file.read(&mut block).await.map_err(|e| e.to_string())?;
                    if read as u64 != BLOCK_BYTES {
                        return Err("ShortRead".to_string());
                    }
                    check(&block, index)?;
                }
                Ok(())
            }
        })
    };
    pass(SMALL_FILES).await?;
    let ops = SMALL_FILES * SMALL_PASSES;
    let wall = pass(ops).await?;
    Ok((wall, ops, ops * BLOCK_BYTES))
}

/// `read_at` of `len` bytes at `offset` on the blocking pool.
async fn read_at(file: &Arc<std::fs::File>, offset: u64, len: u64) -> Result<Vec<u8>, Error> {
    let file = file.clone();
    tokio::task::spawn_blocking(move || {
        let mut buffer = vec![0u8; len as usize];
        file.read_exact_at(&mut buffer, offset).map(|_| buffer)
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| e.to_string())
}

async fn random(path: PathBuf, size: u64, tasks: u64, cold: bool) -> Numbers {
    let file = Arc::new(std::fs::File::open(&path).map_err(|e| e.to_string())?);
    if cold {
        evict(&file)?;
    } else {
        let mut offset = 0;
        while offset < size {
            read_at(&file, offset, CHUNK_BYTES).await?;
            offset += CHUNK_BYTES;
        }
    }
    let reads = if cold { RANDOM_COLD_READS } else { RANDOM_HOT_READS };
    let per_task = reads / tasks;
    let blocks = size / BLOCK_BYTES;
    let wall = run_tasks(tasks, |index| {
        let file = file.clone();
        async move {
            // xorshift64*, seeded per task: any fixed sequence of uniform blocks will do.
            let mut state = 0x9e3779b97f4a7c15u64 ^ (index + 1).wrapping_mul(0xff51afd7ed558ccd);
            for _ in 0..per_task {
                state ^= state >> 12;
                state ^= state << 25;
                state ^= state >> 27;
                let block = state.wrapping_mul(0x2545f4914f6cdd1d) % blocks;
                let bytes = read_at(&file, block * BLOCK_BYTES, BLOCK_BYTES).await?;
                check(&bytes, block)?;
            }
            Ok(())
        }
    })
    .await?;
    let ops = per_task * tasks;
    Ok((wall, ops, ops * BLOCK_BYTES))
}

async fn sequential(path: PathBuf, tasks: u64) -> Numbers {
    let file = Arc::new(std::fs::File::open(&path).map_err(|e| e.to_string())?);
    evict(&file)?;
    let counter = Counter::new(BIG_BYTES / CHUNK_BYTES);
    let wall = run_tasks(tasks, |_| {
        let file = file.clone();
        let counter = counter.clone();
        async move {
            while let Some(chunk) = counter.take() {
                let offset = chunk * CHUNK_BYTES;
                let bytes = read_at(&file, offset, CHUNK_BYTES).await?;
                check(&bytes, offset / BLOCK_BYTES)?;
            }
            Ok(())
        }
    })
    .await?;
    Ok((wall, BIG_BYTES / CHUNK_BYTES, BIG_BYTES))
}

async fn writes(dir: PathBuf, tasks: u64) -> Numbers {
    let writes = Arc::new(dir.join(format!("writes-tokio-{}", std::process::id())));
    tokio::fs::create_dir_all(&*writes).await.map_err(|e| e.to_string())?;
    let counter = Counter::new(WRITE_FILES);
    let outcome = run_tasks(tasks, |_| {
        let writes = writes.clone();
        let counter = counter.clone();
        async move {
            let mut block = vec![0u8; BLOCK_BYTES as usize];
            while let Some(index) = counter.take() {
                block[..8].copy_from_slice(&index.to_le_bytes());
                let path = writes.join(index.to_string());
                let mut file = tokio::fs::File::create(&path).await.map_err(|e| e.to_string())?;
                file.write_all(&block).await.map_err(|e| e.to_string())?;
                file.sync_all().await.map_err(|e| e.to_string())?;
            }
            Ok(())
        }
    })
    .await;
    let _ = tokio::fs::remove_dir_all(&*writes).await;
    Ok((outcome?, WRITE_FILES, WRITE_FILES * BLOCK_BYTES))
}

async fn walk_one(sub: &Path) -> Result<u64, Error> {
    tokio::fs::metadata(sub).await.map_err(|e| e.to_string())?;
    let mut entries = tokio::fs::read_dir(sub).await.map_err(|e| e.to_string())?;
    let mut count = 1;
    while let Some(entry) = entries.next_entry().await.map_err(|e| e.to_string())? {
        tokio::fs::metadata(entry.path()).await.map_err(|e| e.to_string())?;
        count += 1;
    }
    if count != WALK_FILES_PER_DIR + 1 {
        return Err("WrongCount".to_string());
    }
    Ok(count)
}

async fn walk(dir: PathBuf, tasks: u64) -> Numbers {
    let tree = Arc::new(dir.join("tree"));
    let counter = Counter::new(WALK_DIRS);
    let entries = Arc::new(AtomicU64::new(0));
    let wall = run_tasks(tasks, |_| {
        let tree = tree.clone();
        let counter = counter.clone();
        let entries = entries.clone();
        async move {
            while let Some(d) = counter.take() {
                let count = walk_one(&tree.join(d.to_string())).await?;
                entries.fetch_add(count, Relaxed);
            }
            Ok(())
        }
    })
    .await?;
    let counted = entries.load(Relaxed);
    if counted != WALK_ENTRIES {
        return Err("WrongCount".to_string());
    }
    Ok((wall, counted, 0))
}
