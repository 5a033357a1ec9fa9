//! The options of `weft.Runtime` and of the lanes it owns, apart from the code that uses
//! them: one `Options` type for the fiber runtime (src/Runtime.zig) and the same API over
//! std.Io.Threaded (src/ThreadedRuntime.zig), so that a program's options build on every OS.
//! A leaf: lower layers name their types here (`Scheduler.ContentionPolicy`, `Loop.Choice`,
//! `stack.Guard`, `lookup.Config`, `CpuLane.Options` are these).
const std = @import("std");
const config = @import("config.zig");
const host = @import("os/host.zig");
const IpAddress = std.Io.net.IpAddress;

/// `weft.Runtime.Options`. Off the fiber runtime, docs/RUNTIME.md says what each means.
pub const Runtime = struct {
    /// Executor threads, the calling thread included. Null: one per CPU this process may use
    /// (its affinity mask, and a cgroup CPU quota if one is set). At most `executors_max`.
    executors: ?usize = null,
    /// Pinned mode: each task gets a home executor when spawned (round robin) and never runs
    /// anywhere else. No stealing, no migration: a fit for many independent, evenly loaded tasks
    /// whose caches matter (one per connection); a busy executor then cannot shed its load.
    pinned: bool = false,
    /// `.adapt` (default): executors measure how long their threads wait for a CPU and, while
    /// other threads (of this process or another) want every CPU, stop spinning in their
    /// searches and retire down to fewer executors (docs/internals/scheduler.md, "Sharing the
    /// CPUs"). `.ignore`: they never do, as if the CPUs were theirs alone: for a machine given
    /// to this process, where a neighbour's burst should not cost an executor.
    cpu_contention: ContentionPolicy = .adapt,
    /// The loop backend; `.auto` honours the `WEFT_BACKEND` environment variable
    /// (`io_uring` or `epoll`), else takes io_uring and falls back to epoll.
    backend: LoopChoice = .auto,
    /// Virtual size of each fiber stack, guard page included (committed only when touched):
    /// by default 1 MiB in release builds, room for a 512 KiB frame, and 2 MiB in Debug
    /// builds, whose frames are several times larger (std.http.Client's `fetchInternal`: about
    /// 1 MiB). Each live task costs page tables of size / 512 bytes (2 KiB at 1 MiB, 4 KiB at
    /// 2 MiB): a million shallow tasks want `256 * 1024`.
    stack_size_bytes: usize = config.stack_size_bytes_default,
    /// `.page` (default): an overflow faults. `.none`: depth check only (see fiber/stack.zig).
    stack_guard: StackGuard = .page,
    /// Live tasks at most; past it `concurrent` returns `error.ConcurrencyUnavailable` and
    /// `async` runs inline. Lowered at `init` to what the process's `RLIMIT_AS` leaves room
    /// for (a stack of `stack_size_bytes` each) and to what a cgroup v2 `memory.max` does
    /// (`config.task_committed_bytes_min` each, in half the room): see docs/RUNTIME.md.
    tasks_max: usize = 1 << 22,
    /// Where `netLookup` finds the hosts file, resolv.conf and name servers (system defaults).
    resolver: Resolver = .{},
    /// The CPU lane of `compute` (its threads start on the first call). Its `name` must be
    /// null: `weft.Metrics` reports it as "cpu".
    cpu: CpuLane = .{},
    /// A signal (such as `.QUIT` or `.USR1`) that makes the runtime write a task dump
    /// (`dumpTasks`) to stderr while the process goes on. Its handler only wakes a thread of
    /// the runtime's own, which writes the dump (src/task_dump.zig, `Signal`): it takes no lock
    /// and allocates nothing, so it is safe whatever the signal interrupts. The disposition
    /// found at `init` is restored at `deinit`. Null (the default): no handler, no thread.
    dump_signal: ?std.posix.SIG = null,
    /// The environment children inherit and `PATH` is searched in, as std.Io.Threaded's
    /// `InitOptions.environ` (for a `main(init: std.process.Init)`: `init.minimal.environ`).
    /// Null: the process's own, as `start.zig` recorded it for `std.debug` (empty in a program
    /// without a Zig `main`).
    environ: ?std.process.Environ = null,
    /// The stall detector: a task that runs this long on an executor without going back to
    /// the scheduler (a computation that belongs on `compute` or a `Lane`) is reported through
    /// `std.log` (scope `.weft`, warn) with its stack, and counted in `Metrics.stalls`. Null:
    /// off, and no watchdog thread unless `WEFT_TRACE` asks for one. At least 1 ms. Off in a
    /// build with `-Dmetrics=false`, which compiles out what it watches.
    stall_threshold_ns: ?u64 = 50 * std.time.ns_per_ms,
    /// The spare executor: while every executor is held (by a task that never parks, or by a
    /// thread blocked outside std.Io, such as a `main` that joins a thread) and tasks wait
    /// that they would run, the watchdog puts one more executor thread to work, started the
    /// first time it is needed (docs/RUNTIME.md, "Progress"). `false`: never more threads than
    /// `executors`, and those tasks wait for an executor to be free. Needs the stall detector
    /// (its watchdog); never in pinned mode.
    spare_executor: bool = true,
};

/// What both runtimes take from their options and the environment before anything starts.
pub const Chosen = struct {
    /// `executors`, else `WEFT_EXECUTORS`, else one per CPU available.
    executors: usize,
    /// `backend`, else `WEFT_BACKEND`, else `.auto`.
    loop: LoopChoice,
};

/// Checks what both runtimes refuse alike (a stack below `config.stack_size_bytes_min` or not
/// a multiple of the page size, a name for the CPU lane, a stall threshold below 1 ms, no
/// executor or more than `config.executors_max`, `WEFT_EXECUTORS` or `WEFT_BACKEND` naming
/// nothing valid) and chooses the executors and the loop. `cpusAvailable` is called only when
/// neither the options nor the environment give the count.
pub fn choose(
    runtime: Runtime,
    comptime cpusAvailable: fn () u32,
) error{InvalidOptions}!Chosen {
    if (runtime.stack_size_bytes < config.stack_size_bytes_min) return error.InvalidOptions;
    if (runtime.stack_size_bytes % std.heap.page_size_min != 0) return error.InvalidOptions;
    if (runtime.cpu.name != null) return error.InvalidOptions;
    if (runtime.stall_threshold_ns) |ns| {
        if (ns < config.stall_threshold_ns_min) return error.InvalidOptions;
    }
    var buffer: [16]u8 = undefined;
    const executors_env: ?usize = if (host.getEnv("WEFT_EXECUTORS", &buffer)) |value|
        std.fmt.parseInt(usize, value, 10) catch return error.InvalidOptions
    else
        null;
    const executors = runtime.executors orelse executors_env orelse cpusAvailable();
    if (executors == 0 or executors > config.executors_max) return error.InvalidOptions;
    const loop: LoopChoice = if (runtime.backend != .auto) runtime.backend else loop: {
        const value = host.getEnv("WEFT_BACKEND", &buffer) orelse break :loop .auto;
        break :loop std.meta.stringToEnum(LoopChoice, value) orelse return error.InvalidOptions;
    };
    return .{ .executors = executors, .loop = loop };
}

/// What a runtime runs on: the fiber runtime's executors on io_uring or epoll (Linux), or
/// `std.Io.Threaded` (src/ThreadedRuntime.zig: every other OS, and Linux built with
/// `-Dbackend=threaded`).
pub const Backend = enum { io_uring, epoll, threaded };

pub const ContentionPolicy = enum {
    /// Measure run delay; stop spinning and retire executors under lasting contention.
    adapt,
    /// Never look: executors spin and stay as if the CPUs were theirs alone.
    ignore,
};

/// `auto` takes io_uring and falls back to epoll where io_uring is unavailable.
pub const LoopChoice = enum { auto, io_uring, epoll };

pub const StackGuard = enum {
    /// A guard page below every stack; an overflow faults. The default.
    page,
    /// No guard page; the stack pointer is checked against the stack's lowest page at every
    /// switch away. Denser and cheaper to create; see the trade-off in fiber/stack.zig.
    none,
};

/// Where the resolver looks. The defaults are the system's; tests (and unusual setups such as
/// a container with its own files) point it elsewhere. Slices must outlive the runtime.
pub const Resolver = struct {
    hosts_path: []const u8 = "/etc/hosts",
    resolv_conf_path: []const u8 = "/etc/resolv.conf",
    /// Replaces the `nameserver` lines of resolv.conf; unlike those, each has its own port.
    name_servers: ?[]const IpAddress = null,
    /// Replaces resolv.conf's `timeout` (the wait for one server before asking the next).
    timeout_ns: ?u64 = null,
};

/// `weft.CpuLane.Options` (and `Runtime.Options.cpu`).
pub const CpuLane = struct {
    /// Worker threads; null: `cpusAvailable()`.
    threads: ?u32 = null,
    /// Accepted jobs waiting for a worker, at most.
    queue_limit: u32 = config.cpu_lane_queue_limit_default,
    /// Callers waiting for a queue slot, at most (`error.Overloaded` past it).
    waiters_max: u32 = config.cpu_lane_waiters_max_default,
    /// Added to the workers' nice value (0 to 19). Linux only (0 by default elsewhere, and
    /// anything else fails `init`), as `slice_ns`.
    nice: u8 = config.cpu_lane_nice_default,
    /// The workers' time slice in the kernel's scheduler (null: the kernel's default);
    /// clamped to what the kernel accepts (0.1 ms to 100 ms), as the other options are.
    slice_ns: ?u64 = config.cpu_lane_slice_ns_default,
    stack_size_bytes: usize = config.lane_stack_size_bytes_default,
    /// As `Lane.Options.name`: reports the lane in `weft.Metrics` under this name, from
    /// `init` on (zeros until the first call starts it), unique among the live named lanes
    /// ("blocking" and "cpu" are each runtime's). Null in `Runtime.Options.cpu`: the
    /// runtime's own CPU lane is reported as "cpu".
    name: ?[]const u8 = null,
};
