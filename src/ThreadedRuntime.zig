//! `weft.Runtime` where weft's fiber runtime does not run: the same API over `std.Io.Threaded`,
//! on every OS but Linux, and on Linux in a build with `-Dbackend=threaded` (which tests this
//! file where CI runs). A program's `main` is the same on every OS; what it gets here is
//! std's runtime, where each concurrent task is an OS thread, with weft's CPU lane for
//! `compute` and `weft.sync`, the lanes and the registry on top, as on Linux.
//!
//! What the fiber runtime has and this does not (docs/RUNTIME.md, "Other operating systems"):
//! counts of tasks, executors and stacks in `metrics()` (the lanes are reported), task dumps,
//! the stall detector (nothing to detect: a concurrent task here is a thread, and one that
//! computes holds no other task) and the schedule trace. An option that cannot hold here is
//! refused by `init` with `error.InvalidOptions`, never ignored: `pinned`, a loop backend
//! other than `.auto`, `stack_guard = .none`, a `resolver` other than the system's, and a
//! `dump_signal`; and the environment's `WEFT_BACKEND` naming a loop, or `WEFT_TRACE`.
const ThreadedRuntime = @This();

const std = @import("std");
const assert = std.debug.assert;
const Io = std.Io;
const config = @import("config.zig");
const os = @import("os/host.zig");
const CpuLane = @import("lanes/CpuLane.zig");
const Metrics = @import("Metrics.zig");
const options_mod = @import("options.zig");
const threaded_futures = @import("std_io/threaded_futures.zig");
const Mutex = @import("os/Mutex.zig");

state: *State,

const State = struct {
    gpa: std.mem.Allocator,
    threaded: Io.Threaded,
    cpu: CpuLane,
    /// The executors the options asked for: the calling thread and the pool's threads.
    executors: usize,
    started_ns: u64,
    /// The next runtime of `live` (under `live_lock`).
    next_live: ?*State = null,

    /// The runtime behind `io_any`, if it is a live one's `io()`: its userdata is the
    /// runtime's std.Io.Threaded, which only the list of live runtimes tells from any other
    /// (threaded_futures makes such an Io for a std.Io.Threaded of anyone's).
    fn of(io_any: Io) ?*State {
        if (!threaded_futures.isThreadedIo(io_any)) return null;
        live_lock.lock();
        defer live_lock.unlock();
        var cursor = live;
        while (cursor) |state| : (cursor = state.next_live) {
            if (@as(*anyopaque, &state.threaded) == io_any.userdata) return state;
        }
        return null;
    }
};

/// Every runtime between `init` and `deinit`, for `metricsOf` and its kin: a handful in a
/// process (one per server worker at most), so a list walked under a lock.
var live_lock: Mutex = .{};
var live: ?*State = null;

/// The fiber runtime's options, so that one `Options` value builds on every OS; what each
/// means here is in this file's comment and in docs/RUNTIME.md.
pub const Options = options_mod.Runtime;
pub const Backend = options_mod.Backend;
pub const executors_max = config.executors_max;
pub const stack_size_bytes_min = config.stack_size_bytes_min;
/// Not used here (no stack pool is sized under `RLIMIT_AS`); kept for the same API.
pub const address_space_reserve_bytes = config.address_space_reserve_bytes;
pub const task_name_bytes_max = config.task_name_bytes_max;

pub const InitError = error{
    /// An option this runtime cannot honour (see this file's comment), or one the fiber
    /// runtime refuses too (no executor, too many, a stack below `stack_size_bytes_min`, a
    /// stall threshold below 1 ms, a name for the CPU lane, a `WEFT_EXECUTORS` that is not a
    /// count).
    InvalidOptions,
    OutOfMemory,
};

/// `executors` sets the threads `Io.async` may use (the calling thread included; more async
/// work runs inline, as on the fiber runtime at its task ceiling), `tasks_max` the tasks at
/// once (past it `concurrent` fails with `error.ConcurrencyUnavailable`), `stack_size_bytes`
/// each thread's stack, `environ` the children's environment.
pub fn init(gpa: std.mem.Allocator, options: Options) InitError!ThreadedRuntime {
    const chosen = try options_mod.choose(options, CpuLane.cpusAvailable);
    try refuseFiberOnly(options, chosen.loop);
    const executors = chosen.executors;
    var cpu_options = options.cpu;
    cpu_options.name = null;
    const cpu = CpuLane.init(gpa, cpu_options) catch |err| switch (err) {
        error.InvalidOptions => return error.InvalidOptions, // a nice or slice off Linux
        error.NameInUse, error.NamesExhausted => unreachable, // unnamed
    };
    const state = try gpa.create(State);
    state.* = .{
        .gpa = gpa,
        .threaded = .init(gpa, .{
            .stack_size = options.stack_size_bytes,
            .async_limit = .limited(executors - 1),
            // The main task counts as one of `tasks_max`, as on the fiber runtime.
            .concurrent_limit = .limited(options.tasks_max - 1),
            .environ = options.environ orelse inherited: {
                const recorded = std.Options.debug_threaded_io orelse break :inherited .empty;
                break :inherited recorded.environ.process_environ;
            },
        }),
        .cpu = cpu,
        .executors = executors,
        .started_ns = os.monotonicNs(),
    };
    live_lock.lock();
    defer live_lock.unlock();
    state.next_live = live;
    live = state;
    return .{ .state = state };
}

/// What only the fiber runtime does (and a task ceiling of 0): refused, not ignored.
fn refuseFiberOnly(options: Options, loop: options_mod.LoopChoice) error{InvalidOptions}!void {
    if (options.tasks_max == 0) return error.InvalidOptions;
    if (options.pinned) return error.InvalidOptions;
    if (loop != .auto) return error.InvalidOptions; // in the options or `WEFT_BACKEND`
    if (options.stack_guard != .page) return error.InvalidOptions;
    if (options.dump_signal != null) return error.InvalidOptions;
    const resolver = options.resolver;
    const system: @TypeOf(resolver) = .{};
    if (!std.mem.eql(u8, resolver.hosts_path, system.hosts_path) or
        !std.mem.eql(u8, resolver.resolv_conf_path, system.resolv_conf_path) or
        resolver.name_servers != null or resolver.timeout_ns != null)
    {
        return error.InvalidOptions;
    }
    var buffer: [32]u8 = undefined;
    if (os.getEnv("WEFT_TRACE", &buffer) != null) return error.InvalidOptions;
}

/// Stops the CPU lane (its accepted jobs run first) and std.Io.Threaded's threads. Every
/// future must have been awaited and every group awaited or canceled before. Call it from
/// the thread that called `init`.
pub fn deinit(rt: ThreadedRuntime) void {
    const state = rt.state;
    {
        live_lock.lock();
        defer live_lock.unlock();
        var link = &live;
        while (link.*) |listed| : (link = &listed.next_live) {
            if (listed == state) break;
        } else unreachable; // every runtime is listed from `init` to here
        link.* = state.next_live;
    }
    state.cpu.deinit(state.threaded.io());
    state.threaded.deinit();
    state.gpa.destroy(state);
}

/// std.Io.Threaded's `Io`, with futures a `weft.sync.select` can wait for among other arms
/// (src/std_io/threaded_futures.zig).
pub fn io(rt: ThreadedRuntime) Io {
    return threaded_futures.io(&rt.state.threaded);
}

/// As on the fiber runtime: `function(args...)` on the CPU lane, the caller waiting.
pub fn compute(
    rt: ThreadedRuntime,
    caller_io: Io,
    comptime function: anytype,
    args: std.meta.ArgsTuple(@TypeOf(function)),
) CpuLane.Result(function) {
    return rt.state.cpu.run(caller_io, function, args);
}

pub fn computeThreads(rt: ThreadedRuntime) u32 {
    return rt.state.cpu.threads();
}

/// The uptime, the CPU lane and the process's named lanes; tasks, executors and stacks are
/// zero (std.Io.Threaded counts none of them).
pub fn metrics(rt: ThreadedRuntime) Metrics {
    return .collectLanesOnly(rt.state.started_ns, rt.state.cpu.figures());
}

/// `metrics()` of the runtime behind `io`, or null when `io` is not a weft runtime's (such as
/// a bare `std.Io.Threaded`'s): for code handed only an `Io`, like a request handler.
pub fn metricsOf(io_any: Io) ?Metrics {
    const state = State.of(io_any) orelse return null;
    const rt: ThreadedRuntime = .{ .state = state };
    return rt.metrics();
}

/// 0: no fiber stacks (each thread's stack is the OS's).
pub fn stacksCommittedBytes(rt: ThreadedRuntime) u64 {
    _ = rt;
    return 0;
}

/// 0 for a weft runtime's `io` (as `stacksCommittedBytes`), else null.
pub fn stacksCommittedBytesOf(io_any: Io) Io.Cancelable!?u64 {
    _ = State.of(io_any) orelse return null;
    return 0;
}

pub const PrometheusTextError = error{OutOfMemory} || Io.Cancelable;

/// The Prometheus text (`Metrics.writePrometheus`) of the runtime behind `io`, in memory from
/// `gpa` that the caller frees; null when `io` is not a weft runtime's. Made on the calling
/// thread, which is an OS thread here with a stack of its own (a `Metrics` snapshot is about
/// 100 KiB); it waits for nothing. `weft.Server.http.WithMetrics` answers its scrapes with it.
pub fn prometheusTextOf(io_any: Io, gpa: std.mem.Allocator) PrometheusTextError!?[]u8 {
    const state = State.of(io_any) orelse return null;
    const rt: ThreadedRuntime = .{ .state = state };
    const snapshot = rt.metrics();
    return try snapshot.prometheusTextAlloc(gpa);
}

/// Always `.threaded`.
pub fn backend(rt: ThreadedRuntime) Backend {
    _ = rt;
    return .threaded;
}

/// The threads `Io.async` may run on, the calling thread included (`Options.executors`).
pub fn executorCount(rt: ThreadedRuntime) usize {
    return rt.state.executors;
}

/// Yields the OS thread (each task here is one). Cancelation point.
pub fn yield(io_any: Io) Io.Cancelable!void {
    try io_any.checkCancel();
    std.Thread.yield() catch {}; // a yield the OS declines: the thread goes on, as after one
}

/// Writes one line saying that task dumps need the fiber runtime: threads here are the OS's,
/// and their stacks are a debugger's to read.
pub fn dumpTasks(rt: ThreadedRuntime, w: *Io.Writer) Io.Writer.Error!void {
    _ = rt;
    try w.writeAll("weft: no task dump: this runtime is std.Io.Threaded " ++
        "(task dumps need weft's fiber runtime, on Linux)\n");
}

/// A no-op: names are for task dumps, which this runtime does not write.
pub fn setName(io_any: Io, name: []const u8) void {
    _ = io_any;
    _ = name;
}

test "ThreadedRuntime: refuses what it cannot honour" {
    const gpa = std.testing.allocator;
    try std.testing.expectError(error.InvalidOptions, init(gpa, .{ .pinned = true }));
    try std.testing.expectError(error.InvalidOptions, init(gpa, .{ .backend = .epoll }));
    try std.testing.expectError(error.InvalidOptions, init(gpa, .{ .stack_guard = .none }));
    try std.testing.expectError(error.InvalidOptions, init(gpa, .{ .executors = 0 }));
    try std.testing.expectError(error.InvalidOptions, init(gpa, .{ .tasks_max = 0 }));
    try std.testing.expectError(error.InvalidOptions, init(gpa, .{
        .resolver = .{ .hosts_path = "/tmp/hosts" },
    }));
    try std.testing.expectError(error.InvalidOptions, init(gpa, .{ .dump_signal = .TERM }));
    try std.testing.expectError(error.InvalidOptions, init(gpa, .{
        .stall_threshold_ns = std.time.ns_per_us,
    }));
}

test "ThreadedRuntime: runs tasks, compute and yields; no task dump" {
    const gpa = std.testing.allocator;
    var buffer: [32]u8 = undefined;
    if (os.getEnv("WEFT_BACKEND", &buffer)) |value| {
        if (!std.mem.eql(u8, value, "auto")) {
            // The Linux suite's runs name a loop, which this runtime refuses; the Windows run
            // under Wine (`test-windows`) names none.
            try std.testing.expectError(error.InvalidOptions, init(gpa, .{}));
            return os.skipTest(@src(), "WEFT_BACKEND names a loop, refused here (as it must be)");
        }
    }
    var rt = try init(gpa, .{ .executors = 2 });
    defer rt.deinit();
    const rt_io = rt.io();
    try std.testing.expectEqual(Backend.threaded, rt.backend());
    try std.testing.expectEqual(@as(usize, 2), rt.executorCount());

    const Square = struct {
        fn square(x: u64) u64 {
            return x * x;
        }
        fn task(runtime: ThreadedRuntime, task_io: Io, x: u64) !u64 {
            try yield(task_io);
            return runtime.compute(task_io, square, .{x});
        }
    };
    var futures: [4]Io.Future(@typeInfo(@TypeOf(Square.task)).@"fn".return_type.?) = undefined;
    for (&futures, 0..) |*future, index| {
        future.* = try rt_io.concurrent(Square.task, .{ rt, rt_io, index + 1 });
    }
    var sum: u64 = 0;
    for (&futures) |*future| sum += try future.await(rt_io);
    try std.testing.expectEqual(@as(u64, 1 + 4 + 9 + 16), sum);

    const snapshot = rt.metrics();
    try std.testing.expectEqual(@as(u32, 0), snapshot.executor_count);
    var dump: [256]u8 = undefined;
    var writer: Io.Writer = .fixed(&dump);
    try rt.dumpTasks(&writer);
    try std.testing.expect(std.mem.indexOf(u8, writer.buffered(), "no task dump") != null);
}

test "ThreadedRuntime: metrics by Io for its own Io only, the lanes' and the uptime" {
    const gpa = std.testing.allocator;
    var buffer: [32]u8 = undefined;
    if (os.getEnv("WEFT_BACKEND", &buffer)) |value| {
        if (!std.mem.eql(u8, value, "auto")) {
            return os.skipTest(@src(), "WEFT_BACKEND names a loop, refused here (as it must be)");
        }
    }
    var first = try init(gpa, .{});
    defer first.deinit();
    var second = try init(gpa, .{});
    const second_io = second.io();
    // Each runtime's Io finds its own runtime: the CPU lane's threads are that runtime's.
    const Double = struct {
        fn double(x: u64) u64 {
            return 2 * x;
        }
    };
    try std.testing.expectEqual(@as(u64, 98), try second.compute(second_io, Double.double, .{49}));
    // The lanes are the blocking one, then the CPU lane (Metrics.lanes).
    const of_second = metricsOf(second_io) orelse return error.TestExpectedMetrics;
    try std.testing.expectEqualStrings("cpu", of_second.lanesSlice()[1].name.slice());
    try std.testing.expectEqual(@as(u64, 1), of_second.lanesSlice()[1].figures.completed);
    const of_first = metricsOf(first.io()) orelse return error.TestExpectedMetrics;
    try std.testing.expectEqual(@as(u64, 0), of_first.lanesSlice()[1].figures.completed);
    try std.testing.expectEqual(@as(?u64, 0), try stacksCommittedBytesOf(second_io));
    const text = (try prometheusTextOf(second_io, gpa)) orelse return error.TestExpectedText;
    defer gpa.free(text);
    try std.testing.expect(std.mem.indexOf(u8, text, "weft_uptime_seconds") != null);
    // Not a weft runtime's: a bare std.Io.Threaded, the same wrapped, and one ended.
    var threaded: Io.Threaded = .init(gpa, .{});
    defer threaded.deinit();
    try std.testing.expectEqual(@as(?Metrics, null), metricsOf(threaded.io()));
    try std.testing.expectEqual(@as(?Metrics, null), metricsOf(threaded_futures.io(&threaded)));
    second.deinit();
    try std.testing.expectEqual(@as(?Metrics, null), metricsOf(second_io));
    try std.testing.expect((try prometheusTextOf(second_io, gpa)) == null);
}
