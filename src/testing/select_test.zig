//! `weft.sync.select` on weft: each arm winning, closed channels, timeouts, cancelation, and
//! counted values under concurrent producers and consumers. No timed assertions: tests wait
//! for states (a task queued in a channel), never for time. A wait for a select that one of
//! its arms should have ended runs under `deadline`: a lost wake fails its test in seconds,
//! with the task dump on stderr.
const std = @import("std");
const Io = std.Io;
const testing = std.testing;
const Runtime = @import("runtime.zig").Runtime;
const sync = @import("../sync/root.zig");
const deadline = @import("deadline.zig");

const U32Channel = sync.Channel(u32);

fn withRuntime(comptime body: fn (io: Io) anyerror!void) !void {
    var rt = try Runtime.init(testing.allocator, .{});
    defer rt.deinit();
    try body(rt.io());
}

/// Polls until `channel` has `receivers` blocked receivers and `senders` blocked senders.
fn waitQueued(io: Io, channel: *U32Channel, senders: u32, receivers: u32) !void {
    var polls: u32 = 0;
    while (true) : (polls += 1) {
        const waiting = channel.waiting();
        if (waiting.senders == senders and waiting.receivers == receivers) return;
        if (polls == 100_000) return error.StateNeverReached; // seconds: a hang, not a race
        try io.sleep(.fromMicroseconds(20), .awake);
    }
}

const timeout_short: Io.Timeout = .{
    .duration = .{ .raw = .fromMilliseconds(2), .clock = .awake },
};

/// A select of a recv arm on `a`, a recv arm on `b` and a send arm of `value` on `c`.
const ThreeArms = struct { u32, []const u8 };

fn selectThree(io: Io, a: *U32Channel, b: *U32Channel, c: *U32Channel, value: u32) !ThreeArms {
    return switch (try sync.select(io, .{
        .a = .{ .recv = a },
        .b = .{ .recv = b },
        .c = .{ .send = .{ c, value } },
    })) {
        .a => |received| .{ try received, "a" },
        .b => |received| .{ try received, "b" },
        .c => |sent| blk: {
            try sent;
            break :blk .{ value, "c" };
        },
    };
}

test "select: each arm can win while the select is blocked; the others stay untouched" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var a_buffer: [1]u32 = undefined;
            var b_buffer: [1]u32 = undefined;
            var c_buffer: [1]u32 = undefined;
            var a: U32Channel = .init(&a_buffer);
            var b: U32Channel = .init(&b_buffer);
            var c: U32Channel = .init(&c_buffer);
            try c.send(io, 100); // c full: the send arm waits for room
            for (0..3) |winner| {
                var future = try io.concurrent(selectThree, .{ io, &a, &b, &c, 7 });
                try waitQueued(io, &a, 0, 1);
                try waitQueued(io, &b, 0, 1);
                try waitQueued(io, &c, 1, 0);
                switch (winner) {
                    0 => try a.send(io, 1),
                    1 => try b.send(io, 2),
                    2 => try testing.expectEqual(@as(u32, 100), try c.recv(io)),
                    else => unreachable,
                }
                const result = try deadline.await(io, &future);
                const expected: []const u8 = &.{"abc"[winner]};
                try testing.expectEqualStrings(expected, result[1]);
                // The losing arms' nodes are gone, and they moved no value.
                try waitQueued(io, &a, 0, 0);
                try waitQueued(io, &b, 0, 0);
                try waitQueued(io, &c, 0, 0);
                try testing.expectEqual(@as(usize, 0), a.count());
                try testing.expectEqual(@as(usize, 0), b.count());
                if (winner == 2) {
                    try testing.expectEqual(@as(u32, 7), result[0]);
                    try testing.expectEqual(@as(u32, 7), try c.recv(io));
                    try c.send(io, 100);
                } else {
                    try testing.expectEqual(@as(u32, @intCast(winner + 1)), result[0]);
                }
                try testing.expectEqual(@as(usize, 1), c.count());
            }
        }
    }.body);
}

test "select: a closed channel completes its arm with error.Closed; null arms are disabled" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var a_buffer: [1]u32 = undefined;
            var b_buffer: [1]u32 = undefined;
            var c_buffer: [1]u32 = undefined;
            var a: U32Channel = .init(&a_buffer);
            var b: U32Channel = .init(&b_buffer);
            var c: U32Channel = .init(&c_buffer);
            try c.send(io, 100);
            // Closed while blocked: the recv arm on `b` reports it.
            var future = try io.concurrent(selectThree, .{ io, &a, &b, &c, 7 });
            try waitQueued(io, &b, 0, 1);
            b.close(io);
            try testing.expectError(error.Closed, deadline.await(io, &future));
            try waitQueued(io, &a, 0, 0);
            try waitQueued(io, &c, 0, 0);
            // Closed before: a send arm on a closed channel completes at once, value unsent.
            c.close(io);
            const result = try sync.selectWith(io, .{
                .a = .{ .recv = &a },
                .c = .{ .send = .{ &c, 5 } },
            }, .{ .order = .in_order });
            try testing.expectError(error.Closed, result.c);
            try testing.expectEqual(@as(u32, 100), try c.recv(io)); // drains, then Closed
            try testing.expectError(error.Closed, c.recv(io));
            // A disabled (null) arm never completes, even on a closed channel.
            const disabled: ?*U32Channel = null;
            try a.send(io, 3);
            const only_a = try sync.select(io, .{
                .off = .{ .recv = disabled },
                .a = .{ .recv = @as(?*U32Channel, &a) },
            });
            try testing.expectEqual(@as(u32, 3), try only_a.a);
        }
    }.body);
}

fn doubleAfterDelay(io: Io, gate: *U32Channel) u64 {
    const value = gate.recv(io) catch return 0;
    return @as(u64, value) * 2;
}

test "select: a future arm wins when its task finishes; a losing future is still awaitable" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var gate_buffer: [1]u32 = undefined;
            var gate: U32Channel = .init(&gate_buffer);
            var a_buffer: [1]u32 = undefined;
            var a: U32Channel = .init(&a_buffer);

            var worker = try io.concurrent(doubleAfterDelay, .{ io, &gate });
            try waitQueued(io, &gate, 0, 1);
            var selector = try io.concurrent(struct {
                fn run(io_: Io, a_: *U32Channel, w: *Io.Future(u64)) !u64 {
                    return switch (try sync.select(io_, .{
                        .a = .{ .recv = a_ },
                        .worker = .{ .future = w },
                    })) {
                        .a => error.WrongArm,
                        .worker => |doubled| doubled,
                    };
                }
            }.run, .{ io, &a, &worker });
            try waitQueued(io, &a, 0, 1);
            try gate.send(io, 21); // the worker finishes: the future arm wins
            try testing.expectEqual(@as(u64, 42), try deadline.await(io, &selector));
            try testing.expectEqual(@as(u64, 42), worker.await(io)); // idempotent
            try waitQueued(io, &a, 0, 0);

            // The channel wins: the future keeps running and is awaited normally later.
            var second = try io.concurrent(doubleAfterDelay, .{ io, &gate });
            try waitQueued(io, &gate, 0, 1);
            try a.send(io, 9);
            const result = try sync.select(io, .{
                .a = .{ .recv = &a },
                .worker = .{ .future = &second },
            });
            try testing.expectEqual(@as(u32, 9), try result.a);
            try gate.send(io, 5);
            try testing.expectEqual(@as(u64, 10), try deadline.await(io, &second));

            // A finished future is ready at once.
            var third = try io.concurrent(doubleAfterDelay, .{ io, &gate });
            try gate.send(io, 1);
            while (gate.waiting().receivers != 0 or gate.count() != 0) {
                try io.sleep(.fromMicroseconds(20), .awake);
            }
            try io.sleep(.fromMicroseconds(200), .awake);
            const ready = try sync.selectWith(io, .{
                .worker = .{ .future = &third },
                .a = .{ .recv = &a },
            }, .{ .order = .in_order });
            try testing.expectEqual(@as(u64, 2), ready.worker);
        }
    }.body);
}

test "select: a future arm on another Io is error.UnsupportedIo; channel arms work there" {
    var threaded: Io.Threaded = .init(testing.allocator, .{});
    defer threaded.deinit();
    const io = threaded.io();
    var buffer: [1]u32 = undefined;
    var channel: U32Channel = .init(&buffer);
    var future = io.async(struct {
        fn f() u32 {
            return 1;
        }
    }.f, .{});
    defer _ = future.await(io);
    if (future.any_future != null) {
        try testing.expectError(error.UnsupportedIo, sync.select(io, .{
            .a = .{ .recv = &channel },
            .f = .{ .future = &future },
        }));
    }
    try channel.send(io, 4);
    const result = try sync.select(io, .{ .a = .{ .recv = &channel } });
    try testing.expectEqual(@as(u32, 4), try result.a);
    // Blocking across OS threads on Threaded.
    var sender = try io.concurrent(struct {
        fn f(io_: Io, ch: *U32Channel) !void {
            try ch.send(io_, 8);
        }
    }.f, .{ io, &channel });
    const later = try sync.select(io, .{ .a = .{ .recv = &channel } });
    try testing.expectEqual(@as(u32, 8), try later.a);
    try sender.await(io);
}

test "select: timeout and cancelation take nothing and leave no node behind" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var a_buffer: [1]u32 = undefined;
            var b_buffer: [1]u32 = undefined;
            var c_buffer: [1]u32 = undefined;
            var a: U32Channel = .init(&a_buffer);
            var b: U32Channel = .init(&b_buffer);
            var c: U32Channel = .init(&c_buffer);
            try c.send(io, 100);
            try testing.expectError(error.Timeout, sync.selectWith(io, .{
                .a = .{ .recv = &a },
                .c = .{ .send = .{ &c, 1 } },
            }, .{ .timeout = timeout_short }));
            try waitQueued(io, &a, 0, 0);
            try waitQueued(io, &c, 0, 0);
            try testing.expectEqual(@as(u32, 100), try c.recv(io)); // 1 was never sent
            try testing.expectError(error.Empty, c.tryRecv(io));
            try c.send(io, 100);

            var future = try io.concurrent(selectThree, .{ io, &a, &b, &c, 7 });
            try waitQueued(io, &a, 0, 1);
            try waitQueued(io, &c, 1, 0);
            try testing.expectError(error.Canceled, future.cancel(io));
            try waitQueued(io, &a, 0, 0);
            try waitQueued(io, &b, 0, 0);
            try waitQueued(io, &c, 0, 0);
            try a.send(io, 5); // buffered: the canceled select took nothing
            try testing.expectEqual(@as(u32, 5), try a.tryRecv(io));
            try testing.expectEqual(@as(usize, 1), c.count());

            // A ready arm wins even with a timeout that already passed.
            try a.send(io, 6);
            const result = try sync.selectWith(io, .{ .a = .{ .recv = &a } }, .{
                .timeout = .{ .duration = .{ .raw = .zero, .clock = .awake } },
            });
            try testing.expectEqual(@as(u32, 6), try result.a);
        }
    }.body);
}

/// A hand-off that lands in the window between a cancel request and the withdrawal of the
/// waiter it woke: the waiter's futex wait returned `error.Canceled`, but before the waiter
/// takes the channel's lock to withdraw, a sender completes its node. On several executors
/// only a race opens that window. On one, nothing runs between the waiter's wake-up and its
/// withdrawal, so a send comes before it (its futex wake wins, the wait returns normally and
/// nothing is re-armed: why a send followed by a cancel never reached the path) or after it
/// (the receive took nothing). So the test's `Io` is the runtime's with a futex wait that, on its
/// first `error.Canceled`, sends the value itself before returning: what a sender on another
/// executor does when it wins that race. (On std.Io.Threaded the window is the same: between
/// the canceled wait's return and the withdrawal.)
const LateSend = struct {
    channel: *U32Channel,
    value: u32,
    /// The runtime's own `Io`, for the send.
    io: Io,
    /// Canceled futex waits seen (the send came with the first): proof the window was staged.
    canceled_waits: std.atomic.Value(u32) = .init(0),
    /// Whether the send found the waiter and handed it the value (not buffered, not full).
    handed: std.atomic.Value(bool) = .init(false),

    /// The runtime's table with `futexWait` replaced: any runtime's, weft's or std's.
    vtable: Io.VTable = undefined,

    /// The one staged now: the vtable entry has nowhere else to find it (its userdata is the
    /// runtime's). Tests run one at a time.
    var staged: ?*LateSend = null;

    fn ioOf(late: *LateSend) Io {
        late.vtable = late.io.vtable.*;
        late.vtable.futexWait = futexWait;
        return .{ .userdata = late.io.userdata, .vtable = &late.vtable };
    }

    fn futexWait(
        userdata: ?*anyopaque,
        ptr: *const u32,
        expected: u32,
        timeout: Io.Timeout,
    ) Io.Cancelable!void {
        const late = staged.?;
        return late.io.vtable.futexWait(userdata, ptr, expected, timeout) catch |err| {
            if (late.canceled_waits.fetchAdd(1, .monotonic) == 0) {
                const waiting = late.channel.waiting().receivers;
                late.channel.trySend(late.io, late.value) catch return err; // checked below
                late.handed.store(waiting == 1 and late.channel.count() == 0, .monotonic);
            }
            return err;
        };
    }
};

/// Receives by select (or by plain recv) on `late_io`, records the value, then reaches a
/// cancelation point, where a request re-armed by the receive must surface.
fn receiveThenCheck(late_io: Io, a: *U32Channel, b: *U32Channel, by_select: bool, got: *u32) !void {
    if (by_select) {
        const result = try sync.select(late_io, .{ .a = .{ .recv = a }, .b = .{ .recv = b } });
        got.* = try result.a;
    } else {
        got.* = try a.recv(late_io);
    }
    try late_io.checkCancel();
    return error.CancelNotReArmed;
}

test "select and recv: a value handed over before a canceled receive withdraws is kept" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var a_buffer: [1]u32 = undefined;
            var b_buffer: [1]u32 = undefined;
            var a: U32Channel = .init(&a_buffer);
            var b: U32Channel = .init(&b_buffer);
            for ([_]bool{ true, false }) |by_select| {
                var late: LateSend = .{ .channel = &a, .value = 77, .io = io };
                LateSend.staged = &late;
                defer LateSend.staged = null;
                var got: u32 = 0;
                const late_io = late.ioOf();
                const args = .{ late_io, &a, &b, by_select, &got };
                var future = try io.concurrent(receiveThenCheck, args);
                try waitQueued(io, &a, 0, 1);
                // The request ends the receiver's wait with error.Canceled, and 77 is handed to
                // it before it withdraws (`LateSend`): the receive lost the race, so it must
                // return 77 and re-arm the request, which its `checkCancel` then delivers
                // (without the re-arm: error.CancelNotReArmed).
                try testing.expectError(error.Canceled, future.cancel(io));
                try testing.expectEqual(@as(u32, 1), late.canceled_waits.load(.monotonic));
                try testing.expect(late.handed.load(.monotonic));
                try testing.expectEqual(@as(u32, 77), got);
                try testing.expectEqual(@as(usize, 0), a.count());
                try waitQueued(io, &a, 0, 0);
                try waitQueued(io, &b, 0, 0);
            }
        }
    }.body);
}

test "select: a select sender meets a select receiver on a rendezvous channel" {
    try withRuntime(struct {
        fn sendSide(io: Io, ch: *U32Channel, other: *U32Channel, value: u32) !void {
            switch (try sync.select(io, .{
                .ch = .{ .send = .{ ch, value } },
                .other = .{ .recv = other },
            })) {
                .ch => |sent| try sent,
                .other => return error.WrongArm,
            }
        }
        fn body(io: Io) !void {
            var ch: U32Channel = .init(&.{});
            var other: U32Channel = .init(&.{});
            for (0..50) |i| {
                const value: u32 = @intCast(i);
                var sender = try io.concurrent(sendSide, .{ io, &ch, &other, value });
                if (i % 2 == 0) try waitQueued(io, &ch, 1, 0);
                const result = try sync.select(io, .{
                    .ch = .{ .recv = &ch },
                    .other = .{ .recv = &other },
                });
                try testing.expectEqual(@as(u32, @intCast(i)), try result.ch);
                try deadline.await(io, &sender);
            }
            try waitQueued(io, &other, 0, 0);
        }
    }.body);
}

// ----------------------------------------------------------- counted values under churn

const Tally = struct {
    /// How often each value was sent (send returned success) and received.
    sent: []std.atomic.Value(u8),
    received: []std.atomic.Value(u8),
    /// Next value to send, shared by all producers.
    next: std.atomic.Value(u32) = .init(0),
    total: u32,
};

/// Sends each value it draws to whichever of `a` or `b` has room first, by select.
fn selectProducer(io: Io, a: *U32Channel, b: *U32Channel, tally: *Tally) Io.Cancelable!void {
    while (true) {
        const value = tally.next.fetchAdd(1, .monotonic);
        if (value >= tally.total) return;
        // error.Canceled: not sent, so neither counted nor ever received.
        const result = try sync.select(io, .{
            .a = .{ .send = .{ a, value } },
            .b = .{ .send = .{ b, value } },
        });
        switch (result) {
            inline else => |sent| sent catch unreachable, // closed only after the producers
        }
        _ = tally.sent[value].fetchAdd(1, .monotonic);
        try io.checkCancel();
    }
}

/// Receives from `a` or `b` by select until canceled or both are closed; counts each value.
fn selectConsumer(io: Io, a: *U32Channel, b: *U32Channel, tally: *Tally) Io.Cancelable!void {
    var a_open: ?*U32Channel = a;
    var b_open: ?*U32Channel = b;
    while (a_open != null or b_open != null) {
        const result = try sync.select(io, .{
            .a = .{ .recv = a_open },
            .b = .{ .recv = b_open },
        });
        const value = switch (result) {
            .a => |received| received catch {
                a_open = null;
                continue;
            },
            .b => |received| received catch {
                b_open = null;
                continue;
            },
        };
        _ = tally.received[value].fetchAdd(1, .monotonic);
        // A re-armed cancel request surfaces here, after the value was counted.
        try io.checkCancel();
    }
}

test "select: producers and consumers by select, canceled at random: each value exactly once" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            const total = 3000;
            var sent: [total]std.atomic.Value(u8) = @splat(.init(0));
            var received: [total]std.atomic.Value(u8) = @splat(.init(0));
            var tally: Tally = .{ .sent = &sent, .received = &received, .total = total };
            var a_buffer: [2]u32 = undefined;
            var a: U32Channel = .init(&a_buffer);
            var b: U32Channel = .init(&.{}); // a rendezvous channel
            var prng: std.Random.DefaultPrng = .init(0x5e1ec7);
            const random = prng.random();
            var round: u32 = 0;
            while (tally.next.load(.monotonic) < total and round < 400) : (round += 1) {
                var group: Io.Group = .init;
                for (0..2) |_| try group.concurrent(io, selectProducer, .{ io, &a, &b, &tally });
                for (0..2) |_| try group.concurrent(io, selectConsumer, .{ io, &a, &b, &tally });
                try io.sleep(.fromMicroseconds(random.uintLessThan(u32, 300)), .awake);
                group.cancel(io);
            }
            a.close(io);
            b.close(io);
            while (a.tryRecv(io)) |value| {
                _ = received[value].fetchAdd(1, .monotonic);
            } else |_| {}
            for (&sent, &received, 0..) |*s, *r, value| {
                if (s.load(.monotonic) != r.load(.monotonic)) {
                    std.debug.print("value {d}: sent {d}, received {d}\n", .{
                        value,
                        s.load(.monotonic),
                        r.load(.monotonic),
                    });
                    return error.Miscounted;
                }
                try testing.expect(r.load(.monotonic) <= 1);
            }
        }
    }.body);
}

test "select: consumers by select over closing channels see every value, then both closed" {
    try withRuntime(struct {
        fn plainProducer(
            io: Io,
            ch: *U32Channel,
            first: u32,
            count: u32,
            t: *Tally,
        ) Io.Cancelable!void {
            for (first..first + count) |value| {
                ch.send(io, @intCast(value)) catch |err| switch (err) {
                    error.Closed => unreachable, // closed after the producers
                    error.Canceled => return error.Canceled,
                };
                _ = t.sent[value].fetchAdd(1, .monotonic);
            }
        }
        fn body(io: Io) !void {
            const total = 4000;
            var sent: [total]std.atomic.Value(u8) = @splat(.init(0));
            var received: [total]std.atomic.Value(u8) = @splat(.init(0));
            var tally: Tally = .{ .sent = &sent, .received = &received, .total = total };
            var a_buffer: [3]u32 = undefined;
            var a: U32Channel = .init(&a_buffer);
            var b: U32Channel = .init(&.{});
            var consumers: Io.Group = .init;
            defer consumers.cancel(io);
            for (0..3) |_| try consumers.concurrent(io, selectConsumer, .{ io, &a, &b, &tally });
            var producers: Io.Group = .init;
            defer producers.cancel(io);
            try producers.concurrent(io, plainProducer, .{ io, &a, 0, 1000, &tally });
            try producers.concurrent(io, plainProducer, .{ io, &b, 1000, 1000, &tally });
            tally.next.store(2000, .monotonic);
            for (0..2) |_| try producers.concurrent(io, selectProducer, .{ io, &a, &b, &tally });
            try deadline.awaitGroup(io, &producers);
            a.close(io);
            b.close(io);
            try deadline.awaitGroup(io, &consumers);
            for (&sent, &received) |*s, *r| {
                try testing.expectEqual(@as(u8, 1), s.load(.monotonic));
                try testing.expectEqual(@as(u8, 1), r.load(.monotonic));
            }
        }
    }.body);
}
