//! Behaviour of `Lane` (and `Lane.Sharded`) on weft: admission outcomes, cancelation before
//! and after acceptance, shutdown under each policy, foreign threads, and an exactly-once
//! stress test. No timed assertions: tests wait for lane states (a job running, a caller in
//! the admission line), never for time. Blocked jobs wait on a `Gate` the test opens. A wait
//! for a caller the lane should have resumed (its gate open, or a shutdown that fails it),
//! and each shutdown, runs under `deadline`: a caller left behind fails its test in seconds,
//! with the task dump on stderr.
const std = @import("std");
const Io = std.Io;
const testing = std.testing;
const platform = @import("../platform.zig");
const Runtime = @import("runtime.zig").Runtime;
const Lane = @import("../lanes/Lane.zig");
const os = @import("../os/host.zig");
const HangReport = @import("HangReport.zig");
const deadline = @import("deadline.zig");

fn withRuntime(comptime body: fn (io: Io) anyerror!void) !void {
    var rt = try Runtime.init(testing.allocator, .{});
    defer rt.deinit();
    // The hang report reads the fiber runtime's scheduler; std.Io.Threaded has none.
    if (!platform.fibers) return body(rt.io());
    var hang: HangReport = .{};
    hang.start(rt);
    defer hang.stop();
    try body(rt.io());
}

/// A job that blocks its worker thread until the test opens the gate (kernel futex: the job
/// runs on a lane worker, not on a fiber).
pub const Gate = struct {
    open: std.atomic.Value(u32) = .init(0),
    passed: std.atomic.Value(u32) = .init(0),

    pub fn pass(gate: *Gate, value: u64) u64 {
        while (gate.open.load(.acquire) == 0) os.futexWait(&gate.open, 0, null);
        _ = gate.passed.fetchAdd(1, .monotonic);
        return value;
    }

    pub fn release(gate: *Gate) void {
        gate.open.store(1, .release);
        // maxInt(i32): the kernel reads the count as an int, so maxInt(u32) would wake one.
        os.futexWake(&gate.open, std.math.maxInt(i32));
    }
};

const Counter = struct {
    ran: std.atomic.Value(u64) = .init(0),

    fn bump(counter: *Counter) u64 {
        return counter.ran.fetchAdd(1, .monotonic) + 1;
    }
};

const Shape = struct { running: u32, queued: u32, waiting: u32 };

fn shapeOf(lane: *Lane) Shape {
    lane.lock.lock();
    defer lane.lock.unlock();
    return .{ .running = lane.running, .queued = lane.queue.len, .waiting = lane.admission.len };
}

/// Sleeps in short steps until the lane has this shape (a state, never a time).
fn waitShape(io: Io, lane: *Lane, shape: Shape) !void {
    var polls: u32 = 0;
    while (!std.meta.eql(shapeOf(lane), shape)) : (polls += 1) {
        if (polls == 100_000) return error.StateNeverReached; // ~ seconds: a hang, not a race
        try io.sleep(.fromMicroseconds(20), .awake);
    }
}

pub fn passThrough(lane: *Lane, io: Io, gate: *Gate, value: u64) Lane.Result(Gate.pass) {
    return lane.run(io, Gate.pass, .{ gate, value });
}

/// `passThrough` in a task named `name`, which a task dump shows.
fn passNamed(
    lane: *Lane,
    io: Io,
    gate: *Gate,
    value: u64,
    name: []const u8,
) Lane.Result(Gate.pass) {
    Runtime.setName(io, name);
    return passThrough(lane, io, gate, value);
}

fn bumpThrough(lane: *Lane, io: Io, counter: *Counter) Lane.Result(Counter.bump) {
    return lane.run(io, Counter.bump, .{counter});
}

fn square(x: u64) u64 {
    return x * x;
}

fn failIfOdd(x: u64) error{Odd}!u64 {
    if (x % 2 == 1) return error.Odd;
    return x / 2;
}

test "Lane: results and the job's own errors come back; error sets are preserved" {
    comptime std.debug.assert(Lane.Result(failIfOdd) == (error{Odd} || Lane.Error)!u64);
    try withRuntime(struct {
        fn body(io: Io) !void {
            const lane = try Lane.init(testing.allocator, .{ .threads = 2 });
            defer lane.deinit(io);
            try testing.expectEqual(@as(u64, 49), try lane.run(io, square, .{7}));
            try testing.expectEqual(@as(u64, 3), try lane.run(io, failIfOdd, .{6}));
            try testing.expectError(error.Odd, lane.run(io, failIfOdd, .{5}));
            try testing.expectEqual(@as(u64, 3), lane.stats().jobs_run);
        }
    }.body);
}

test "Lane: a full queue fails fast with QueueFull; the job never runs" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            const lane = try Lane.init(testing.allocator, .{ .threads = 1, .queue_limit = 1 });
            defer lane.deinit(io);
            var gate: Gate = .{};
            var counter: Counter = .{};
            var running = try io.concurrent(passThrough, .{ lane, io, &gate, 1 });
            try waitShape(io, lane, .{ .running = 1, .queued = 0, .waiting = 0 });
            var queued = try io.concurrent(passThrough, .{ lane, io, &gate, 2 });
            try waitShape(io, lane, .{ .running = 1, .queued = 1, .waiting = 0 });
            try testing.expectError(error.QueueFull, lane.run(io, Counter.bump, .{&counter}));
            gate.release();
            try testing.expectEqual(@as(u64, 1), try deadline.await(io, &running));
            try testing.expectEqual(@as(u64, 2), try deadline.await(io, &queued));
            try testing.expectEqual(@as(u64, 0), counter.ran.load(.monotonic));
            try testing.expectEqual(@as(u64, 1), lane.stats().calls_rejected);
        }
    }.body);
}

test "Lane: the admission line is FIFO, Overloaded past waiters_max, deadline withdraws" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            const lane = try Lane.init(testing.allocator, .{
                .threads = 1,
                .queue_limit = 1,
                .admission = .wait,
                .waiters_max = 2,
            });
            defer lane.deinit(io);
            var gate: Gate = .{};
            var counter: Counter = .{};
            var a = try io.concurrent(passThrough, .{ lane, io, &gate, 1 });
            try waitShape(io, lane, .{ .running = 1, .queued = 0, .waiting = 0 });
            var b = try io.concurrent(passThrough, .{ lane, io, &gate, 2 });
            try waitShape(io, lane, .{ .running = 1, .queued = 1, .waiting = 0 });
            var c = try io.concurrent(passThrough, .{ lane, io, &gate, 3 });
            try waitShape(io, lane, .{ .running = 1, .queued = 1, .waiting = 1 });
            // Waits in the line (second place) until its deadline, then withdraws: never runs.
            const timeout: Io.Timeout = .{ .duration = .{
                .raw = .fromMilliseconds(2),
                .clock = .awake,
            } };
            try testing.expectError(
                error.DeadlineExceeded,
                lane.runTimeout(io, timeout, Counter.bump, .{&counter}),
            );
            var d = try io.concurrent(passThrough, .{ lane, io, &gate, 4 });
            try waitShape(io, lane, .{ .running = 1, .queued = 1, .waiting = 2 });
            try testing.expectError(error.Overloaded, lane.run(io, Counter.bump, .{&counter}));
            gate.release();
            try testing.expectEqual(@as(u64, 1), try deadline.await(io, &a));
            try testing.expectEqual(@as(u64, 2), try deadline.await(io, &b));
            try testing.expectEqual(@as(u64, 3), try deadline.await(io, &c));
            try testing.expectEqual(@as(u64, 4), try deadline.await(io, &d));
            try testing.expectEqual(@as(u64, 0), counter.ran.load(.monotonic));
            const stats = lane.stats();
            try testing.expectEqual(@as(u64, 4), stats.jobs_run);
            try testing.expectEqual(@as(u64, 1), stats.waiters_withdrawn);
            try testing.expectEqual(@as(u64, 1), stats.calls_rejected);
        }
    }.body);
}

const AfterCancel = struct { result: u64 = 0, recanceled: bool = false, resumed: u32 = 0 };

fn passThenCheck(lane: *Lane, io: Io, gate: *Gate, out: *AfterCancel) Io.Cancelable!void {
    const result = lane.run(io, Gate.pass, .{ gate, 5 }) catch |err| switch (err) {
        error.Canceled => return error.Canceled, // not expected: accepted before the cancel
        else => unreachable,
    };
    out.resumed += 1;
    out.result = result;
    io.checkCancel() catch {
        out.recanceled = true;
        return error.Canceled;
    };
}

test "Lane: canceled after acceptance, the job runs once and the request is re-armed" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            const lane = try Lane.init(testing.allocator, .{ .threads = 1 });
            defer lane.deinit(io);
            var gate: Gate = .{};
            var out: AfterCancel = .{};
            var future = try io.concurrent(passThenCheck, .{ lane, io, &gate, &out });
            try waitShape(io, lane, .{ .running = 1, .queued = 0, .waiting = 0 });
            // The cancel blocks until the caller returns, so the gate opens from a thread,
            // once the caller has taken the cancel (a state, not a time: under a slow
            // machine or TSan a fixed delay let the job finish before the cancel arrived).
            var opener_failed = false;
            const opener = try std.Thread.spawn(.{}, openWhenCanceled, .{
                io, lane, &gate, &opener_failed,
            });
            try testing.expectError(error.Canceled, future.cancel(io));
            opener.join();
            try testing.expect(!opener_failed);
            try testing.expectEqual(@as(u64, 5), out.result);
            try testing.expect(out.recanceled);
            try testing.expectEqual(@as(u32, 1), out.resumed);
            try testing.expectEqual(@as(u32, 1), gate.passed.load(.monotonic));
            try testing.expectEqual(@as(u64, 1), lane.stats().canceled_after_acceptance);
        }
        fn openWhenCanceled(io: Io, lane: *Lane, gate: *Gate, failed: *bool) void {
            // Opens the gate in every case: a caller left waiting would hang the test.
            defer gate.release();
            var polls: u32 = 0;
            while (lane.stats().canceled_after_acceptance == 0) : (polls += 1) {
                if (polls == 100_000) { // ~ seconds: the cancel never came
                    failed.* = true;
                    return;
                }
                io.sleep(.fromMicroseconds(20), .awake) catch {};
            }
        }
    }.body);
}

test "Lane: canceled in the admission line, the job never runs" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            const lane = try Lane.init(testing.allocator, .{
                .threads = 1,
                .queue_limit = 1,
                .admission = .wait,
            });
            defer lane.deinit(io);
            var gate: Gate = .{};
            var counter: Counter = .{};
            var a = try io.concurrent(passThrough, .{ lane, io, &gate, 1 });
            try waitShape(io, lane, .{ .running = 1, .queued = 0, .waiting = 0 });
            var b = try io.concurrent(passThrough, .{ lane, io, &gate, 2 });
            try waitShape(io, lane, .{ .running = 1, .queued = 1, .waiting = 0 });
            var c = try io.concurrent(bumpThrough, .{ lane, io, &counter });
            try waitShape(io, lane, .{ .running = 1, .queued = 1, .waiting = 1 });
            try testing.expectError(error.Canceled, c.cancel(io));
            try waitShape(io, lane, .{ .running = 1, .queued = 1, .waiting = 0 });
            gate.release();
            try testing.expectEqual(@as(u64, 1), try deadline.await(io, &a));
            try testing.expectEqual(@as(u64, 2), try deadline.await(io, &b));
            try testing.expectEqual(@as(u64, 0), counter.ran.load(.monotonic));
            try testing.expectEqual(@as(u64, 1), lane.stats().waiters_withdrawn);
        }
    }.body);
}

/// Fills a 1-thread lane: one job running (gated), one queued, one in the admission line.
const Filled = struct {
    running: Io.Future(Lane.Result(Gate.pass)),
    queued: Io.Future(Lane.Result(Gate.pass)),
    waiting: Io.Future(Lane.Result(Gate.pass)),

    fn fill(io: Io, lane: *Lane, gate: *Gate) !Filled {
        var filled: Filled = undefined;
        filled.running = try io.concurrent(passNamed, .{ lane, io, gate, 1, "running job" });
        try waitShape(io, lane, .{ .running = 1, .queued = 0, .waiting = 0 });
        filled.queued = try io.concurrent(passNamed, .{ lane, io, gate, 2, "queued job" });
        try waitShape(io, lane, .{ .running = 1, .queued = 1, .waiting = 0 });
        filled.waiting = try io.concurrent(passNamed, .{ lane, io, gate, 3, "in the line" });
        try waitShape(io, lane, .{ .running = 1, .queued = 1, .waiting = 1 });
        return filled;
    }
};

fn testShutdown(io: Io, policy: Lane.Policy) !void {
    const lane = try Lane.init(testing.allocator, .{
        .threads = 1,
        .queue_limit = 1,
        .admission = .wait,
    });
    defer lane.deinit(io);
    var gate: Gate = .{};
    // A failed check opens the gate, else `deinit` waits for ever on the blocked job, and a
    // broken shutdown shows as a hang instead of the check that failed.
    errdefer gate.release();
    var filled = try Filled.fill(io, lane, &gate);
    // The running job is blocked: shutdown's deadline passes with jobs left.
    const report = try deadline.run(io, Lane.shutdown, .{ lane, io, .{
        .policy = policy,
        .timeout = .{ .duration = .{ .raw = .fromMilliseconds(2), .clock = .awake } },
    } });
    try testing.expectEqual(@as(u64, 1), report.waiters_failed);
    try testing.expectError(error.ShutdownInProgress, deadline.await(io, &filled.waiting));
    var counter: Counter = .{};
    try testing.expectError(error.ShutdownInProgress, lane.run(io, Counter.bump, .{&counter}));
    switch (policy) {
        .run => {
            try testing.expectEqual(@as(u64, 2), report.jobs_left);
            try testing.expectEqual(@as(u64, 0), report.jobs_failed);
            gate.release();
            try testing.expectEqual(@as(u64, 2), try deadline.await(io, &filled.queued));
        },
        .cancel => {
            try testing.expectEqual(@as(u64, 1), report.jobs_left);
            try testing.expectEqual(@as(u64, 1), report.jobs_failed);
            try testing.expectError(
                error.ShutdownInProgress,
                deadline.await(io, &filled.queued),
            );
            gate.release();
        },
    }
    try testing.expectEqual(@as(u64, 1), try deadline.await(io, &filled.running));
    try testing.expectEqual(@as(u64, 0), counter.ran.load(.monotonic));
}

test "Lane: shutdown(.run) fails the line, runs queued jobs, reports what was left" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            try testShutdown(io, .run);
        }
    }.body);
}

test "Lane: shutdown(.cancel) fails the line and queued jobs before they start" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            try testShutdown(io, .cancel);
        }
    }.body);
}

test "Lane: shutdown without a deadline waits for every job and joins the workers" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            const lane = try Lane.init(testing.allocator, .{ .threads = 3 });
            defer lane.deinit(io);
            var counter: Counter = .{};
            for (0..10) |_| _ = try lane.run(io, Counter.bump, .{&counter});
            const report = try deadline.run(io, Lane.shutdown, .{ lane, io, .{} });
            try testing.expectEqual(@as(u64, 10), report.jobs_run);
            try testing.expectEqual(@as(u64, 0), report.jobs_left);
            try testing.expect(lane.joined);
        }
    }.body);
}

fn foreignThread(lane: *Lane, io: Io, counter: *Counter, jobs: u32, failures: *u32) void {
    for (0..jobs) |_| _ = lane.run(io, Counter.bump, .{counter}) catch {
        failures.* += 1;
    };
}

test "Lane: plain OS threads call the lane through weft's Io" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            const lane = try Lane.init(testing.allocator, .{ .threads = 2, .admission = .wait });
            defer lane.deinit(io);
            var counter: Counter = .{};
            var failures: [3]u32 = @splat(0);
            var threads: [3]std.Thread = undefined;
            for (&threads, &failures) |*thread, *failed| {
                thread.* = try std.Thread.spawn(.{}, foreignThread, .{
                    lane, io, &counter, 200, failed,
                });
            }
            for (0..200) |_| _ = try lane.run(io, Counter.bump, .{&counter}); // and a fiber
            for (threads) |thread| thread.join();
            try testing.expectEqualSlices(u32, &.{ 0, 0, 0 }, &failures);
            try testing.expectEqual(@as(u64, 800), counter.ran.load(.monotonic));
            try testing.expectEqual(@as(u64, 800), lane.stats().jobs_run);
        }
    }.body);
}

const stress_fibers = 32;
const stress_jobs = 200;

const Tally = struct {
    slots: [stress_fibers * stress_jobs]std.atomic.Value(u8) = @splat(.init(0)),

    fn mark(tally: *Tally, slot: usize) usize {
        _ = tally.slots[slot].fetchAdd(1, .monotonic);
        return slot;
    }
};

fn stressFiber(lane: *Lane, io: Io, tally: *Tally, fiber: usize, resumed: *u64) !void {
    for (0..stress_jobs) |job| {
        const slot = fiber * stress_jobs + job;
        try testing.expectEqual(slot, try lane.run(io, Tally.mark, .{ tally, slot }));
        resumed.* += 1;
    }
}

test "Lane: stress, many fibers x jobs through a small queue, each job runs exactly once" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            const lane = try Lane.init(testing.allocator, .{
                .threads = 2,
                .queue_limit = 4,
                .admission = .wait,
                .waiters_max = stress_fibers,
            });
            defer lane.deinit(io);
            const tally = try testing.allocator.create(Tally);
            defer testing.allocator.destroy(tally);
            tally.* = .{};
            var resumed: [stress_fibers]u64 = @splat(0);
            var group: Io.Group = .init;
            defer group.cancel(io);
            for (0..stress_fibers) |fiber| {
                try group.concurrent(io, stressFiberChecked, .{
                    lane, io, tally, fiber, &resumed[fiber],
                });
            }
            try group.await(io);
            for (&tally.slots) |*slot| try testing.expectEqual(@as(u8, 1), slot.load(.monotonic));
            for (resumed) |count| try testing.expectEqual(@as(u64, stress_jobs), count);
            try testing.expectEqual(@as(u64, stress_fibers * stress_jobs), lane.stats().jobs_run);
        }
        fn stressFiberChecked(
            lane: *Lane,
            io: Io,
            tally: *Tally,
            fiber: usize,
            resumed: *u64,
        ) Io.Cancelable!void {
            stressFiber(lane, io, tally, fiber, resumed) catch |err| {
                std.debug.panic("stress fiber {d}: {t}", .{ fiber, err });
            };
        }
    }.body);
}

test "Lane: calls landing as workers give up polling are never lost" {
    // Workers poll 1 µs, so they park and are woken all the time, and a call often lands
    // just as its poller gives up: the hand-shake of `Lane.polling` (a submitter that sees a
    // poller wakes nobody) must still leave every job to somebody.
    try withRuntime(struct {
        const calls_each = 2_500;

        fn body(io: Io) !void {
            const lane = try Lane.init(testing.allocator, .{
                .threads = 3,
                .idle_spin_ns = 1_000,
                .caller_spin_ns = 0,
            });
            defer lane.deinit(io);
            // A lost job would hang the test: the watchdog turns that into a failure.
            var watchdog = try io.concurrent(panicAfter, .{ io, 120 });
            defer watchdog.cancel(io) catch {};
            var group: Io.Group = .init;
            defer group.cancel(io);
            var sums: [4]u64 = @splat(0);
            for (&sums) |*sum| try group.concurrent(io, caller, .{ lane, io, sum });
            try group.await(io);
            for (sums) |sum| try testing.expectEqual(@as(u64, calls_each * (calls_each - 1)), sum);
            const stats = lane.stats();
            try testing.expectEqual(@as(u64, sums.len * calls_each), stats.jobs_run);
            try testing.expect(stats.workers_woken <= stats.jobs_run);
        }
        fn caller(lane: *Lane, io: Io, sum: *u64) Io.Cancelable!void {
            for (0..calls_each) |i| {
                sum.* += lane.run(io, double, .{@as(u64, i)}) catch |err| switch (err) {
                    error.Canceled => return error.Canceled,
                    else => unreachable, // room for every call, no deadline, no shutdown
                };
                // Now and then let the workers' poll run out before the next call.
                if (i % 8 == 0) try io.sleep(.fromMicroseconds(3), .awake);
            }
        }
        fn double(x: u64) u64 {
            return 2 * x;
        }
        fn panicAfter(io: Io, seconds: i64) Io.Cancelable!void {
            try io.sleep(.fromSeconds(seconds), .awake);
            std.debug.panic("lane calls still pending after {d} s: a job was lost", .{seconds});
        }
    }.body);
}

test "Lane: works on std.Io.Threaded too" {
    const io = testing.io;
    const lane = try Lane.init(testing.allocator, .{ .threads = 2 });
    defer lane.deinit(io);
    try testing.expectEqual(@as(u64, 81), try lane.run(io, square, .{9}));
    try testing.expectError(error.Odd, lane.run(io, failIfOdd, .{9}));
}

// ---------------------------------------------------------------------------------- Sharded

fn passKeyed(
    sharded: *Lane.Sharded,
    io: Io,
    key: u64,
    gate: *Gate,
    value: u64,
) Lane.Result(Gate.pass) {
    return sharded.runKeyed(io, key, .none, Gate.pass, .{ gate, value });
}

test "Lane.Sharded: a full shard spills to one with room; rejects only when all are full" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            const sharded = try Lane.Sharded.init(testing.allocator, .{
                .shards = 2,
                .lane = .{ .threads = 1, .queue_limit = 1 },
            });
            defer sharded.deinit(io);
            const shard0 = sharded.shards[0];
            const shard1 = sharded.shards[1];
            var gate: Gate = .{};
            defer gate.release(); // first, on a failure: an accepted job runs to completion
            var counter: Counter = .{};
            // Shard 1's worker is held first, so that it cannot take what queues on shard 0.
            var c = try io.concurrent(passKeyed, .{ sharded, io, 1, &gate, 3 });
            try waitShape(io, shard1, .{ .running = 1, .queued = 0, .waiting = 0 });
            var a = try io.concurrent(passKeyed, .{ sharded, io, 0, &gate, 1 });
            try waitShape(io, shard0, .{ .running = 1, .queued = 0, .waiting = 0 });
            var b = try io.concurrent(passKeyed, .{ sharded, io, 0, &gate, 2 });
            try waitShape(io, shard0, .{ .running = 1, .queued = 1, .waiting = 0 });
            // Shard 0 is full; shard 1 has room: the call keyed to shard 0 spills there.
            var d = try io.concurrent(passKeyed, .{ sharded, io, 0, &gate, 4 });
            try waitShape(io, shard1, .{ .running = 1, .queued = 1, .waiting = 0 });
            try testing.expectError(
                error.QueueFull,
                sharded.runKeyed(io, 0, .none, Counter.bump, .{&counter}),
            );
            gate.release();
            try testing.expectEqual(@as(u64, 1), try deadline.await(io, &a));
            try testing.expectEqual(@as(u64, 2), try deadline.await(io, &b));
            try testing.expectEqual(@as(u64, 3), try deadline.await(io, &c));
            try testing.expectEqual(@as(u64, 4), try deadline.await(io, &d));
            try testing.expectEqual(@as(u64, 0), counter.ran.load(.monotonic));
            try testing.expectEqual(@as(u64, 4), sharded.stats().jobs_run);
        }
    }.body);
}

fn shardedBumps(sharded: *Lane.Sharded, io: Io, counter: *Counter) Io.Cancelable!void {
    for (0..100) |_| _ = sharded.run(io, Counter.bump, .{counter}) catch |err| {
        std.debug.panic("sharded run: {t}", .{err});
    };
}

fn shardedGatePass(sharded: *Lane.Sharded, io: Io, gate: *Gate) (Lane.Error || error{Wrong})!void {
    if (try sharded.run(io, Gate.pass, .{ gate, 7 }) != 7) return error.Wrong;
}

test "Lane.Sharded: run stays on a shard while it has a free worker, then moves on" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            const sharded = try Lane.Sharded.init(testing.allocator, .{
                .shards = 3,
                .lane = .{ .threads = 1, .queue_limit = 2 },
            });
            defer sharded.deinit(io);
            // Shard 0 is free: the first call goes there (the sticky shard starts at 0).
            var counter: Counter = .{};
            try testing.expectEqual(@as(u64, 1), try sharded.run(io, Counter.bump, .{&counter}));
            try testing.expectEqual(@as(u64, 1), sharded.shards[0].stats().jobs_run);
            // The worker counted itself free (the hint too, in the same lock hold) before it
            // told the caller, so a caller coming straight back finds the shard free.
            try testing.expectEqual(
                Shape{ .running = 0, .queued = 0, .waiting = 0 },
                shapeOf(sharded.shards[0]),
            );
            try testing.expect(sharded.shards[0].hasFreeWorker());
            // Its one worker held by a gated job, shard 0 has no free worker: the next call
            // goes round-robin to another shard instead of queueing behind the gate.
            var gate: Gate = .{};
            var held = try io.concurrent(shardedGatePass, .{ sharded, io, &gate });
            defer held.cancel(io) catch {};
            defer gate.release(); // first, on a failure: an accepted job runs to completion
            try waitShape(io, sharded.shards[0], .{ .running = 1, .queued = 0, .waiting = 0 });
            try testing.expect(!sharded.shards[0].hasFreeWorker());
            try testing.expectEqual(@as(u64, 2), try sharded.run(io, Counter.bump, .{&counter}));
            // Shard 0 still counts only the first call: its gated job has not finished.
            try testing.expectEqual(@as(u64, 1), sharded.shards[0].stats().jobs_run);
            const elsewhere = sharded.shards[1].stats().jobs_run +
                sharded.shards[2].stats().jobs_run;
            try testing.expectEqual(@as(u64, 1), elsewhere);
            gate.release();
            try deadline.await(io, &held);
            try testing.expectEqual(@as(u64, 2), sharded.shards[0].stats().jobs_run);
            try testing.expectEqual(@as(u32, 1), gate.passed.load(.monotonic));
        }
    }.body);
}

fn shardedGatePassAny(sharded: *Lane.Sharded, io: Io, gate: *Gate) Io.Cancelable!void {
    _ = sharded.run(io, Gate.pass, .{ gate, 7 }) catch |err| switch (err) {
        error.Canceled => return error.Canceled,
        else => unreachable, // `.wait` admission with room for every call, no deadline
    };
}

test "Lane.Sharded: a burst of calls is dealt out evenly over the shards" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            const shards = 4;
            const calls = 40;
            const sharded = try Lane.Sharded.init(testing.allocator, .{
                .shards = shards,
                .lane = .{ .threads = 1, .queue_limit = calls },
            });
            defer sharded.deinit(io);
            var gate: Gate = .{};
            var group: Io.Group = .init;
            defer group.cancel(io);
            defer gate.release(); // first, on a failure: an accepted job runs to completion
            for (0..calls) |_| {
                try group.concurrent(io, shardedGatePassAny, .{ sharded, io, &gate });
            }
            // Every worker is held at the gate by its first job: each call is queued or
            // running on the shard it was dealt to.
            var polls: u32 = 0;
            while (true) : (polls += 1) {
                var accepted: u32 = 0;
                for (sharded.shards) |shard| {
                    const shape = shapeOf(shard);
                    accepted += shape.running + shape.queued;
                }
                if (accepted == calls) break;
                if (polls == 100_000) return error.StateNeverReached;
                try io.sleep(.fromMicroseconds(20), .awake);
            }
            // Ten each when dealt strictly in turn; two executors submitting at once may
            // shift a call or two. (A rotation that skipped the busy shard by an offset dealt
            // 7, 13, 7, 13 here.)
            for (sharded.shards) |shard| {
                const shape = shapeOf(shard);
                const dealt = shape.running + shape.queued;
                try testing.expect(dealt >= calls / shards - 2 and dealt <= calls / shards + 2);
            }
            gate.release();
            try deadline.awaitGroup(io, &group);
            try testing.expectEqual(@as(u32, calls), gate.passed.load(.monotonic));
        }
    }.body);
}

fn shardedKeyedGatePass(
    sharded: *Lane.Sharded,
    io: Io,
    gate: *Gate,
) (Lane.Error || error{Wrong})!void {
    if (try sharded.runKeyed(io, 0, .none, Gate.pass, .{ gate, 7 }) != 7) return error.Wrong;
}

fn shardedKeyedBump(sharded: *Lane.Sharded, io: Io, counter: *Counter) Io.Cancelable!void {
    _ = sharded.runKeyed(io, 0, .none, Counter.bump, .{counter}) catch |err| switch (err) {
        error.Canceled => return error.Canceled,
        else => unreachable, // `.wait` admission with room for every call, no deadline
    };
}

test "Lane.Sharded: an idle shard's worker runs the jobs queued behind a busy shard's" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            const queued = 6;
            const sharded = try Lane.Sharded.init(testing.allocator, .{
                .shards = 2,
                .lane = .{ .threads = 1, .queue_limit = 8 },
            });
            defer sharded.deinit(io);
            const busy = sharded.shards[0];
            const idle = sharded.shards[1];
            var gate: Gate = .{};
            var counter: Counter = .{};
            var group: Io.Group = .init;
            defer group.cancel(io);
            var held = try io.concurrent(shardedKeyedGatePass, .{ sharded, io, &gate });
            defer held.cancel(io) catch {};
            defer gate.release(); // first, on a failure: an accepted job runs to completion
            try waitShape(io, busy, .{ .running = 1, .queued = 0, .waiting = 0 });
            // Key 0: every call is queued on the shard whose one worker is held at the gate.
            for (0..queued) |_| {
                try group.concurrent(io, shardedKeyedBump, .{ sharded, io, &counter });
            }
            // The other shard's worker takes them all while the gate is still shut (a bounded
            // wait: without stealing they would wait for the gate).
            var polls: u32 = 0;
            while (counter.ran.load(.monotonic) < queued) : (polls += 1) {
                if (polls == 100_000) return error.StateNeverReached;
                try io.sleep(.fromMicroseconds(20), .awake);
            }
            try deadline.awaitGroup(io, &group);
            try testing.expectEqual(@as(u64, queued), counter.ran.load(.monotonic));
            try testing.expectEqual(@as(u32, 0), gate.passed.load(.monotonic));
            try testing.expectEqual(@as(u64, queued), idle.stats().jobs_stolen);
            try testing.expectEqual(@as(u64, queued), idle.stats().jobs_run);
            try testing.expectEqual(@as(u64, 0), busy.stats().jobs_run);
            try waitShape(io, busy, .{ .running = 1, .queued = 0, .waiting = 0 });
            gate.release();
            try deadline.await(io, &held);
            try testing.expectEqual(@as(u64, 1), busy.stats().jobs_run);
            const report = try deadline.run(io, Lane.Sharded.shutdown, .{ sharded, io, .{} });
            try testing.expectEqual(@as(u64, queued + 1), report.jobs_run);
            try testing.expectEqual(@as(u64, 0), report.jobs_left);
        }
    }.body);
}

/// The order in which jobs started, by their ids.
const StartOrder = struct {
    ids: [8]u32 = undefined,
    len: std.atomic.Value(u32) = .init(0),

    fn record(order: *StartOrder, id: u32) u32 {
        const index = order.len.fetchAdd(1, .monotonic);
        order.ids[index] = id;
        return id;
    }
};

fn shardedKeyedRecord(
    sharded: *Lane.Sharded,
    io: Io,
    key: u64,
    order: *StartOrder,
    id: u32,
) Io.Cancelable!void {
    _ = sharded.runKeyed(io, key, .none, StartOrder.record, .{ order, id }) catch |err| {
        switch (err) {
            error.Canceled => return error.Canceled,
            else => unreachable, // `.wait` admission with room for every call, no deadline
        }
    };
}

fn shardedKeyedGatePassOn(
    sharded: *Lane.Sharded,
    io: Io,
    key: u64,
    gate: *Gate,
) (Lane.Error || error{Wrong})!void {
    if (try sharded.runKeyed(io, key, .none, Gate.pass, .{ gate, 7 }) != 7) return error.Wrong;
}

test "Lane.Sharded: a steal takes the victim shard's oldest job, so jobs start in FIFO order" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            const queued = 4;
            const sharded = try Lane.Sharded.init(testing.allocator, .{
                .shards = 2,
                .lane = .{ .threads = 1, .queue_limit = 8 },
            });
            defer sharded.deinit(io);
            const victim = sharded.shards[0];
            const thief = sharded.shards[1];
            // Both workers held at gates; jobs 1..4 queue on shard 0, in order.
            var victim_gate: Gate = .{};
            var thief_gate: Gate = .{};
            var victim_held = try io.concurrent(shardedKeyedGatePassOn, .{
                sharded, io, 0, &victim_gate,
            });
            defer victim_held.cancel(io) catch {};
            defer victim_gate.release(); // first, on a failure: an accepted job runs to its end
            try waitShape(io, victim, .{ .running = 1, .queued = 0, .waiting = 0 });
            var thief_held = try io.concurrent(shardedKeyedGatePassOn, .{
                sharded, io, 1, &thief_gate,
            });
            defer thief_held.cancel(io) catch {};
            defer thief_gate.release();
            try waitShape(io, thief, .{ .running = 1, .queued = 0, .waiting = 0 });
            var order: StartOrder = .{};
            var group: Io.Group = .init;
            defer group.cancel(io);
            for (1..queued + 1) |id| {
                try group.concurrent(io, shardedKeyedRecord, .{
                    sharded, io, 0, &order, @as(u32, @intCast(id)),
                });
                const shape: Shape = .{ .running = 1, .queued = @intCast(id), .waiting = 0 };
                try waitShape(io, victim, shape);
            }
            // The thief's worker, free, steals them one by one while the victim's stays held.
            thief_gate.release();
            try deadline.await(io, &thief_held);
            try deadline.awaitGroup(io, &group);
            try testing.expectEqual(@as(u32, queued), order.len.load(.monotonic));
            try testing.expectEqualSlices(u32, &.{ 1, 2, 3, 4 }, order.ids[0..queued]);
            try testing.expectEqual(@as(u64, queued), thief.stats().jobs_stolen);
            victim_gate.release();
            try deadline.await(io, &victim_held);
        }
    }.body);
}

fn shardedKeyedBumps(sharded: *Lane.Sharded, io: Io, counter: *Counter) Io.Cancelable!void {
    for (0..200) |_| try shardedKeyedBump(sharded, io, counter);
}

test "Lane.Sharded: calls all keyed to one shard, spilling and stolen; every job once" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            try floodSharded(io, 4, shardedKeyedBumps, 10, 2000);
        }
    }.body);
}

/// `fibers` fibers each make their calls (`task`) to 3 one-worker shards with `queue_limit`
/// each; every call runs once, the counts and the shutdown report agree, and later calls are
/// refused.
fn floodSharded(
    io: Io,
    queue_limit: u32,
    comptime task: fn (*Lane.Sharded, Io, *Counter) Io.Cancelable!void,
    fibers: usize,
    calls_total: u64,
) !void {
    const sharded = try Lane.Sharded.init(testing.allocator, .{
        .shards = 3,
        .lane = .{ .threads = 1, .queue_limit = queue_limit, .admission = .wait },
    });
    defer sharded.deinit(io);
    var counter: Counter = .{};
    var group: Io.Group = .init;
    defer group.cancel(io);
    for (0..fibers) |_| try group.concurrent(io, task, .{ sharded, io, &counter });
    try group.await(io);
    try testing.expectEqual(calls_total, counter.ran.load(.monotonic));
    var jobs_total: u64 = 0;
    for (sharded.shards) |shard| jobs_total += shard.stats().jobs_run;
    try testing.expectEqual(calls_total, jobs_total);
    const stats = sharded.stats();
    try testing.expectEqual(calls_total, stats.jobs_run);
    try testing.expect(stats.jobs_stolen <= stats.jobs_run);
    const report = try deadline.run(io, Lane.Sharded.shutdown, .{ sharded, io, .{} });
    try testing.expectEqual(calls_total, report.jobs_run);
    try testing.expectEqual(@as(u64, 0), report.jobs_left);
    try testing.expectError(error.ShutdownInProgress, sharded.run(io, square, .{2}));
}

test "Lane: executors stop spinning for work while busy lane workers fill every CPU" {
    if (!platform.fibers) return os.skipTest(@src(), "std.Io.Threaded has no executors");
    var rt = try Runtime.init(testing.allocator, .{});
    defer rt.deinit();
    const io = rt.io();
    const scheduler = &rt.state.scheduler;
    try testing.expect(scheduler.searchMaySpin()); // no lane work: the search spins
    const lane =
        try Lane.init(testing.allocator, .{ .threads = scheduler.cpus, .queue_limit = 64 });
    defer lane.deinit(io);
    var gate: Gate = .{};
    var group: Io.Group = .init;
    defer group.cancel(io);
    defer gate.release(); // first, on a failure: an accepted job runs to completion
    for (0..scheduler.cpus) |i| try group.concurrent(io, passThroughAny, .{ lane, io, &gate, i });
    // Every worker held by a job: the lanes want every CPU.
    try waitShape(io, lane, .{ .running = scheduler.cpus, .queued = 0, .waiting = 0 });
    try testing.expect(!scheduler.searchMaySpin());
    gate.release();
    try deadline.awaitGroup(io, &group);
    // Each worker counts itself idle once it finds its queue empty, just after its last job.
    var polls: u32 = 0;
    while (!scheduler.searchMaySpin()) : (polls += 1) {
        if (polls == 100_000) return error.StateNeverReached;
        try io.sleep(.fromMicroseconds(20), .awake);
    }
}

fn passThroughAny(lane: *Lane, io: Io, gate: *Gate, value: u64) Io.Cancelable!void {
    _ = lane.run(io, Gate.pass, .{ gate, value }) catch |err| switch (err) {
        error.Canceled => return error.Canceled,
        else => unreachable, // room for every call, no deadline
    };
}

test "Lane.Sharded: many fibers, every job once; shutdown sums reports" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            try floodSharded(io, 2, shardedBumps, 8, 800);
        }
    }.body);
}
