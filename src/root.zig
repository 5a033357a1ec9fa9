//! weft: an async I/O runtime that implements `std.Io` on stackful fibers and io_uring.
//!
//! ```
//! var rt = try weft.Runtime.init(gpa, .{});
//! defer rt.deinit();
//! const io = rt.io(); // pass it to any code written against std.Io
//! ```
//!
//! The public API is the declarations below and nothing else: a test at the bottom keeps them
//! (and those of `Runtime` and `sync`) to the documented list. Everything else under src/ is
//! internal; docs/ARCHITECTURE.md draws its layers.
const std = @import("std");
const platform = @import("platform.zig");

/// A runtime: its executors, loops and lanes, and the `std.Io` they implement (`io()`). Off
/// Linux (and on Linux built with `-Dbackend=threaded`) the same API over `std.Io.Threaded`.
pub const Runtime = if (platform.fibers) @import("Runtime.zig") else @import("ThreadedRuntime.zig");
/// One connection handler served `.single`, `.threaded` or `.forked`; `Server.http` serves
/// HTTP/1.1 with std.http.Server. On the threaded runtime (off Linux) `.single` and
/// `.threaded` with a shared listener.
pub const Server = @import("server/Server.zig");
/// Fiber-aware sync primitives and channels (Notify, Oneshot, Channel, ...).
pub const sync = @import("sync/root.zig");
/// A bounded pool of OS threads for blocking calls (and `Lane.Sharded`).
pub const Lane = @import("lanes/Lane.zig");
/// The CPU lane: computation on about one thread per CPU, apart from the executors
/// (`Runtime.compute` runs on the runtime's own).
pub const CpuLane = @import("lanes/CpuLane.zig");
/// A fixed table of exclusive resources: ids with generations, transactions with a bounded
/// FIFO line of waiters, destroy, and a teardown for every resource.
pub const Registry = @import("sync/Registry.zig").Registry;
/// A snapshot of what a runtime has done (`Runtime.metrics`), as a table or for Prometheus.
pub const Metrics = @import("Metrics.zig");
/// Runs a std.Io program deterministically: seeded schedule, virtual time, one thread.
pub const Sim = @import("sim/Sim.zig");
/// Raises the process's soft fd limit to its hard limit (a server's connections are fds).
pub const raiseFdLimit = @import("os/host.zig").raiseFdLimit;

/// Fails to compile, naming the declaration, unless the public declarations of `T` are
/// exactly `names`.
fn expectPublic(comptime T: type, comptime names: []const []const u8) void {
    for (@typeInfo(T).@"struct".decls) |decl| {
        for (names) |name| {
            if (std.mem.eql(u8, name, decl.name)) break;
        } else @compileError(@typeName(T) ++ "." ++ decl.name ++ " is public but not in " ++
            "the documented API (src/root.zig): make it private, or add it to the list");
    }
    for (names) |name| {
        if (!@hasDecl(T, name)) @compileError(@typeName(T) ++ "." ++ name ++ " is listed " ++
            "in the documented API (src/root.zig) but not declared");
    }
}

test "weft: the public API is exactly the documented list" {
    comptime {
        @setEvalBranchQuota(10_000);
        expectPublic(@This(), &.{
            "Runtime", "Server", "sync",         "Lane", "CpuLane", "Registry",
            "Metrics", "Sim",    "raiseFdLimit",
        });
        // Not the machinery the VTable calls (`Task`, `park`, `futexWait`, ...).
        expectPublic(Sim, &.{
            "Options",           "InitError",      "RunError",     "Failure",    "init",
            "deinit",            "io",             "traceHash",    "elapsedNs",  "stepCount",
            "RunResult",         "run",            "CheckOptions", "Checked",    "checkSeeds",
            "writeReport",       "NetworkOptions", "HostEntry",    "Link",       "setLink",
            "FileFaults",        "setHost",        "partition",    "heal",       "Files",
            "Crash",             "Disk",           "crash",        "disk",       "diskOperations",
            "CrashCheckOptions", "checkCrashes",   "DiskFaults",   "Durability",
        });
        // Not `State` (the VTable's userdata, with createTask, destroyTask and start).
        expectPublic(Runtime, &.{
            "Options",
            "InitError",
            "executors_max",
            "stack_size_bytes_min",
            "address_space_reserve_bytes",
            "init",
            "deinit",
            "io",
            "compute",
            "computeThreads",
            "metrics",
            "metricsOf",
            "stacksCommittedBytes",
            "stacksCommittedBytesOf",
            "prometheusTextOf",
            "PrometheusTextError",
            "Backend",
            "backend",
            "executorCount",
            "yield",
            "setName",
            "task_name_bytes_max",
            "dumpTasks",
        });
        // Not `Worker`, `Signals` or `serveOn`, the machinery of `run` (what users read of a
        // worker's report is `Report.workers`).
        expectPublic(Server, &.{
            "http",    "Connection", "Handler",     "Shape",    "Listeners", "WhenFull",
            "Options", "Report",     "workers_max", "backlog",  "InitError", "init",
            "deinit",  "port",       "stop",        "RunError", "run",       "ServeError",
            "serve",
        });
        // Not `WaitQueue`, the building block of the primitives.
        expectPublic(sync, &.{
            "Notify",    "Oneshot",  "Channel",       "Broadcast", "Watch",  "Barrier",
            "WaitGroup", "OnceCell", "Semaphore",     "RwLock",    "select", "selectWith",
            "trySelect", "Select",   "SelectOptions",
        });
    }
}

test {
    std.testing.refAllDecls(@This());
    // Every file that has tests, in path order: src/testing/tidy_test.zig fails, printing the
    // list to paste, when this one is not.
    _ = @import("ThreadedRuntime.zig");
    _ = @import("contention/RunDelay.zig");
    _ = @import("contention/RunnableCount.zig");
    _ = @import("contention/cpu_demand.zig");
    _ = @import("fiber/context.zig");
    _ = @import("fiber/frames.zig");
    _ = @import("fiber/stack.zig");
    _ = @import("fs/errno.zig");
    _ = @import("fs/mounts.zig");
    _ = @import("fs/syscall.zig");
    _ = @import("intrusive.zig");
    _ = @import("lanes/CpuLane.zig");
    _ = @import("lanes/Lane.zig");
    _ = @import("lanes/named.zig");
    _ = @import("loop/Completion.zig");
    _ = @import("loop/Loop.zig");
    _ = @import("loop/backend/Watches.zig");
    _ = @import("loop/backend/epoll.zig");
    _ = @import("loop/nonblocking.zig");
    _ = @import("net/ResolvConf.zig");
    _ = @import("net/dns.zig");
    _ = @import("net/dns_tcp.zig");
    _ = @import("net/hosts.zig");
    _ = @import("net/interface.zig");
    _ = @import("net/lookup.zig");
    _ = @import("os/Counter.zig");
    _ = @import("os/Histogram.zig");
    _ = @import("os/Mutex.zig");
    _ = @import("os/SpinLock.zig");
    _ = @import("os/atomic.zig");
    _ = @import("os/host.zig");
    _ = @import("os/linux.zig");
    _ = @import("os/memory_limits.zig");
    _ = @import("os/thread.zig");
    _ = @import("sched/LiveTasks.zig");
    _ = @import("sched/Reporter.zig");
    _ = @import("sched/RunQueue.zig");
    _ = @import("sched/Scheduler.zig");
    _ = @import("sched/Task.zig");
    _ = @import("sched/Timers.zig");
    _ = @import("sched/Watchdog.zig");
    _ = @import("sched/futex.zig");
    _ = @import("sched/overflow.zig");
    _ = @import("server/BufferPool.zig");
    _ = @import("server/Server.zig");
    _ = @import("server/http/Body.zig");
    _ = @import("server/http/head.zig");
    _ = @import("sim/Disk.zig");
    _ = @import("std_io/iovecs.zig");
    _ = @import("std_io/threaded_futures.zig");
    _ = @import("sync/Barrier.zig");
    _ = @import("sync/Notify.zig");
    _ = @import("sync/Registry.zig");
    _ = @import("sync/RwLock.zig");
    _ = @import("sync/Semaphore.zig");
    _ = @import("sync/WaitGroup.zig");
    _ = @import("sync/WaitQueue.zig");
    _ = @import("sync/broadcast.zig");
    _ = @import("sync/channel.zig");
    _ = @import("sync/once_cell.zig");
    _ = @import("sync/oneshot.zig");
    _ = @import("sync/root.zig");
    _ = @import("sync/select.zig");
    _ = @import("sync/watch.zig");
    _ = @import("testing/InterleavingChecker.zig");
    _ = @import("testing/compat_test.zig");
    _ = @import("testing/cpu_test.zig");
    _ = @import("testing/dump_test.zig");
    _ = @import("testing/fd_test.zig");
    _ = @import("testing/fs_test.zig");
    _ = @import("testing/http_test.zig");
    _ = @import("testing/lane_test.zig");
    _ = @import("testing/lookup_test.zig");
    _ = @import("testing/memory_test.zig");
    _ = @import("testing/metrics_test.zig");
    _ = @import("testing/net_test.zig");
    // Only where the build links OpenSSL (`-Dopenssl=true`).
    if (@import("test_options").openssl) _ = @import("testing/openssl_test.zig");
    _ = @import("testing/overflow_test.zig");
    _ = @import("testing/process_test.zig");
    _ = @import("testing/progress_test.zig");
    _ = @import("testing/readiness_test.zig");
    _ = @import("testing/readme_test.zig");
    _ = @import("testing/registry_test.zig");
    _ = @import("testing/runtime_test.zig");
    _ = @import("testing/scheduler_test.zig");
    _ = @import("testing/select_test.zig");
    _ = @import("testing/server_shapes_test.zig");
    _ = @import("testing/server_stop_test.zig");
    _ = @import("testing/server_test.zig");
    _ = @import("testing/sim_disk_test.zig");
    _ = @import("testing/sim_net_test.zig");
    _ = @import("testing/sim_sync_test.zig");
    _ = @import("testing/sim_test.zig");
    _ = @import("testing/socket_blocking_test.zig");
    _ = @import("testing/stall_test.zig");
    _ = @import("testing/sync_test.zig");
    _ = @import("testing/tidy_test.zig");
    _ = @import("wait_reason.zig");
}
