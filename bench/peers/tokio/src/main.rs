//! Tokio/hyper peers of weft's benchmarks.
//!
//! One binary, one scenario per invocation (a fresh process, so that the peak RSS read from
//! `/proc/self/status` belongs to that scenario alone):
//!
//!     peer-tokio <scenario> [--threads N] [scenario flags...]
//!
//! `--threads 1` runs on Tokio's current_thread runtime (`runtime=tokio-ct`), `--threads N` on
//! the multi_thread runtime with N workers (`runtime=tokio-mtN`). Every measuring scenario
//! prints ONE line in the format of weft's harness (bench/support/harness.zig):
//!
//!     bench=<name> runtime=<rt> <config key=value...> status=ok <result key=value...> peak_rss_kib=<n>
//!
//! A run whose own check fails (a lost or extra message, a wrong count) prints `status=lost`
//! (or `status=failed error=<why>`) and exits with status 1. The servers (`echo_server`,
//! `http_server`) print `listening port=<n>` and serve until killed.

mod alloc;
mod basic;
mod files;
mod lane;
mod net;
mod sync;

use std::fmt::Write as _;
use std::time::Instant;

#[global_allocator]
static GLOBAL: alloc::Counting = alloc::Counting;

/// Parsed command line: the scenario name and `--key value` flags.
pub struct Args {
    pub scenario: String,
    flags: Vec<(String, String)>,
}

impl Args {
    fn parse() -> Result<Args, String> {
        let mut argv = std::env::args().skip(1);
        let scenario = argv.next().ok_or_else(usage)?;
        let mut flags = Vec::new();
        while let Some(flag) = argv.next() {
            let key = flag
                .strip_prefix("--")
                .ok_or_else(|| format!("expected --flag, got '{flag}'"))?;
            let value = argv
                .next()
                .ok_or_else(|| format!("--{key} needs a value"))?;
            flags.push((key.to_string(), value));
        }
        Ok(Args { scenario, flags })
    }

    pub fn string(&self, key: &str, default: &str) -> String {
        match self.flags.iter().rev().find(|(k, _)| k == key) {
            None => default.to_string(),
            Some((_, v)) => v.clone(),
        }
    }

    pub fn int(&self, key: &str, default: u64) -> u64 {
        match self.flags.iter().rev().find(|(k, _)| k == key) {
            None => default,
            Some((_, v)) => v.replace('_', "").parse().unwrap_or_else(|_| {
                eprintln!("--{key} needs an unsigned integer, not '{v}'");
                std::process::exit(2)
            }),
        }
    }
}

fn usage() -> String {
    format!(
        "usage: peer-tokio <scenario> [--threads N] [flags]\n\
     scenarios: sleep spawn pingpong yield spawn_tree chain echo_server http_server sync_<row>\n\
     files_<row> (bench/files.zig's rows; --tasks N --dir PATH)\n\
     lane_<row> (rows: {}) list",
        lane::ROWS.join(" ")
    )
}

/// The result line under construction: config words, then result words.
pub struct Line {
    bench: String,
    config: String,
    result: String,
    status: &'static str,
    error: Option<String>,
}

impl Line {
    pub fn new(bench: &str, threads: usize) -> Line {
        let mut line = Line {
            bench: bench.to_string(),
            config: String::new(),
            result: String::new(),
            status: "ok",
            error: None,
        };
        line.config("runtime", &runtime_label(threads));
        line.config("threads", &threads.to_string());
        line
    }

    pub fn config(&mut self, key: &str, value: &str) -> &mut Line {
        let _ = write!(self.config, " {key}={value}");
        self
    }

    pub fn int(&mut self, key: &str, value: u64) -> &mut Line {
        let _ = write!(self.result, " {key}={value}");
        self
    }

    /// Floats with one decimal, like the harness's `{d:.1}`.
    pub fn float(&mut self, key: &str, value: f64) -> &mut Line {
        let _ = write!(self.result, " {key}={value:.1}");
        self
    }

    /// A duration in seconds with three decimals (for `wall_s`).
    pub fn seconds(&mut self, key: &str, ns: u64) -> &mut Line {
        let _ = write!(self.result, " {key}={:.3}", ns as f64 / 1e9);
        self
    }

    /// Marks the run as failed its own check; `status` is `lost` or `failed`.
    pub fn fail(&mut self, status: &'static str, error: &str) -> &mut Line {
        if self.status == "ok" {
            self.status = status;
            self.error = Some(error.replace(' ', "_"));
        }
        self
    }

    /// Prints the line and exits 0 (ok) or 1 (check failed).
    pub fn print_and_exit(&self) -> ! {
        let mut out = format!("bench={}{} status={}", self.bench, self.config, self.status);
        if let Some(error) = &self.error {
            let _ = write!(out, " error={error}");
        }
        out.push_str(&self.result);
        let _ = write!(out, " peak_rss_kib={}", peak_rss_kib());
        println!("{out}");
        std::process::exit(if self.status == "ok" { 0 } else { 1 })
    }
}

pub fn runtime_label(threads: usize) -> String {
    if threads == 1 {
        "tokio-ct".to_string()
    } else {
        format!("tokio-mt{threads}")
    }
}

/// `--threads 1`: current_thread; `--threads N`: multi_thread with N workers.
pub fn build_runtime(threads: usize) -> tokio::runtime::Runtime {
    let mut builder = if threads == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(threads);
        b
    };
    builder
        .enable_all()
        .build()
        .expect("building the Tokio runtime")
}

/// Runs `future` as a spawned task on the runtime (so that it runs on a worker thread of the
/// multi_thread runtime, not on the thread blocked in `block_on`) and returns its output.
pub fn run_on<F>(threads: usize, future: F) -> F::Output
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let runtime = build_runtime(threads);
    let output = runtime
        .block_on(async move { tokio::spawn(future).await.expect("scenario task panicked") });
    // Tasks still parked (e.g. a server) must not delay the exit.
    runtime.shutdown_background();
    output
}

/// VmHWM of this process, in KiB (0 if unreadable).
pub fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Nanoseconds since `start`.
pub fn elapsed_ns(start: Instant) -> u64 {
    start.elapsed().as_nanos() as u64
}

fn main() {
    let args = match Args::parse() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            std::process::exit(2)
        }
    };
    let threads = args.int("threads", 1).max(1) as usize;
    let name = args.scenario.clone();
    match name.as_str() {
        "sleep" => basic::sleep(&args, threads),
        "spawn" => basic::spawn(&args, threads),
        "pingpong" => basic::pingpong(&args, threads),
        "yield" => basic::yield_storm(&args, threads),
        "spawn_tree" => basic::spawn_tree(&args, threads),
        "chain" => basic::chain(&args, threads),
        "echo_server" => net::echo_server(&args, threads),
        "http_server" => net::http_server(&args, threads),
        row if row.starts_with("files_") => {
            let dir = args.string("dir", "/var/tmp/weft-bench-files");
            files::run(row, &args, threads, std::path::PathBuf::from(dir))
        }
        row if row.starts_with("lane_") => lane::run(&row["lane_".len()..], &args, threads),
        "list" => {
            for row in sync::ROWS {
                println!("{}", row.0);
            }
        }
        other => match sync::ROWS.iter().find(|row| row.0 == other) {
            Some(row) => sync::run(row, threads),
            None => {
                eprintln!("unknown scenario '{other}'\n{}", usage());
                std::process::exit(2)
            }
        },
    }
}
