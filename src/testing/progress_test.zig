//! The progress guarantee (docs/RUNTIME.md, "Progress"): while a task is ready, some executor
//! runs it within the stall threshold, whatever one executor's thread does meanwhile: a task
//! on it that never parks, or a `main` blocked outside std.Io (in `std.Thread.join`). Each test
//! is a shape real libraries' suites showed: a task woken by a task that never parks, the main
//! task behind such a task, and threads of a `main` that joins them waiting in `Io.Select` while
//! the other executor is retired.
const std = @import("std");
const builtin = @import("builtin");
const Io = std.Io;
const testing = std.testing;
const Runtime = @import("../Runtime.zig");
const Metrics = @import("../Metrics.zig");
const Executor = @import("../sched/Executor.zig");
const os = @import("../os/linux.zig");
const parked = @import("parked.zig");

const ms = std.time.ns_per_ms;

/// How long a holder computes without parking: well past the stall threshold (50 ms), so that
/// a task that waits for the hold to end is told from one that ran meanwhile.
const hold_ns = 600 * ms;
/// The latest a task may run once ready: the threshold, and room for a loaded machine (the
/// suite's runs share the CPUs).
const run_within_ns = 300 * ms;

/// Spins for `duration_ns` without a std.Io call: a task that never parks.
noinline fn computeWithoutParking(duration_ns: u64) void {
    const start_ns = os.monotonicNs();
    while (os.monotonicNs() -| start_ns < duration_ns) std.atomic.spinLoopHint();
}

fn skipWithoutHandOver() !void {
    if (!Metrics.enabled) return os.skipTest(@src(), "-Dmetrics=false: no watchdog");
    // The LIFO slot is handed over by the watchdog's signal handler, which these builds do not
    // install (sched/Watchdog.zig).
    if (builtin.sanitize_thread) return os.skipTest(@src(), "ThreadSanitizer: no signal handler");
}

const Woken = struct {
    event: Io.Event = .unset,
    ran_ns: std.atomic.Value(u64) = .init(0),

    fn wait(woken: *Woken, io: Io) Io.Cancelable!void {
        try woken.event.wait(io);
        woken.ran_ns.store(os.monotonicNs(), .release);
    }
};

const Holder = struct {
    go: Io.Event = .unset,
    waits_for_go: bool = true,
    woken: *Woken,
    set_ns: std.atomic.Value(u64) = .init(0),
    executor: std.atomic.Value(u32) = .init(std.math.maxInt(u32)),

    /// Waits for `go` (if told to), wakes `woken` (into this executor's LIFO slot) and holds
    /// the executor.
    fn hold(holder: *Holder, io: Io) Io.Cancelable!void {
        if (holder.waits_for_go) try holder.go.wait(io);
        holder.executor.store(Executor.ofThread().?.index, .release);
        holder.set_ns.store(os.monotonicNs(), .release);
        holder.woken.event.set(io);
        computeWithoutParking(hold_ns);
    }
};

test "progress: a task woken by a task that never parks runs on another executor meanwhile" {
    try skipWithoutHandOver();
    var rt = try Runtime.init(testing.allocator, .{ .executors = 2, .cpu_contention = .ignore });
    defer rt.deinit();
    const io = rt.io();
    var woken: Woken = .{};
    var holder: Holder = .{ .woken = &woken };
    var waiter = try io.concurrent(Woken.wait, .{ &woken, io });
    defer waiter.cancel(io) catch {};
    try parked.waitParked(io, &waiter, .cancelable);
    var holding = try io.concurrent(Holder.hold, .{ &holder, io });
    defer holding.cancel(io) catch {};
    try parked.waitParked(io, &holding, .cancelable);
    holder.go.set(io);
    try holding.await(io);
    try waiter.await(io);
    const after_ns = woken.ran_ns.load(.acquire) -| holder.set_ns.load(.acquire);
    if (after_ns > run_within_ns) {
        std.debug.print("the woken task ran {d} ms after its wake, the hold lasting {d} ms\n", .{
            after_ns / ms, hold_ns / ms,
        });
        return error.TestUnexpectedResult;
    }
    try testing.expect(rt.metrics().stall_handed_over >= 1);
}

test "progress: the main task behind a task that never parks on executor 0 runs elsewhere" {
    try skipWithoutHandOver();
    const Shape = enum {
        /// The main task spawns the holder with `async`, which runs it at once: the main task
        /// waits in executor 0's LIFO slot.
        spawned,
        /// The main task sleeps while the holder holds executor 0: the watchdog fires its timer
        /// there, which queues it on executor 0 (it is bound there).
        sleeping,
    };
    for ([_]Shape{ .spawned, .sleeping }) |shape| {
        const options: Runtime.Options = .{ .executors = 2, .cpu_contention = .ignore };
        var rt = try Runtime.init(testing.allocator, options);
        defer rt.deinit();
        const io = rt.io();
        var woken: Woken = .{};
        var holder: Holder = .{ .woken = &woken, .waits_for_go = shape == .sleeping };
        var waiter = try io.concurrent(Woken.wait, .{ &woken, io });
        defer waiter.cancel(io) catch {};
        try parked.waitParked(io, &waiter, .cancelable);
        try testing.expectEqual(@as(u32, 0), Executor.ofThread().?.index);
        const start_ns = os.monotonicNs();
        // Runs the holder at once, here on executor 0: to its hold, or until it waits for `go`.
        var holding = io.async(Holder.hold, .{ &holder, io });
        defer holding.cancel(io) catch {};
        if (shape == .sleeping) {
            // Into this executor's LIFO slot: the holder runs as soon as the main task parks.
            holder.go.set(io);
            try io.sleep(.fromMilliseconds(2), .awake);
        }
        const resumed_ns = os.monotonicNs();
        try holding.await(io);
        try waiter.await(io);
        try testing.expectEqual(@as(u32, 0), holder.executor.load(.acquire));
        const woken_after_ns = woken.ran_ns.load(.acquire) -| holder.set_ns.load(.acquire);
        if (resumed_ns - start_ns > run_within_ns or woken_after_ns > run_within_ns) {
            std.debug.print("{t}: the main task went on after {d} ms, the woken task ran {d} " ++
                "ms after its wake; the hold lasted {d} ms\n", .{
                shape,
                (resumed_ns - start_ns) / ms,
                woken_after_ns / ms,
                hold_ns / ms,
            });
            return error.TestUnexpectedResult;
        }
        // `Runtime.deinit` takes the main task back to executor 0, and asserts it.
    }
}

/// A pool of connections that is always empty, as a library's pool is while its one connection
/// reconnects: `acquire` waits for a release or for its timeout, whichever comes first, through
/// `Io.Select` over two `concurrent` tasks (a sleep, and a `Condition.wait`).
const Pool = struct {
    mutex: Io.Mutex = .init,
    released: Io.Condition = .init,
    available: u32 = 0,
    acquires_slow: std.atomic.Value(u32) = .init(0),
    acquire_ns_max: std.atomic.Value(u64) = .init(0),

    const timeout_ms = 20;
    const acquires_per_thread = 5;

    const Outcome = union(enum) { timed_out: Io.Cancelable!void, released: Io.Cancelable!void };

    fn waitTimeout(io: Io) Io.Cancelable!void {
        try io.sleep(.fromMilliseconds(timeout_ms), .awake);
    }

    fn waitReleased(pool: *Pool, io: Io) Io.Cancelable!void {
        try pool.mutex.lock(io);
        defer pool.mutex.unlock(io);
        while (pool.available == 0) try pool.released.wait(io, &pool.mutex);
    }

    fn acquire(pool: *Pool, io: Io) !void {
        const start_ns = os.monotonicNs();
        var buffer: [2]Outcome = undefined;
        var select: Io.Select(Outcome) = .init(io, &buffer);
        try select.concurrent(.timed_out, waitTimeout, .{io});
        try select.concurrent(.released, waitReleased, .{ pool, io });
        const outcome = try select.await();
        select.cancelDiscard();
        try testing.expect(outcome == .timed_out);
        const took_ns = os.monotonicNs() - start_ns;
        _ = pool.acquire_ns_max.fetchMax(took_ns, .monotonic);
        if (took_ns > run_within_ns) _ = pool.acquires_slow.fetchAdd(1, .monotonic);
    }

    /// A thread weft does not run, as a test's worker thread.
    fn user(pool: *Pool, io: Io, failed: *std.atomic.Value(bool)) void {
        for (0..acquires_per_thread) |_| pool.acquire(io) catch failed.store(true, .release);
    }
};

/// Makes executor 1 retired as lasting contention would (Scheduler.zig, "Retiring executors"),
/// for long enough that only the watchdog brings it back.
fn retireExecutorOne(rt: *Runtime) void {
    const scheduler = &rt.state.scheduler;
    const until_ns = os.monotonicNs() + 60 * std.time.ns_per_s;
    scheduler.contended_until_ns.store(until_ns, .monotonic);
    scheduler.retired.store(1, .monotonic);
}

/// Ends the test's wait if nothing else does: after 5 s, brings the retired executor back or,
/// with one executor, puts the spare to work.
const Rescue = struct {
    done: std.atomic.Value(u32) = .init(0),
    rescued: bool = false,

    fn run(rescue: *Rescue, rt: *Runtime) void {
        const scheduler = &rt.state.scheduler;
        os.futexWait(&rescue.done, 0, 5 * std.time.ns_per_s);
        if (rescue.done.load(.acquire) != 0) return;
        rescue.rescued = true;
        scheduler.contended_until_ns.store(0, .monotonic);
        scheduler.retired.store(0, .monotonic);
        for (scheduler.executors) |*executor| executor.loop.wake();
        if (scheduler.executors.len == 1) {
            // Only the watchdog starts the spare: it stops first.
            if (rt.state.watchdog) |*watchdog| watchdog.stop();
            scheduler.activateSpare();
        }
    }

    fn finish(rescue: *Rescue) void {
        rescue.done.store(1, .release);
        os.futexWake(&rescue.done, 1);
    }
};

test "progress: threads of a main that joins them wait in Select while executor 1 is retired" {
    if (!Metrics.enabled) return os.skipTest(@src(), "-Dmetrics=false: no watchdog");
    var rt = try Runtime.init(testing.allocator, .{ .executors = 2, .spare_executor = false });
    defer rt.deinit();
    retireExecutorOne(&rt);
    try expectJoinedUsersInTime(&rt);
}

test "progress: threads of a main that joins them wait in Select on a one-executor runtime" {
    if (!Metrics.enabled) return os.skipTest(@src(), "-Dmetrics=false: no watchdog");
    var rt = try Runtime.init(testing.allocator, .{ .executors = 1, .spare_executor = true });
    defer rt.deinit();
    try expectJoinedUsersInTime(&rt);
    // The spare did the work, and stopped taking more once the main task was back.
    const metrics = rt.metrics();
    try testing.expect(metrics.spare_activations >= 1);
    const scheduler = &rt.state.scheduler;
    for (0..100) |_| {
        if (!scheduler.spare_active.load(.monotonic)) break;
        try rt.io().sleep(.fromMilliseconds(10), .awake);
    } else return error.SpareStillAtWork;
}

/// Three threads weft does not run use a `Pool`, each acquiring five times, while the main task
/// joins them, blocking executor 0's thread outside std.Io: every acquire must time out in time.
fn expectJoinedUsersInTime(rt: *Runtime) !void {
    const io = rt.io();
    var rescue: Rescue = .{};
    const rescuer = try std.Thread.spawn(.{}, Rescue.run, .{ &rescue, rt });
    defer rescuer.join();
    defer rescue.finish();
    var pool: Pool = .{};
    var failed: std.atomic.Value(bool) = .init(false);
    var threads: [3]std.Thread = undefined;
    for (&threads) |*thread| {
        thread.* = try std.Thread.spawn(.{}, Pool.user, .{ &pool, io, &failed });
    }
    // Blocks executor 0's thread outside std.Io: the main task holds it until they end.
    for (threads) |thread| thread.join();
    try testing.expect(!failed.load(.acquire));
    if (rescue.rescued or pool.acquires_slow.load(.monotonic) > 0) {
        std.debug.print("rescued after 5 s: {}; acquires slower than {d} ms: {d} of {d}, " ++
            "the slowest {d} ms (timeout {d} ms)\n", .{
            rescue.rescued,
            run_within_ns / ms,
            pool.acquires_slow.load(.monotonic),
            threads.len * Pool.acquires_per_thread,
            pool.acquire_ns_max.load(.monotonic) / ms,
            Pool.timeout_ms,
        });
        return error.TestUnexpectedResult;
    }
}

/// A task that, once started, wakes `woken` and then computes without parking until `woken`
/// ran (or `give_up_ns` passed): it holds its executor for as long as the wake goes unserved.
const HolderUntilServed = struct {
    go: Io.Event = .unset,
    woken: *Woken,
    set_ns: std.atomic.Value(u64) = .init(0),
    executor: std.atomic.Value(u32) = .init(std.math.maxInt(u32)),

    const give_up_ns = 5 * std.time.ns_per_s;

    fn hold(holder: *HolderUntilServed, io: Io) Io.Cancelable!void {
        try holder.go.wait(io);
        holder.executor.store(Executor.ofThread().?.index, .release);
        holder.set_ns.store(os.monotonicNs(), .release);
        holder.woken.event.set(io); // into this executor's LIFO slot
        const start_ns = os.monotonicNs();
        while (holder.woken.ran_ns.load(.acquire) == 0) {
            if (os.monotonicNs() -| start_ns > give_up_ns) return;
            std.atomic.spinLoopHint();
        }
    }

    /// Executor 0's holder: lets `holder` go (into executor 0's LIFO slot, so that only the
    /// spare can run it while this holds), and holds until it started elsewhere.
    fn release(holder: *HolderUntilServed, io: Io) void {
        holder.go.set(io);
        const start_ns = os.monotonicNs();
        while (holder.executor.load(.acquire) == std.math.maxInt(u32)) {
            if (os.monotonicNs() -| start_ns > give_up_ns) return;
            std.atomic.spinLoopHint();
        }
    }
};

test "progress: one executor: a task woken by a task that holds the spare runs meanwhile" {
    try skipWithoutHandOver();
    var rt = try Runtime.init(testing.allocator, .{ .executors = 1, .cpu_contention = .ignore });
    defer rt.deinit();
    const io = rt.io();
    var woken: Woken = .{};
    var holder: HolderUntilServed = .{ .woken = &woken };
    var waiter = try io.concurrent(Woken.wait, .{ &woken, io });
    defer waiter.cancel(io) catch {};
    try parked.waitParked(io, &waiter, .cancelable);
    var holding = try io.concurrent(HolderUntilServed.hold, .{ &holder, io });
    defer holding.cancel(io) catch {};
    try parked.waitParked(io, &holding, .cancelable);
    // Executor 0 is held until the holder started on the spare; then it is free, and the task
    // the holder woke waits in the spare's LIFO slot, which only the watchdog can hand on.
    var releasing = try io.concurrent(HolderUntilServed.release, .{ &holder, io });
    releasing.await(io);
    try holding.await(io);
    try waiter.await(io);
    const spare_index: u32 = @intCast(rt.state.scheduler.executors.len);
    try testing.expectEqual(spare_index, holder.executor.load(.acquire));
    const ran_ns = woken.ran_ns.load(.acquire);
    const after_ns = ran_ns -| holder.set_ns.load(.acquire);
    if (ran_ns == 0 or after_ns > run_within_ns) {
        std.debug.print("the woken task ran {d} ms after its wake on the spare, whose holder " ++
            "held until it ran (at most {d} s)\n", .{
            after_ns / ms,
            HolderUntilServed.give_up_ns / std.time.ns_per_s,
        });
        return error.TestUnexpectedResult;
    }
}
