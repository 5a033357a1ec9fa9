//! Behaviour of the std.Io task core on weft, written against std.Io only.
const std = @import("std");
const builtin = @import("builtin");
const Io = std.Io;
const testing = std.testing;
const Runtime = @import("../Runtime.zig");
const Executor = @import("../sched/Executor.zig");
const Task = @import("../sched/Task.zig");
const os = @import("../os/linux.zig");
const parked = @import("parked.zig");

fn withRuntime(comptime body: fn (io: Io) anyerror!void) !void {
    var rt = try Runtime.init(testing.allocator, .{});
    defer rt.deinit();
    try body(rt.io());
}

/// For properties of one executor (its timer order): several executors each fire their own
/// timers, and across them the order is only as good as each thread's wake-up latency.
fn withOneExecutor(comptime body: fn (io: Io) anyerror!void) !void {
    var rt = try Runtime.init(testing.allocator, .{ .executors = 1 });
    defer rt.deinit();
    try body(rt.io());
}

fn square(x: u64) u64 {
    return x * x;
}

test "Runtime: async/await returns results; await is idempotent at the user level" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var a = io.async(square, .{7});
            var b = io.async(square, .{9});
            try testing.expectEqual(@as(u64, 81), b.await(io));
            try testing.expectEqual(@as(u64, 49), a.await(io));
            try testing.expectEqual(@as(u64, 49), a.await(io));
        }
    }.body);
}

const Aligned = struct { value: u64 align(64) };
fn makeAligned(v: u64) Aligned {
    return .{ .value = v };
}

test "Runtime: 64-byte-aligned results" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var f = try io.concurrent(makeAligned, .{5});
            const r = f.await(io);
            try testing.expectEqual(@as(u64, 5), r.value);
        }
    }.body);
}

const OverAligned = struct { bytes: [40]u8 align(256) };
fn copyOverAligned(input: OverAligned, salt: u8) OverAligned {
    var output = input;
    for (&output.bytes) |*byte| byte.* +%= salt;
    return output;
}

test "Runtime: contexts and results aligned above a task's own 64 bytes" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var input: OverAligned = undefined;
            for (&input.bytes, 0..) |*byte, index| byte.* = @intCast(index);
            var futures: [8]Io.Future(OverAligned) = undefined;
            for (&futures, 0..) |*future, index| {
                future.* = try io.concurrent(copyOverAligned, .{ input, @as(u8, @intCast(index)) });
            }
            for (&futures, 0..) |*future, index| {
                // Debug builds check the alignment where std casts the task's context and
                // result bytes back to their types.
                const output = future.await(io);
                for (output.bytes, 0..) |byte, position| {
                    try testing.expectEqual(@as(u8, @intCast(position + index)), byte);
                }
            }
        }
    }.body);
}

/// Starts `function(io)` concurrently, waits until it is parked in its first wait (as `wait`
/// says), cancels it, and expects the cancelation to come back as its result.
fn expectCanceledAfterStart(io: Io, comptime function: anytype, wait: parked.Wait) !void {
    var future = try io.concurrent(function, .{io});
    try parked.waitParked(io, &future, wait);
    try testing.expectError(error.Canceled, future.cancel(io));
}

fn sleeper(io: Io, ns: u64) Io.Cancelable!void {
    try io.sleep(.fromNanoseconds(ns), .awake);
}

test "Runtime: cancel a sleeping task promptly; delivered exactly once" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            const start = Io.Clock.awake.now(io);
            var f = try io.concurrent(sleeper, .{ io, 10 * std.time.ns_per_s });
            try parked.waitParked(io, &f, .cancelable);
            try testing.expectError(error.Canceled, f.cancel(io));
            const elapsed = start.durationTo(Io.Clock.awake.now(io));
            try testing.expect(elapsed.nanoseconds < std.time.ns_per_s);
        }
    }.body);
}

fn twoPoints(io: Io) error{ Canceled, SecondFailed }!void {
    io.sleep(.fromSeconds(10), .awake) catch |err| switch (err) {
        error.Canceled => {
            // Delivered once: the next point succeeds.
            io.sleep(.fromMilliseconds(1), .awake) catch return error.SecondFailed;
            return error.Canceled;
        },
    };
}

test "Runtime: cancelation is delivered exactly once" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            try expectCanceledAfterStart(io, twoPoints, .cancelable);
        }
    }.body);
}

test "Runtime: cancel before start and after completion" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var before = io.async(sleeper, .{ io, std.time.ns_per_s });
            try testing.expectError(error.Canceled, before.cancel(io));
            var after = io.async(square, .{3});
            try io.sleep(.fromMilliseconds(1), .awake);
            try testing.expectEqual(@as(u64, 9), after.cancel(io));
        }
    }.body);
}

fn rendezvous(io: Io, queue: *Io.Queue(u32)) Io.QueueClosedError!void {
    queue.putOne(io, 42) catch |err| switch (err) {
        error.Canceled => return,
        error.Closed => return error.Closed,
    };
}

test "Runtime: concurrent is really concurrent (zero-capacity queue rendezvous)" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var queue: Io.Queue(u32) = .init(&.{});
            var f = try io.concurrent(rendezvous, .{ io, &queue });
            try testing.expectEqual(@as(u32, 42), try queue.getOne(io));
            try f.await(io);
        }
    }.body);
}

fn member(io: Io, counter: *std.atomic.Value(u32)) Io.Cancelable!void {
    try io.sleep(.fromMilliseconds(1), .awake);
    _ = counter.fetchAdd(1, .monotonic);
}

fn stubborn(io: Io, counter: *std.atomic.Value(u32)) Io.Cancelable!void {
    io.sleep(.fromSeconds(10), .awake) catch |err| {
        _ = counter.fetchAdd(1, .monotonic);
        return err;
    };
}

test "Runtime: group await, token null afterwards" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var counter: std.atomic.Value(u32) = .init(0);
            var group: Io.Group = .init;
            for (0..100) |_| group.async(io, member, .{ io, &counter });
            for (0..100) |_| try group.concurrent(io, member, .{ io, &counter });
            try group.await(io);
            try testing.expectEqual(@as(u32, 200), counter.load(.monotonic));
            try testing.expect(group.token.load(.monotonic) == null);
        }
    }.body);
}

test "Runtime: group cancel swallows members' Canceled" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var counter: std.atomic.Value(u32) = .init(0);
            var group: Io.Group = .init;
            for (0..50) |_| try group.concurrent(io, stubborn, .{ io, &counter });
            try parked.waitMembersParked(io, &group, 50, .cancelable);
            group.cancel(io);
            try testing.expectEqual(@as(u32, 50), counter.load(.monotonic));
            try testing.expect(group.token.load(.monotonic) == null);
        }
    }.body);
}

/// A member that, once canceled, adds another member to its own group: that one must start
/// canceled (its sleep fails at once) rather than keep the canceling group waiting 10 s.
fn respawner(io: Io, group: *Io.Group, counter: *std.atomic.Value(u32)) Io.Cancelable!void {
    io.sleep(.fromSeconds(10), .awake) catch |err| {
        _ = counter.fetchAdd(1, .monotonic);
        group.concurrent(io, stubborn, .{ io, counter }) catch {};
        group.async(io, stubborn, .{ io, counter });
        return err;
    };
}

test "Runtime: members added while the group is canceled start canceled" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var counter: std.atomic.Value(u32) = .init(0);
            var group: Io.Group = .init;
            for (0..5) |_| try group.concurrent(io, respawner, .{ io, &group, &counter });
            try parked.waitMembersParked(io, &group, 5, .cancelable);
            group.cancel(io);
            // 5 respawners and the 10 members they added, each canceled exactly once.
            try testing.expectEqual(@as(u32, 15), counter.load(.monotonic));
            try testing.expect(group.token.load(.monotonic) == null);
        }
    }.body);
}

/// A member that waits until `gate` opens, counting a cancel that ends its wait in `canceled`.
fn gated(
    io: Io,
    gate: *std.atomic.Value(u32),
    canceled: *std.atomic.Value(u32),
) Io.Cancelable!void {
    // Bounded by the gate's opening (a spurious wake-up looks again).
    while (gate.load(.acquire) == 0) {
        io.futexWait(u32, &gate.raw, 0) catch |err| {
            _ = canceled.fetchAdd(1, .monotonic);
            return err;
        };
    }
}

fn cancelGroup(io: Io, group: *Io.Group, ended: *std.atomic.Value(bool)) void {
    group.cancel(io);
    ended.store(true, .release);
}

test "Runtime: a group cancel reaches every member, the newest as the oldest" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            const members = 4;
            var gate: std.atomic.Value(u32) = .init(0);
            var canceled: std.atomic.Value(u32) = .init(0);
            var group: Io.Group = .init;
            for (0..members) |_| try group.concurrent(io, gated, .{ io, &gate, &canceled });
            try parked.waitMembersParked(io, &group, members, .cancelable);
            var ended: std.atomic.Value(bool) = .init(false);
            var canceling = try io.concurrent(cancelGroup, .{ io, &group, &ended });
            // A member the cancel missed would keep the cancel waiting for ever: after a few
            // seconds the gate opens, so that the test fails by name rather than at its limit.
            for (0..5_000) |_| {
                if (ended.load(.acquire)) break;
                try io.sleep(.fromMilliseconds(1), .awake);
            } else {
                gate.store(1, .release);
                io.futexWake(u32, &gate.raw, members);
            }
            canceling.await(io);
            if (canceled.load(.monotonic) != members) {
                std.debug.print("the cancel reached {d} of {d} members\n", .{
                    canceled.load(.monotonic),
                    members,
                });
                return error.TestMemberNotCanceled;
            }
            try testing.expect(group.token.load(.monotonic) == null);
        }
    }.body);
}

fn groupAwaiter(io: Io, counter: *std.atomic.Value(u32)) Io.Cancelable!void {
    var group: Io.Group = .init;
    for (0..10) |_| group.concurrent(io, stubborn, .{ io, counter }) catch unreachable;
    try group.await(io);
}

test "Runtime: a canceled group awaiter cancels members and gets Canceled" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var counter: std.atomic.Value(u32) = .init(0);
            var f = try io.concurrent(groupAwaiter, .{ io, &counter });
            // Parked in its group await: every member was spawned before.
            try parked.waitParked(io, &f, .cancelable);
            try testing.expectError(error.Canceled, f.cancel(io));
            try testing.expectEqual(@as(u32, 10), counter.load(.monotonic));
        }
    }.body);
}

fn protectedSleep(io: Io) error{ Canceled, WasInterrupted }!void {
    const previous = io.swapCancelProtection(.blocked);
    // Sleep, protected, until the request has arrived (a state, not a time: on a loaded machine
    // the canceler's own sleep may outlast any fixed one here).
    const task = Executor.currentTask().?;
    while (task.cancel_state.load(.acquire) != .requested) {
        io.sleep(.fromMilliseconds(1), .awake) catch return error.WasInterrupted;
    }
    if (io.swapCancelProtection(previous) != .blocked) return error.WasInterrupted;
    try io.checkCancel();
}

test "Runtime: swapCancelProtection defers a request to the first point after" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            // Parked uncancelably: the protection holds while it sleeps.
            try expectCanceledAfterStart(io, protectedSleep, .uncancelable);
        }
    }.body);
}

fn recanceler(io: Io) error{ Canceled, NotRearmed }!void {
    io.sleep(.fromSeconds(10), .awake) catch {
        io.recancel();
        io.checkCancel() catch return error.Canceled;
        return error.NotRearmed;
    };
}

test "Runtime: recancel re-arms the request" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            try expectCanceledAfterStart(io, recanceler, .cancelable);
        }
    }.body);
}

/// Checks for cancelation in a loop until `stop`; if it is not set within 10 s (the stopper
/// needs 1 ms), the loop's checks gave the other task no turn: `error.Starved`, not a hang.
fn spinner(io: Io, stop: *std.atomic.Value(bool)) error{ Canceled, Starved }!void {
    const deadline_ns = os.monotonicNs() + 10 * std.time.ns_per_s;
    while (!stop.load(.acquire)) {
        try io.checkCancel();
        if (os.monotonicNs() > deadline_ns) return error.Starved;
    }
}

fn stopper(io: Io, stop: *std.atomic.Value(bool)) Io.Cancelable!void {
    try io.sleep(.fromMilliseconds(1), .awake);
    stop.store(true, .release);
}

test "Runtime: checkCancel in a CPU loop does not starve other fibers" {
    // One executor: with more, the stopper would run beside the spinner, yields or not.
    try withOneExecutor(struct {
        fn body(io: Io) !void {
            var stop: std.atomic.Value(bool) = .init(false);
            var spin = try io.concurrent(spinner, .{ io, &stop });
            var other = try io.concurrent(stopper, .{ io, &stop });
            try other.await(io);
            try spin.await(io);
        }
    }.body);
}

test "Runtime: futex mismatch returns at once, timeout returns normally" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var word: u32 = 3;
            try io.futexWait(u32, &word, 4);
            const start = Io.Clock.awake.now(io);
            try io.futexWaitTimeout(u32, &word, 3, .{ .duration = .{
                .raw = .fromMilliseconds(2),
                .clock = .awake,
            } });
            const slept = start.durationTo(Io.Clock.awake.now(io));
            try testing.expect(slept.nanoseconds >= 2 * std.time.ns_per_ms);
        }
    }.body);
}

/// Sets `event` once `waiter` is parked on it: set before, it would wake nobody.
fn foreignWaker(io: Io, event: *Io.Event, waiter: *const Task) void {
    parked.waitTaskParked(io, waiter, .cancelable) catch unreachable; // a thread is never canceled
    event.set(io);
}

fn foreignWaiter(io: Io, event: *Io.Event, done: *std.atomic.Value(bool)) void {
    event.waitUncancelable(io);
    done.store(true, .release);
}

test "Runtime: futex wake from a foreign std.Thread, and wait on one" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var event: Io.Event = .unset;
            const me = Executor.currentTask().?;
            const waker = try std.Thread.spawn(.{}, foreignWaker, .{ io, &event, me });
            try event.wait(io);
            waker.join();

            var second: Io.Event = .unset;
            var done: std.atomic.Value(bool) = .init(false);
            const waiter = try std.Thread.spawn(.{}, foreignWaiter, .{ io, &second, &done });
            try io.sleep(.fromMilliseconds(2), .awake);
            second.set(io);
            waiter.join();
            try testing.expect(done.load(.acquire));
        }
    }.body);
}

fn locker(io: Io, mutex: *Io.Mutex, total: *u64) Io.Cancelable!void {
    for (0..1000) |i| {
        try mutex.lock(io);
        defer mutex.unlock(io);
        const value = total.*;
        if (i % 100 == 0) try io.sleep(.fromNanoseconds(1), .awake);
        total.* = value + 1;
    }
}

test "Runtime: std Mutex under contention" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var mutex: Io.Mutex = .init;
            var total: u64 = 0;
            var group: Io.Group = .init;
            for (0..8) |_| try group.concurrent(io, locker, .{ io, &mutex, &total });
            try group.await(io);
            try testing.expectEqual(@as(u64, 8000), total);
        }
    }.body);
}

fn threadLocker(io: Io, mutex: *Io.Mutex, total: *u64) void {
    for (0..5000) |_| {
        mutex.lockUncancelable(io);
        total.* += 1;
        mutex.unlock(io);
    }
}

fn fiberLocker(io: Io, mutex: *Io.Mutex, total: *u64) Io.Cancelable!void {
    for (0..5000) |i| {
        try mutex.lock(io);
        total.* += 1;
        mutex.unlock(io);
        // Park now and then so threads and fibers interleave on the futex table.
        if (i % 64 == 0) try io.sleep(.fromMicroseconds(10), .awake);
    }
}

test "Runtime: std Mutex shared by fibers and foreign threads loses no update or wake" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var mutex: Io.Mutex = .init;
            var total: u64 = 0;
            var threads: [2]std.Thread = undefined;
            for (&threads) |*t| {
                t.* = try std.Thread.spawn(.{}, threadLocker, .{ io, &mutex, &total });
            }
            var group: Io.Group = .init;
            for (0..4) |_| try group.concurrent(io, fiberLocker, .{ io, &mutex, &total });
            try group.await(io);
            for (threads) |t| t.join();
            try testing.expectEqual(@as(u64, 6 * 5000), total);
        }
    }.body);
}

fn producer(io: Io, queue: *Io.Queue(u32), base: u32) Io.Cancelable!void {
    for (0..500) |i| queue.putOne(io, base + @as(u32, @intCast(i))) catch |err| switch (err) {
        error.Canceled => return error.Canceled,
        error.Closed => unreachable,
    };
}

test "Runtime: std Queue with several producers loses nothing" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var buffer: [4]u32 = undefined;
            var queue: Io.Queue(u32) = .init(&buffer);
            var group: Io.Group = .init;
            for (0..4) |p| {
                try group.concurrent(io, producer, .{ io, &queue, @as(u32, @intCast(p)) * 1000 });
            }
            var sum: u64 = 0;
            for (0..2000) |_| sum += try queue.getOne(io);
            try group.await(io);
            var expected: u64 = 0;
            for (0..4) |p| for (0..500) |i| {
                expected += p * 1000 + i;
            };
            try testing.expectEqual(expected, sum);
        }
    }.body);
}

test "Runtime: timers fire in deadline order" {
    // The timers start as their tasks are spawned, 2 ms apart; under ThreadSanitizer spawning
    // five tasks can take longer than that, so there they are 40 ms apart.
    const scale: u32 = if (builtin.sanitize_thread) 20 else 1;
    try withOneExecutor(struct {
        fn order(
            io: Io,
            delay_ms: u32,
            log: *std.ArrayList(u32),
            mutex: *Io.Mutex,
        ) Io.Cancelable!void {
            try io.sleep(.fromMilliseconds(delay_ms * scale), .awake);
            try mutex.lock(io);
            defer mutex.unlock(io);
            log.appendAssumeCapacity(delay_ms);
        }
        fn body(io: Io) !void {
            var storage: [5]u32 = undefined;
            var log: std.ArrayList(u32) = .initBuffer(&storage);
            var mutex: Io.Mutex = .init;
            var group: Io.Group = .init;
            for ([_]u32{ 9, 3, 7, 1, 5 }) |ms| {
                try group.concurrent(io, order, .{ io, ms, &log, &mutex });
            }
            try group.await(io);
            try testing.expectEqualSlices(u32, &.{ 1, 3, 5, 7, 9 }, log.items);
        }
    }.body);
}

/// Sleeps of `duration_ns`, `rounds` times, each timed from a clock reading taken before the
/// call; returns how early the earliest return came (0: none before its deadline).
fn sleepEarliness(io: Io, duration_ns: u64, rounds: u32) Io.Cancelable!u64 {
    var early_ns_max: u64 = 0;
    for (0..rounds) |_| {
        const start = Io.Clock.awake.now(io);
        try io.sleep(.fromNanoseconds(duration_ns), .awake);
        const slept_ns: u64 = @intCast(start.durationTo(Io.Clock.awake.now(io)).nanoseconds);
        early_ns_max = @max(early_ns_max, duration_ns -| slept_ns);
    }
    return early_ns_max;
}

test "Runtime: a sleep never returns before its deadline, alone or among other sleepers" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            // From well under a millisecond to several: an early fire of up to a tick or a
            // millisecond shows on the short ones at once, and among concurrent sleepers on
            // any whose deadline is near another's. A lower bound only: never flaky.
            const durations_us = [_]u64{ 20, 50, 100, 250, 500, 900, 1_000, 1_100, 1_500, 2_000 };
            var futures: [durations_us.len]Io.Future(Io.Cancelable!u64) = undefined;
            for (&futures, durations_us) |*future, us| {
                future.* = try io.concurrent(sleepEarliness, .{ io, us * std.time.ns_per_us, 4 });
            }
            var early_ns_max: u64 = 0;
            for (&futures) |*future| early_ns_max = @max(early_ns_max, try future.await(io));
            for (durations_us) |us| {
                const early_ns = try sleepEarliness(io, us * std.time.ns_per_us, 2);
                early_ns_max = @max(early_ns_max, early_ns);
            }
            if (early_ns_max > 0) {
                std.debug.print("a sleep returned {d} ns before its deadline\n", .{early_ns_max});
                return error.TestUnexpectedResult;
            }
        }
    }.body);
}

test "Runtime: sleeping past a deadline on the real clock" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            const start = Io.Clock.awake.now(io);
            const deadline = Io.Clock.real.now(io).addDuration(.fromMilliseconds(3));
            try (Io.Clock.Timestamp{ .raw = deadline, .clock = .real }).wait(io);
            const waited = start.durationTo(Io.Clock.awake.now(io));
            try testing.expect(waited.nanoseconds >= 2 * std.time.ns_per_ms);
            try (Io.Timeout{ .none = {} }).sleep(io); // 0.16: returns at once
        }
    }.body);
}

test "Runtime: tasks_max gives ConcurrencyUnavailable, not a crash" {
    var rt = try Runtime.init(testing.allocator, .{ .tasks_max = 2 });
    defer rt.deinit();
    const io = rt.io();
    var a = try io.concurrent(square, .{1});
    var b = try io.concurrent(square, .{2});
    try testing.expectError(error.ConcurrencyUnavailable, io.concurrent(square, .{3}));
    // async falls back to running inline.
    var c = io.async(square, .{4});
    try testing.expectEqual(@as(u64, 16), c.await(io));
    _ = a.await(io);
    _ = b.await(io);
}

test "Runtime: a stack the kernel cannot map gives ConcurrencyUnavailable" {
    // 256 stacks of 1 TiB exceed the address space: mapping the slab fails. The failure is
    // logged once as a warning, which is expected here, so keep it out of the test output.
    const log_level = testing.log_level;
    testing.log_level = .err;
    defer testing.log_level = log_level;
    var rt = try Runtime.init(testing.allocator, .{ .stack_size_bytes = 1 << 40 });
    defer rt.deinit();
    try testing.expectError(error.ConcurrencyUnavailable, rt.io().concurrent(square, .{3}));
}

test "Runtime: random and randomSecure fill buffers; clocks advance" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var a: [32]u8 = @splat(0);
            var b: [32]u8 = @splat(0);
            io.random(&a);
            try io.randomSecure(&b);
            try testing.expect(!std.mem.eql(u8, &a, &b));
            const t0 = Io.Clock.awake.now(io);
            try io.sleep(.fromMilliseconds(1), .awake);
            try testing.expect(Io.Clock.awake.now(io).nanoseconds > t0.nanoseconds);
            _ = try Io.Clock.awake.resolution(io);
        }
    }.body);
}

test "Runtime: file entries work from a fiber" {
    try withRuntime(struct {
        fn writer(io: Io, dir: Io.Dir) !void {
            const file = try dir.createFile(io, "weft-from-fiber.txt", .{});
            defer file.close(io);
            try file.writeStreamingAll(io, "hello weft");
        }
        fn body(io: Io) !void {
            var tmp = testing.tmpDir(.{});
            defer tmp.cleanup();
            var f = try io.concurrent(writer, .{ io, tmp.dir });
            try f.await(io);
            var buffer: [32]u8 = undefined;
            const contents = try tmp.dir.readFile(io, "weft-from-fiber.txt", &buffer);
            try testing.expectEqualStrings("hello weft", contents);
        }
    }.body);
}

fn eventWaiter(io: Io, event: *Io.Event, woken: *std.atomic.Value(u32)) Io.Cancelable!void {
    try event.wait(io);
    _ = woken.fetchAdd(1, .monotonic);
}

fn setFromThread(event: *Io.Event, io: Io) void {
    @import("../os/linux.zig").sleepThread(std.time.ns_per_ms);
    event.set(io);
}

test "Runtime: std Event wakes every waiter, set from a task or a foreign thread" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            for (0..2) |round| {
                var event: Io.Event = .unset;
                var woken: std.atomic.Value(u32) = .init(0);
                var group: Io.Group = .init;
                for (0..20) |_| try group.concurrent(io, eventWaiter, .{ io, &event, &woken });
                // Every waiter parked: the set must wake them, not find them not yet waiting.
                try parked.waitMembersParked(io, &group, 20, .cancelable);
                try testing.expectEqual(@as(u32, 0), woken.load(.monotonic));
                if (round == 0) {
                    event.set(io);
                } else {
                    const thread = try std.Thread.spawn(.{}, setFromThread, .{ &event, io });
                    defer thread.join();
                }
                try group.await(io);
                try testing.expectEqual(@as(u32, 20), woken.load(.monotonic));
                // Already set: waiting returns at once.
                try event.wait(io);
                var never: Io.Event = .unset;
                try testing.expectError(error.Timeout, never.waitTimeout(io, .{
                    .duration = .{ .raw = .fromMilliseconds(1), .clock = .awake },
                }));
            }
        }
    }.body);
}

const Pick = union(enum) { slow: u32, fast: u32 };

fn valueAfter(io: Io, delay_ms: u32, value: u32) u32 {
    io.sleep(.fromMilliseconds(delay_ms), .awake) catch return 0;
    return value;
}

test "Runtime: std Select returns the first result and cancels the rest" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var buffer: [2]Pick = undefined;
            var select: Io.Select(Pick) = .init(io, &buffer);
            try select.concurrent(.slow, valueAfter, .{ io, 10_000, 1 });
            try select.concurrent(.fast, valueAfter, .{ io, 1, 2 });
            const first = try select.await();
            try testing.expectEqual(Pick{ .fast = 2 }, first);
            // The slow one is canceled (its sleep fails, it returns 0), not awaited for 10 s.
            select.cancelDiscard();
        }
    }.body);
}

/// Yields until `flag` is set; fails if `yields_max` yields did not let the setter run.
fn yieldUntil(io: Io, flag: *std.atomic.Value(bool), yields_max: u32) !u32 {
    var yields: u32 = 0;
    while (!flag.load(.acquire)) : (yields += 1) {
        if (yields == yields_max) return error.SetterNeverRan;
        try Runtime.yield(io);
    }
    return yields;
}

fn setFlag(flag: *std.atomic.Value(bool)) void {
    flag.store(true, .release);
}

test "Runtime: yield lets another task of the same executor run" {
    // One executor: the setter can only run if the yielder really gives the thread up.
    try withOneExecutor(struct {
        fn body(io: Io) !void {
            var flag: std.atomic.Value(bool) = .init(false);
            var yielder = try io.concurrent(yieldUntil, .{ io, &flag, 1000 });
            var setter = try io.concurrent(setFlag, .{&flag});
            setter.await(io);
            const yields = try yielder.await(io);
            try testing.expect(yields >= 1);
        }
    }.body);
}

/// Yields until canceled; `error.NotCanceled` if no cancelation arrived within 10 s (the test
/// cancels at once), so a yield that is no cancelation point fails the test instead of hanging.
fn yieldForever(io: Io) error{ Canceled, NotCanceled }!void {
    const deadline_ns = os.monotonicNs() + 10 * std.time.ns_per_s;
    while (os.monotonicNs() < deadline_ns) try Runtime.yield(io);
    return error.NotCanceled;
}

test "Runtime: yield is a cancelation point" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var future = try io.concurrent(yieldForever, .{io});
            try testing.expectError(error.Canceled, future.cancel(io));
        }
    }.body);
}

/// Calls the Io's crash handler, as std's panic printer does before it may use the Io, then
/// waits for the cancel request and passes cancelation points: none may deliver it.
fn crashedTask(io: Io) error{ Canceled, NotRequested }!void {
    io.vtable.crashHandler(io.userdata);
    const task = Executor.currentTask().?;
    const deadline_ns = os.monotonicNs() + 10 * std.time.ns_per_s;
    while (task.cancel_state.load(.acquire) != .requested) {
        if (os.monotonicNs() > deadline_ns) return error.NotRequested;
        try io.sleep(.fromMilliseconds(1), .awake);
    }
    try io.sleep(.fromMilliseconds(1), .awake);
    try io.checkCancel();
}

test "Runtime: after crashHandler no cancelation is delivered to the task" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var future = try io.concurrent(crashedTask, .{io});
            try future.cancel(io); // the task ran to its end: no error.Canceled
        }
    }.body);
}

test "Runtime: yield outside a weft task yields the thread" {
    var threaded: Io.Threaded = .init(testing.allocator, .{});
    defer threaded.deinit();
    try Runtime.yield(threaded.io());
    // A weft Io used from a thread weft does not run (this test's own thread).
    var rt = try Runtime.init(testing.allocator, .{ .executors = 1 });
    defer rt.deinit();
    const io = rt.io();
    // The outcome goes back through `result`: an error a thread's function returns is only
    // printed by std, and would not fail the test.
    var result: Io.Cancelable!void = error.Canceled;
    const thread = try std.Thread.spawn(.{}, struct {
        fn run(weft_io: Io, outcome: *Io.Cancelable!void) void {
            outcome.* = Runtime.yield(weft_io);
        }
    }.run, .{ io, &result });
    thread.join();
    try result;
}

/// A frame the size of a large Debug std function's (std.http.Client.fetch has 207 KiB): every
/// byte of it written, so each page of the stack under it is touched.
fn deepFrame(io: Io, sum: *u64) Io.Cancelable!void {
    var buffer: [512 * 1024]u8 = undefined;
    @memset(&buffer, 1);
    std.mem.doNotOptimizeAway(&buffer);
    try io.sleep(.fromMilliseconds(1), .awake);
    var total: u64 = 0;
    for (buffer[0..4096]) |byte| total += byte;
    sum.* = total;
}

test "Runtime: a task with a 512 KiB frame runs on the default options" {
    var rt = try Runtime.init(testing.allocator, .{});
    defer rt.deinit();
    const io = rt.io();
    var sums: [4]u64 = @splat(0);
    var group: Io.Group = .init;
    for (&sums) |*sum| try group.concurrent(io, deepFrame, .{ io, sum });
    try group.await(io);
    for (sums) |sum| try testing.expectEqual(4096, sum);
}

/// A frame as large as the default stack holds in this build mode: 1.5 MiB in Debug (std's HTTP
/// client has a Debug frame of about 1 MiB), 512 KiB in release builds.
const large_frame_bytes = switch (@import("builtin").mode) {
    .Debug => 1536 * 1024,
    .ReleaseSafe, .ReleaseFast, .ReleaseSmall => 512 * 1024,
};

fn largeFrameTask() usize {
    var frame: [large_frame_bytes]u8 = undefined;
    const bytes: [*]volatile u8 = &frame;
    var offset: usize = 0;
    // Every page, from the far end: an overflow would fault on the guard, not pass unseen.
    while (offset < frame.len) : (offset += std.heap.page_size_min) {
        bytes[frame.len - 1 - offset] = @truncate(offset);
    }
    var sum: usize = 0;
    offset = 0;
    while (offset < frame.len) : (offset += std.heap.page_size_min) sum +%= bytes[offset];
    return sum;
}

test "Runtime: a task on default options holds a Debug-sized frame (1.5 MiB in Debug)" {
    var rt = try Runtime.init(testing.allocator, .{});
    defer rt.deinit();
    const io = rt.io();
    var future = try io.concurrent(largeFrameTask, .{});
    _ = future.await(io);
}

test "Runtime: executors retire under contention only where the watchdog can recall them" {
    // Without the stall detector no watchdog looks for held executors, and only it recalls a
    // retired one for work that waits behind them (Scheduler.zig, `may_retire`).
    inline for (.{ @as(?u64, null), @as(?u64, 50 * std.time.ns_per_ms) }) |threshold_ns| {
        var rt = try Runtime.init(testing.allocator, .{
            .executors = 2,
            .stall_threshold_ns = threshold_ns,
        });
        defer rt.deinit();
        const expected = threshold_ns != null and @import("../Metrics.zig").enabled;
        try testing.expectEqual(expected, rt.state.scheduler.may_retire);
    }
}
