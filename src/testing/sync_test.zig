//! Behaviour of weft.sync (and of std's futex-based primitives) on weft: tasks, foreign OS
//! threads, cancelation and timeouts. No timed assertions: tests wait for states, not for time.
//! A wait for a task that should have been woken runs under `deadline` (a lost wake fails its
//! test in seconds, with the task dump on stderr, instead of hanging it).
const std = @import("std");
const assert = std.debug.assert;
const Io = std.Io;
const testing = std.testing;
const platform = @import("../platform.zig");
const Runtime = @import("runtime.zig").Runtime;
const os = @import("../os/host.zig");
/// Task states, for the tests of weft's own futex (where std.Io.Threaded's is the kernel's).
const task_parked = @import("parked.zig");
const sync = @import("../sync/root.zig");
const deadline = @import("deadline.zig");

/// The future type of `function`'s result.
fn FutureOf(comptime function: anytype) type {
    return Io.Future(@typeInfo(@TypeOf(function)).@"fn".return_type.?);
}

fn withRuntime(comptime body: fn (io: Io) anyerror!void) !void {
    var rt = try Runtime.init(testing.allocator, .{});
    defer rt.deinit();
    try body(rt.io());
}

/// Polls `predicate(context)` with short sleeps until it holds (a state, never a time).
fn waitUntil(io: Io, context: anytype, comptime predicate: fn (@TypeOf(context)) bool) !void {
    var polls: u32 = 0;
    while (!predicate(context)) : (polls += 1) {
        if (polls == 100_000) return error.StateNeverReached; // ~ seconds: a hang, not a race
        try io.sleep(.fromMicroseconds(20), .awake);
    }
}

/// Waits until `owner` (a primitive with a `lock` and a `waiters` queue) has `count` parked
/// waiters. The count is read under the owner's lock: waiters on other executors push
/// concurrently (a bare read was a data race, found by the TSan build).
fn waitForWaiters(io: Io, owner: anytype, count: usize) !void {
    var polls: u32 = 0;
    while (true) : (polls += 1) {
        owner.lock.lock();
        const len = owner.waiters.len;
        owner.lock.unlock();
        if (len == count) return;
        if (polls == 100_000) return error.StateNeverReached;
        try io.sleep(.fromMicroseconds(20), .awake);
    }
}

const timeout_short: Io.Timeout = .{
    .duration = .{ .raw = .fromMilliseconds(2), .clock = .awake },
};

// ---------------------------------------------------------------------------------- Notify

fn notifyWaiter(io: Io, notify: *sync.Notify, arrivals: *Arrivals, id: u32) Io.Cancelable!void {
    try notify.wait(io);
    arrivals.record(id);
}

/// The order in which woken waiters ran. Waiters woken together (`notifyAll`) run on several
/// executors at once, so each claims a slot atomically and publishes it after writing its id
/// (a plain list append was a data race, found by the TSan build).
const Arrivals = struct {
    ids: [capacity]std.atomic.Value(u32) = @splat(.init(0)),
    claimed: std.atomic.Value(u32) = .init(0),
    recorded: std.atomic.Value(u32) = .init(0),

    const capacity = 8;

    fn record(arrivals: *Arrivals, id: u32) void {
        const slot = arrivals.claimed.fetchAdd(1, .monotonic);
        assert(slot < capacity);
        arrivals.ids[slot].store(id, .monotonic);
        _ = arrivals.recorded.fetchAdd(1, .release);
    }

    /// How many waiters have recorded themselves. When writers run one at a time, the first
    /// `count()` ids are written.
    fn count(arrivals: *const Arrivals) u32 {
        return arrivals.recorded.load(.acquire);
    }

    fn hasOne(arrivals: *const Arrivals) bool {
        return arrivals.count() == 1;
    }

    /// Polls until `expected` waiters recorded themselves: under a `deadline`, which bounds it.
    fn awaitCount(arrivals: *const Arrivals, io: Io, expected: u32) Io.Cancelable!void {
        while (arrivals.count() < expected) try io.sleep(.fromMicroseconds(20), .awake);
    }

    fn expectIds(arrivals: *const Arrivals, expected: []const u32) !void {
        try testing.expectEqual(expected.len, arrivals.count());
        for (expected, arrivals.ids[0..expected.len]) |id, *slot| {
            try testing.expectEqual(id, slot.load(.monotonic));
        }
    }
};

test "Notify: notifyOne wakes waiters one at a time, oldest first" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var notify: sync.Notify = .init;
            var arrivals: Arrivals = .{};
            var group: Io.Group = .init;
            defer group.cancel(io);
            for (0..3) |id| {
                try group.concurrent(io, notifyWaiter, .{
                    io,
                    &notify,
                    &arrivals,
                    @as(u32, @intCast(id)),
                });
                // Each waiter queues before the next one starts: a known arrival order.
                try waitForWaiters(io, &notify, id + 1);
            }
            for (0..3) |i| {
                notify.notifyOne(io);
                try deadline.run(io, Arrivals.awaitCount, .{ &arrivals, io, @intCast(i + 1) });
                try io.sleep(.fromMicroseconds(100), .awake);
                try testing.expectEqual(i + 1, arrivals.count()); // one notification, one waiter
            }
            try deadline.awaitGroup(io, &group);
            try arrivals.expectIds(&.{ 0, 1, 2 });
            try testing.expect(!notify.tryWait()); // every notification was consumed
        }
    }.body);
}

test "Notify: notifyAll wakes every waiter and stores no permit" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var notify: sync.Notify = .init;
            var arrivals: Arrivals = .{};
            var group: Io.Group = .init;
            defer group.cancel(io);
            for (0..8) |id| try group.concurrent(io, notifyWaiter, .{
                io,
                &notify,
                &arrivals,
                @as(u32, @intCast(id)),
            });
            try waitForWaiters(io, &notify, 8);
            notify.notifyAll(io);
            try deadline.awaitGroup(io, &group);
            try testing.expectEqual(@as(u32, 8), arrivals.count());
            try testing.expect(!notify.tryWait());
        }
    }.body);
}

test "Notify: a canceled or timed-out wait consumes nothing" {
    try withRuntime(struct {
        fn waiting(n: *sync.Notify) bool {
            return n.state.load(.monotonic) == .waiting;
        }
        fn body(io: Io) !void {
            var notify: sync.Notify = .init;
            var arrivals: Arrivals = .{};
            var future = try io.concurrent(notifyWaiter, .{ io, &notify, &arrivals, 0 });
            try waitUntil(io, &notify, waiting);
            try testing.expectError(error.Canceled, future.cancel(io));
            try testing.expectEqual(sync.Notify.init.state.raw, notify.state.load(.monotonic));
            try testing.expectError(error.Timeout, notify.waitTimeout(io, timeout_short));
            notify.notifyOne(io); // nobody waits now: stored
            try notify.waitTimeout(io, timeout_short);
            try testing.expectEqual(@as(u32, 0), arrivals.count());
        }
    }.body);
}

// ---------------------------------------------------------------------------------- Oneshot

fn oneshotReceiver(io: Io, oneshot: *sync.Oneshot(u64)) sync.Oneshot(u64).RecvError!u64 {
    return oneshot.recv(io);
}

test "Oneshot: a blocked receiver gets the value; close; cancel keeps the value for later" {
    try withRuntime(struct {
        fn waiting(o: *sync.Oneshot(u64)) bool {
            return o.state.load(.monotonic) == .waiting;
        }
        fn body(io: Io) !void {
            var oneshot: sync.Oneshot(u64) = .init;
            var receiver = try io.concurrent(oneshotReceiver, .{ io, &oneshot });
            try waitUntil(io, &oneshot, waiting);
            oneshot.send(io, 99);
            try testing.expectEqual(@as(u64, 99), try deadline.await(io, &receiver));

            var closed: sync.Oneshot(u64) = .init;
            var second = try io.concurrent(oneshotReceiver, .{ io, &closed });
            try waitUntil(io, &closed, waiting);
            closed.close(io);
            try testing.expectError(error.Closed, deadline.await(io, &second));

            var canceled: sync.Oneshot(u64) = .init;
            var third = try io.concurrent(oneshotReceiver, .{ io, &canceled });
            try waitUntil(io, &canceled, waiting);
            try testing.expectError(error.Canceled, third.cancel(io));
            try testing.expectError(error.Timeout, canceled.recvTimeout(io, timeout_short));
            canceled.send(io, 5);
            try testing.expectEqual(@as(u64, 5), try canceled.recv(io));
        }
    }.body);
}

// ---------------------------------------------------------------------------------- Channel

const Message = struct { producer: u32, sequence: u32 };
const MessageChannel = sync.Channel(Message);

/// Sends `messages` numbered messages. A group member: the channel is closed only after
/// every producer finished.
fn producer(io: Io, channel: *MessageChannel, id: u32, messages: u32) Io.Cancelable!void {
    for (0..messages) |sequence| {
        channel.send(io, .{
            .producer = id,
            .sequence = @intCast(sequence),
        }) catch |err| switch (err) {
            error.Closed => unreachable, // closed after the producers finish
            error.Canceled => return error.Canceled,
        };
    }
}

/// Receives until the channel is closed; checks per-producer order; counts per producer.
fn consumer(io: Io, channel: *MessageChannel, counts: []std.atomic.Value(u32)) !void {
    var next: [16]u32 = @splat(0);
    while (true) {
        const message = channel.recv(io) catch |err| switch (err) {
            error.Closed => return,
            error.Canceled => return error.Canceled,
        };
        // One consumer sees a subsequence of each producer's stream: strictly increasing.
        if (message.sequence < next[message.producer]) return error.OutOfOrder;
        next[message.producer] = message.sequence + 1;
        _ = counts[message.producer].fetchAdd(1, .monotonic);
    }
}

pub fn stress(io: Io, capacity: usize, producers: u32, consumers: u32, messages: u32) !void {
    var buffer: [8]Message = undefined;
    var channel: MessageChannel = .init(buffer[0..capacity]);
    var counts: [16]std.atomic.Value(u32) = @splat(.init(0));
    var consumer_group: Io.Group = .init;
    defer consumer_group.cancel(io);
    var consumer_futures: [8]FutureOf(consumer) = undefined;
    for (consumer_futures[0..consumers]) |*f| f.* = try io.concurrent(consumer, .{
        io,
        &channel,
        &counts,
    });
    var producer_group: Io.Group = .init;
    defer producer_group.cancel(io);
    for (0..producers) |id| try producer_group.concurrent(io, producer, .{
        io,
        &channel,
        @as(u32, @intCast(id)),
        messages,
    });
    try deadline.awaitGroup(io, &producer_group);
    channel.close(io);
    for (consumer_futures[0..consumers]) |*f| try deadline.await(io, f);
    for (counts[0..producers]) |c| try testing.expectEqual(messages, c.load(.monotonic));
}

test "Channel: producers x consumers, every message exactly once, per-producer order" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            try stress(io, 1, 4, 1, 2000);
            try stress(io, 3, 4, 3, 2000);
            try stress(io, 8, 6, 2, 1000);
            try stress(io, 0, 3, 3, 1000); // rendezvous
        }
    }.body);
}

fn senderOf(io: Io, channel: *sync.Channel(u32), value: u32) sync.Channel(u32).SendError!void {
    return channel.send(io, value);
}

fn receiverOf(io: Io, channel: *sync.Channel(u32)) sync.Channel(u32).RecvError!u32 {
    return channel.recv(io);
}

fn sendersWaiting(channel: *sync.Channel(u32)) bool {
    return channel.waiting().senders > 0;
}

fn receiversWaiting(channel: *sync.Channel(u32)) bool {
    return channel.waiting().receivers > 0;
}

/// Waits until `count` tasks wait in `channel`'s queue of `side` (a state the channel reports
/// on any Io: a waiter is queued under its lock before it parks).
fn waitChannelWaiters(
    io: Io,
    channel: *sync.Channel(u32),
    comptime side: enum { senders, receivers },
    count: u32,
) !void {
    var polls: u32 = 0;
    while (@field(channel.waiting(), @tagName(side)) != count) : (polls += 1) {
        if (polls == 100_000) return error.StateNeverReached;
        try io.sleep(.fromMicroseconds(20), .awake);
    }
}

test "Channel: close lets receivers drain, then Closed; blocked senders get Closed" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var buffer: [2]u32 = undefined;
            var channel: sync.Channel(u32) = .init(&buffer);
            try testing.expectEqual(@as(usize, 2), channel.capacity());
            try channel.send(io, 1);
            try channel.send(io, 2);
            try testing.expectError(error.Full, channel.trySend(io, 3));
            var blocked = try io.concurrent(senderOf, .{ io, &channel, 3 });
            try waitUntil(io, &channel, sendersWaiting);
            try testing.expect(!channel.isClosed());
            channel.close(io);
            try testing.expect(channel.isClosed());
            try testing.expectEqual(@as(usize, 2), channel.count()); // close keeps the values
            try testing.expectError(error.Closed, deadline.await(io, &blocked));
            try testing.expectError(error.Closed, channel.send(io, 4));
            try testing.expectError(error.Closed, channel.trySend(io, 4));
            try testing.expectEqual(@as(u32, 1), try channel.recv(io));
            try testing.expectEqual(@as(u32, 2), try channel.tryRecv(io));
            try testing.expectError(error.Closed, channel.recv(io));
            try testing.expectError(error.Closed, channel.tryRecv(io));

            var empty: sync.Channel(u32) = .init(&buffer);
            var receiver = try io.concurrent(receiverOf, .{ io, &empty });
            try waitUntil(io, &empty, receiversWaiting);
            empty.close(io);
            try testing.expectError(error.Closed, deadline.await(io, &receiver));
        }
    }.body);
}

/// Waits until `ended` reaches `count`: every task `close` should have woken has returned.
/// Bounded, and on expiry it cancels the tasks still parked (so the test fails by name, not
/// at the runner's time limit) and says how many `close` left behind.
fn expectAllEnded(
    io: Io,
    ended: *const std.atomic.Value(u32),
    futures: anytype,
    comptime what: []const u8,
) !void {
    const polls_max = 5_000; // 1 ms each: seconds, for a woken task that is merely slow
    for (0..polls_max) |_| {
        if (ended.load(.acquire) == futures.len) return;
        try io.sleep(.fromMilliseconds(1), .awake);
    }
    std.debug.print("close left {d} of {d} " ++ what ++ " blocked\n", .{
        futures.len - ended.load(.acquire),
        futures.len,
    });
    for (futures) |*future| _ = future.cancel(io) catch {};
    return error.TestWaiterLeftBlocked;
}

fn receiverCounted(
    io: Io,
    channel: *sync.Channel(u32),
    ended: *std.atomic.Value(u32),
) sync.Channel(u32).RecvError!u32 {
    defer _ = ended.fetchAdd(1, .release);
    return channel.recv(io);
}

fn senderCounted(
    io: Io,
    channel: *sync.Channel(u32),
    value: u32,
    ended: *std.atomic.Value(u32),
) sync.Channel(u32).SendError!void {
    defer _ = ended.fetchAdd(1, .release);
    return channel.send(io, value);
}

test "Channel: close wakes every blocked receiver, and every blocked sender, with Closed" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var empty_buffer: [1]u32 = undefined;
            var empty: sync.Channel(u32) = .init(&empty_buffer);
            var receivers_ended: std.atomic.Value(u32) = .init(0);
            var receivers: [3]FutureOf(receiverCounted) = undefined;
            for (&receivers, 1..) |*receiver, parked| {
                receiver.* = try io.concurrent(receiverCounted, .{ io, &empty, &receivers_ended });
                try waitChannelWaiters(io, &empty, .receivers, @intCast(parked));
            }
            empty.close(io);
            try expectAllEnded(io, &receivers_ended, &receivers, "receivers");
            for (&receivers) |*receiver| try testing.expectError(error.Closed, receiver.await(io));

            var full_buffer: [1]u32 = undefined;
            var full: sync.Channel(u32) = .init(&full_buffer);
            try full.send(io, 7);
            var senders_ended: std.atomic.Value(u32) = .init(0);
            var senders: [3]FutureOf(senderCounted) = undefined;
            for (&senders, 0..) |*sender, value| {
                const args = .{ io, &full, @as(u32, @intCast(value)), &senders_ended };
                sender.* = try io.concurrent(senderCounted, args);
                try waitChannelWaiters(io, &full, .senders, @intCast(value + 1));
            }
            full.close(io);
            try expectAllEnded(io, &senders_ended, &senders, "senders");
            for (&senders) |*sender| try testing.expectError(error.Closed, sender.await(io));
            // None of theirs got in; what was sent before the close is still received.
            try testing.expectEqual(@as(u32, 7), try full.recv(io));
            try testing.expectError(error.Closed, full.recv(io));
        }
    }.body);
}

test "Channel: a blocked sender's value is delivered in order when room appears" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var buffer: [1]u32 = undefined;
            var channel: sync.Channel(u32) = .init(&buffer);
            try channel.send(io, 10);
            var blocked = try io.concurrent(senderOf, .{ io, &channel, 11 });
            try waitUntil(io, &channel, sendersWaiting);
            try testing.expectEqual(@as(u32, 10), try channel.recv(io));
            // The waiting sender's value moved into the freed slot before anyone else's.
            try testing.expectError(error.Full, channel.trySend(io, 12));
            try deadline.await(io, &blocked);
            try testing.expectEqual(@as(u32, 11), try channel.recv(io));
        }
    }.body);
}

test "Channel: timeouts of blocked send and recv take and lose nothing" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var buffer: [1]u32 = undefined;
            var channel: sync.Channel(u32) = .init(&buffer);
            try testing.expectError(error.Timeout, channel.recvTimeout(io, timeout_short));
            try channel.sendTimeout(io, 1, timeout_short);
            try testing.expectError(error.Timeout, channel.sendTimeout(io, 2, timeout_short));
            try testing.expectEqual(@as(u32, 1), try channel.recvTimeout(io, timeout_short));
            try testing.expectEqual(@as(usize, 0), channel.count());
            try testing.expectEqual(@as(u32, 0), channel.waiting().senders);
        }
    }.body);
}

test "Channel: cancel a blocked send or recv: nothing lost, nothing duplicated" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var buffer: [1]u32 = undefined;
            var channel: sync.Channel(u32) = .init(&buffer);
            var receiver = try io.concurrent(receiverOf, .{ io, &channel });
            try waitUntil(io, &channel, receiversWaiting);
            try testing.expectError(error.Canceled, receiver.cancel(io));
            try channel.send(io, 1); // buffered: the canceled receiver took nothing
            var sender = try io.concurrent(senderOf, .{ io, &channel, 2 });
            try waitUntil(io, &channel, sendersWaiting);
            try testing.expectError(error.Canceled, sender.cancel(io));
            try testing.expectEqual(@as(u32, 1), try channel.recv(io));
            try testing.expectError(error.Empty, channel.tryRecv(io)); // 2 was never sent
        }
    }.body);
}

/// Receives `total` values counting each, and on cancelation keeps what the canceled recv
/// returned: the count of a canceled consumer is still exact.
fn cancelableConsumer(
    io: Io,
    channel: *sync.Channel(u32),
    seen: []std.atomic.Value(u8),
) Io.Cancelable!void {
    while (true) {
        const value = channel.recv(io) catch |err| switch (err) {
            error.Closed => return,
            error.Canceled => return error.Canceled,
        };
        _ = seen[value].fetchAdd(1, .monotonic);
        // A re-armed cancel request surfaces here, after the value was counted.
        try io.checkCancel();
    }
}

fn cancelableProducer(
    io: Io,
    channel: *sync.Channel(u32),
    next: *std.atomic.Value(u32),
    sent: []std.atomic.Value(u8),
    total: u32,
) Io.Cancelable!void {
    while (true) {
        const value = next.fetchAdd(1, .monotonic);
        if (value >= total) return;
        channel.send(io, value) catch |err| switch (err) {
            error.Closed => unreachable,
            error.Canceled => return error.Canceled, // not delivered
        };
        _ = sent[value].fetchAdd(1, .monotonic);
        try io.checkCancel();
    }
}

test "Channel: cancel-safety under churn: every sent value received exactly once" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            const total = 3000;
            var seen: [total]std.atomic.Value(u8) = @splat(.init(0));
            var sent: [total]std.atomic.Value(u8) = @splat(.init(0));
            var next: std.atomic.Value(u32) = .init(0);
            var buffer: [2]u32 = undefined;
            var channel: sync.Channel(u32) = .init(&buffer);
            var prng: std.Random.DefaultPrng = .init(0x5eed);
            const random = prng.random();
            // Rounds of a few producers and consumers, each canceled after a random delay.
            var round: u32 = 0;
            while (next.load(.monotonic) < total and round < 400) : (round += 1) {
                var group: Io.Group = .init;
                for (0..2) |_| try group.concurrent(io, cancelableProducer, .{
                    io,
                    &channel,
                    &next,
                    &sent,
                    total,
                });
                for (0..2) |_| try group.concurrent(io, cancelableConsumer, .{
                    io,
                    &channel,
                    &seen,
                });
                try io.sleep(.fromMicroseconds(random.uintLessThan(u32, 200)), .awake);
                group.cancel(io);
            }
            channel.close(io);
            while (channel.tryRecv(io)) |value| {
                _ = seen[value].fetchAdd(1, .monotonic);
            } else |_| {}
            for (&sent, &seen) |*s, *r| {
                try testing.expectEqual(s.load(.monotonic), r.load(.monotonic));
            }
            for (&seen) |*r| try testing.expect(r.load(.monotonic) <= 1);
        }
    }.body);
}

fn threadProducer(
    io: Io,
    channel: *MessageChannel,
    id: u32,
    messages: u32,
    done: *std.atomic.Value(u32),
) void {
    producer(io, channel, id, messages) catch unreachable; // never closed before they finish
    _ = done.fetchAdd(1, .release);
}

test "Channel: foreign OS threads and fibers share a channel" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var buffer: [2]Message = undefined;
            var channel: MessageChannel = .init(&buffer);
            var counts: [16]std.atomic.Value(u32) = @splat(.init(0));
            var threads: [2]std.Thread = undefined;
            var threads_done: std.atomic.Value(u32) = .init(0);
            for (&threads, 0..) |*t, id| t.* = try std.Thread.spawn(.{}, threadProducer, .{
                io,
                &channel,
                @as(u32, @intCast(id)),
                2000,
                &threads_done,
            });
            var group: Io.Group = .init;
            defer group.cancel(io);
            try group.concurrent(io, producer, .{ io, &channel, 2, 2000 });
            var fiber_consumer = try io.concurrent(consumer, .{ io, &channel, &counts });
            // Joining blocks the executor's thread: only once the threads need no fiber.
            try waitUntil(io, &threads_done, struct {
                fn f(d: *std.atomic.Value(u32)) bool {
                    return d.load(.acquire) == 2;
                }
            }.f);
            for (threads) |t| t.join();
            try deadline.awaitGroup(io, &group);
            channel.close(io);
            try deadline.await(io, &fiber_consumer);
            for (counts[0..3]) |c| try testing.expectEqual(@as(u32, 2000), c.load(.monotonic));
        }
    }.body);
}

test "Channel: a foreign OS thread blocks in recv until a fiber sends" {
    try withRuntime(struct {
        fn threadConsumer(io: Io, channel: *MessageChannel, counts: []std.atomic.Value(u32)) void {
            consumer(io, channel, counts) catch unreachable;
        }
        fn body(io: Io) !void {
            var buffer: [1]Message = undefined;
            var channel: MessageChannel = .init(&buffer);
            var counts: [16]std.atomic.Value(u32) = @splat(.init(0));
            const thread = try std.Thread.spawn(.{}, threadConsumer, .{ io, &channel, &counts });
            try producer(io, &channel, 0, 3000);
            channel.close(io);
            thread.join();
            try testing.expectEqual(@as(u32, 3000), counts[0].load(.monotonic));
        }
    }.body);
}

test "Channel: works unchanged on std.Io.Threaded" {
    var threaded: Io.Threaded = .init(testing.allocator, .{});
    defer threaded.deinit();
    const io = threaded.io();
    try stress(io, 2, 2, 2, 500);
}

// -------------------------------------------------------------------------------- Broadcast

const U64Broadcast = sync.Broadcast(u64);

/// Reads until closed; every value must arrive, in order, none lagged. Publishes its count in
/// `progress` so a sender can stay within the ring of the slowest receiver.
fn broadcastReceiver(
    io: Io,
    subscription: U64Broadcast.Receiver,
    progress: *std.atomic.Value(u64),
) !void {
    var receiver = subscription;
    var expected: u64 = 0;
    while (true) {
        const received = receiver.recv(io) catch |err| switch (err) {
            error.Closed => return,
            error.Canceled => return error.Canceled,
        };
        switch (received) {
            .lagged => return error.Lagged,
            .value => |value| if (value != expected) return error.OutOfOrder,
        }
        expected += 1;
        progress.store(expected, .release);
    }
}

fn slowestOf(progress: []std.atomic.Value(u64)) u64 {
    var slowest: u64 = std.math.maxInt(u64);
    for (progress) |*p| slowest = @min(slowest, p.load(.acquire));
    return slowest;
}

/// Sends 0..total, never more than the capacity ahead of the slowest receiver (so nobody
/// lags), yielding while it is; then closes.
fn pacedSender(
    io: Io,
    broadcast: *U64Broadcast,
    progress: []std.atomic.Value(u64),
    total: u64,
) Io.Cancelable!void {
    for (0..total) |i| {
        // `checkCancel` yields the fiber every few calls: the receivers get to run.
        while (i - slowestOf(progress) >= broadcast.capacity()) try io.checkCancel();
        broadcast.send(io, i) catch unreachable; // closed only below
    }
    broadcast.close(io);
}

fn threadPacedSender(
    io: Io,
    broadcast: *U64Broadcast,
    progress: []std.atomic.Value(u64),
    total: u64,
) void {
    for (0..total) |i| {
        while (i - slowestOf(progress) >= broadcast.capacity()) std.Thread.yield() catch {};
        broadcast.send(io, i) catch unreachable; // closed only below
    }
    broadcast.close(io);
}

/// One paced sender and `receivers` receivers: each receives all `total` values in order.
pub fn fanOut(io: Io, capacity: usize, receivers: usize, total: u64, sender_thread: bool) !void {
    var ring: [16]u64 = undefined;
    var broadcast: U64Broadcast = .init(ring[0..capacity]);
    var progress: [4]std.atomic.Value(u64) = @splat(.init(0));
    var futures: [4]FutureOf(broadcastReceiver) = undefined;
    for (futures[0..receivers], progress[0..receivers]) |*f, *p| {
        f.* = try io.concurrent(broadcastReceiver, .{ io, broadcast.subscribe(), p });
    }
    if (sender_thread) {
        const thread = try std.Thread.spawn(.{}, threadPacedSender, .{
            io,
            &broadcast,
            progress[0..receivers],
            total,
        });
        // Joining blocks the executor's thread: only once the thread is done with the fibers.
        try waitUntil(io, &broadcast, U64Broadcast.isClosed);
        thread.join();
    } else {
        var sender = try io.concurrent(pacedSender, .{
            io,
            &broadcast,
            progress[0..receivers],
            total,
        });
        try sender.await(io);
    }
    for (futures[0..receivers]) |*f| try deadline.await(io, f);
    for (progress[0..receivers]) |*p| try testing.expectEqual(total, p.load(.monotonic));
    try testing.expectEqual(total, broadcast.sent());
}

test "Broadcast: 1 sender + 4 receivers that keep up: each gets every value, in order" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            try fanOut(io, 8, 4, 5000, false);
            try fanOut(io, 1, 4, 1000, false); // every send waits for all four
            try fanOut(io, 16, 1, 3000, false);
        }
    }.body);
}

test "Broadcast: a foreign OS thread sends to fiber receivers" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            try fanOut(io, 4, 3, 3000, true);
        }
    }.body);
}

test "Broadcast: works unchanged on std.Io.Threaded" {
    var threaded: Io.Threaded = .init(testing.allocator, .{});
    defer threaded.deinit();
    try fanOut(threaded.io(), 4, 2, 300, false);
}

/// Three words that must always agree: a torn copy (part of one value, part of the value that
/// overwrote it) breaks the agreement.
const Triple = struct {
    number: u64,
    mixed: u64,
    inverted: u64,

    fn of(number: u64) Triple {
        return .{ .number = number, .mixed = number *% 0x9E3779B97F4A7C15, .inverted = ~number };
    }
};

/// What a `tornReader` found: how far it got (the total sent, if exact) and how many values
/// were not whole or not the one due.
const ReaderOutcome = struct { reached: u64 = 0, wrong: u64 = 0 };

/// Reads until closed, checking that every value is whole and is exactly the one due after
/// the values and lag reports before it.
fn tornReader(
    io: Io,
    subscription: sync.Broadcast(Triple).Receiver,
    outcome: *ReaderOutcome,
) Io.Cancelable!void {
    var receiver = subscription;
    var next: u64 = 0;
    while (receiver.recv(io)) |received| switch (received) {
        .value => |value| {
            if (!std.meta.eql(Triple.of(next), value)) outcome.wrong += 1;
            next = value.number + 1;
        },
        .lagged => |missed| {
            if (missed == 0) outcome.wrong += 1;
            next += missed;
        },
    } else |err| switch (err) {
        error.Closed => {},
        error.Canceled => return error.Canceled,
    }
    outcome.reached = next;
}

/// A sender that never waits overruns a 4-value ring while 3 receivers read it (without the
/// lock when they can, racing the sender's stores).
fn overrunRace(io: Io) !void {
    const total = 200_000;
    var ring: [4]Triple = undefined;
    var broadcast: sync.Broadcast(Triple) = .init(&ring);
    var outcomes: [3]ReaderOutcome = @splat(.{});
    var group: Io.Group = .init;
    defer group.cancel(io);
    for (&outcomes) |*o| try group.concurrent(io, tornReader, .{ io, broadcast.subscribe(), o });
    for (0..total) |number| try broadcast.send(io, Triple.of(number));
    broadcast.close(io);
    try group.await(io);
    for (outcomes) |o| {
        try testing.expectEqual(@as(u64, 0), o.wrong);
        try testing.expectEqual(@as(u64, total), o.reached);
    }
}

test "Broadcast: receivers racing an overrunning sender see no torn value; values and lag add up" {
    try withRuntime(overrunRace);
    var threaded: Io.Threaded = .init(testing.allocator, .{});
    defer threaded.deinit();
    try overrunRace(threaded.io());
}

fn broadcastWaiting(broadcast: *U64Broadcast) bool {
    return broadcast.waiting() > 0;
}

/// Receives one value (blocking) and says so through `first_logged`, then waits for `go` while
/// the sender overruns the ring, then records everything that follows until closed. The test
/// reads `log` only after awaiting it; the flag is what it watches meanwhile (watching the
/// list's length was a data race with the append, found by the TSan build).
fn sleepyReceiver(
    io: Io,
    subscription: U64Broadcast.Receiver,
    go: *sync.Notify,
    log: *std.ArrayList(U64Broadcast.Received),
    first_logged: *std.atomic.Value(bool),
) !void {
    var receiver = subscription;
    log.appendAssumeCapacity(try receiver.recv(io));
    first_logged.store(true, .release);
    try go.wait(io);
    while (receiver.recv(io)) |received| {
        log.appendAssumeCapacity(received);
    } else |err| switch (err) {
        error.Closed => {},
        error.Canceled => return error.Canceled,
    }
}

test "Broadcast: a receiver asleep while the ring is overrun gets the exact lag, then the rest" {
    try withRuntime(struct {
        fn logged(first_logged: *std.atomic.Value(bool)) bool {
            return first_logged.load(.acquire);
        }
        fn body(io: Io) !void {
            var ring: [4]u64 = undefined;
            var broadcast: U64Broadcast = .init(&ring);
            var go: sync.Notify = .init;
            var storage: [8]U64Broadcast.Received = undefined;
            var log: std.ArrayList(U64Broadcast.Received) = .initBuffer(&storage);
            var first_logged: std.atomic.Value(bool) = .init(false);
            var receiver = try io.concurrent(sleepyReceiver, .{
                io,
                broadcast.subscribe(),
                &go,
                &log,
                &first_logged,
            });
            try waitUntil(io, &broadcast, broadcastWaiting); // parked in its first recv
            try broadcast.send(io, 0);
            try waitUntil(io, &first_logged, logged); // it read 0 and waits for `go`
            for (1..21) |i| try broadcast.send(io, i); // values 1..16 are overwritten unread
            go.notifyOne(io);
            broadcast.close(io);
            try deadline.await(io, &receiver);
            const expected = [_]U64Broadcast.Received{
                .{ .value = 0 },  .{ .lagged = 16 }, .{ .value = 17 },
                .{ .value = 18 }, .{ .value = 19 },  .{ .value = 20 },
            };
            try testing.expectEqualSlices(U64Broadcast.Received, &expected, log.items);
        }
    }.body);
}

fn broadcastRecvOnce(
    io: Io,
    receiver: *U64Broadcast.Receiver,
) U64Broadcast.RecvError!U64Broadcast.Received {
    return receiver.recv(io);
}

test "Broadcast: close wakes blocked receivers; the others drain, then Closed" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var ring: [2]u64 = undefined;
            var broadcast: U64Broadcast = .init(&ring);
            var idle = broadcast.subscribe();
            var blocked = try io.concurrent(broadcastRecvOnce, .{ io, &idle });
            try waitUntil(io, &broadcast, broadcastWaiting);
            try broadcast.send(io, 0);
            try testing.expectEqual(@as(u64, 0), (try deadline.await(io, &blocked)).value);
            var late = broadcast.subscribe();
            for (1..4) |i| try broadcast.send(io, i);
            broadcast.close(io);
            try testing.expectError(error.Closed, broadcast.send(io, 4));
            try testing.expectEqual(@as(u64, 1), (try late.recv(io)).lagged);
            try testing.expectEqual(@as(u64, 2), (try late.recv(io)).value);
            try testing.expectEqual(@as(u64, 3), (try late.tryRecv()).value);
            try testing.expectError(error.Closed, late.recv(io));
            try testing.expectError(error.Closed, late.tryRecv());
            var after = broadcast.subscribe();
            try testing.expectError(error.Closed, after.recv(io));

            var empty: U64Broadcast = .init(&ring);
            var parked = empty.subscribe();
            var woken = try io.concurrent(broadcastRecvOnce, .{ io, &parked });
            try waitUntil(io, &empty, broadcastWaiting);
            empty.close(io);
            try testing.expectError(error.Closed, deadline.await(io, &woken));
        }
    }.body);
}

test "Broadcast: a canceled or timed-out recv reads nothing; the value waits for the next" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var ring: [2]u64 = undefined;
            var broadcast: U64Broadcast = .init(&ring);
            var receiver = broadcast.subscribe();
            var blocked = try io.concurrent(broadcastRecvOnce, .{ io, &receiver });
            try waitUntil(io, &broadcast, broadcastWaiting);
            try testing.expectError(error.Canceled, blocked.cancel(io));
            try testing.expectEqual(@as(u32, 0), broadcast.waiting());
            try testing.expectEqual(@as(u64, 0), receiver.cursor);
            try broadcast.send(io, 7);
            try testing.expectEqual(@as(u64, 7), (try receiver.tryRecv()).value);
            try testing.expectError(error.Timeout, receiver.recvTimeout(io, timeout_short));
            try testing.expectEqual(@as(u32, 0), broadcast.waiting());
            try broadcast.send(io, 8);
            const received = try receiver.recvTimeout(io, timeout_short);
            try testing.expectEqual(@as(u64, 8), received.value);
        }
    }.body);
}

/// Reads in order into `next` until closed; a value returned by a canceled `recv` is counted
/// before the re-armed request surfaces at `checkCancel`.
fn churnReceiver(
    io: Io,
    receiver: *U64Broadcast.Receiver,
    next: *std.atomic.Value(u64),
) !void {
    while (true) {
        const received = receiver.recv(io) catch |err| switch (err) {
            error.Closed => return,
            error.Canceled => return error.Canceled,
        };
        switch (received) {
            .lagged => return error.Lagged,
            .value => |value| if (value != next.load(.monotonic)) return error.OutOfOrder,
        }
        next.store(next.load(.monotonic) + 1, .release);
        try io.checkCancel();
    }
}

test "Broadcast: receivers canceled over and over lose and repeat nothing" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            const total = 3000;
            var ring: [8]u64 = undefined;
            var broadcast: U64Broadcast = .init(&ring);
            var receiver = broadcast.subscribe();
            var next: [1]std.atomic.Value(u64) = .{.init(0)};
            var sender = try io.concurrent(pacedSender, .{ io, &broadcast, &next, total });
            defer sender.cancel(io) catch {};
            var restarts: u32 = 0;
            while (!broadcast.isClosed()) : (restarts += 1) {
                var reader = try io.concurrent(churnReceiver, .{ io, &receiver, &next[0] });
                try io.sleep(.fromMicroseconds(30), .awake);
                reader.cancel(io) catch |err| switch (err) {
                    error.Canceled => {},
                    else => |e| return e,
                };
            }
            try deadline.await(io, &sender);
            var last = try io.concurrent(churnReceiver, .{ io, &receiver, &next[0] });
            try deadline.await(io, &last);
            try testing.expectEqual(@as(u64, total), next[0].load(.monotonic));
            try testing.expect(restarts > 0);
        }
    }.body);
}

// ------------------------------------------------------------------------------------ Watch

const U64Watch = sync.Watch(u64);

/// Follows the watch until closed: values and versions never go back, and the last value
/// read is the last one sent (no change notification was missed).
fn watchFollower(io: Io, watch: *U64Watch, last: u64) !void {
    var receiver = watch.subscribe();
    var previous = receiver.borrow();
    var seen = receiver.seen;
    while (true) {
        receiver.changed(io) catch |err| switch (err) {
            error.Closed => break,
            error.Canceled => return error.Canceled,
        };
        if (receiver.seen <= seen) return error.VersionWentBack;
        const value = receiver.borrowAndUpdate();
        if (value < previous) return error.ValueWentBack;
        previous = value;
        seen = receiver.seen;
    }
    if (previous != last) return error.MissedChange;
    if (receiver.seen != last) return error.MissedChange; // one version per send from 0
}

fn watchSender(io: Io, watch: *U64Watch, last: u64) Io.Cancelable!void {
    for (1..last + 1) |value| {
        watch.send(io, value) catch unreachable; // closed only below
        if (value % 16 == 0) try io.checkCancel(); // lets the followers run now and then
    }
    watch.close(io);
}

fn threadWatchSender(io: Io, watch: *U64Watch, last: u64) void {
    for (1..last + 1) |value| {
        watch.send(io, value) catch unreachable; // closed only below
        if (value % 16 == 0) std.Thread.yield() catch {};
    }
    watch.close(io);
}

pub fn watchFanOut(io: Io, followers: usize, last: u64, sender_thread: bool) !void {
    var watch: U64Watch = .init(0);
    var futures: [4]FutureOf(watchFollower) = undefined;
    for (futures[0..followers]) |*f| f.* = try io.concurrent(watchFollower, .{ io, &watch, last });
    if (sender_thread) {
        const thread = try std.Thread.spawn(.{}, threadWatchSender, .{ io, &watch, last });
        try waitUntil(io, &watch, U64Watch.isClosed);
        thread.join();
    } else {
        var sender = try io.concurrent(watchSender, .{ io, &watch, last });
        try sender.await(io);
    }
    for (futures[0..followers]) |*f| try deadline.await(io, f);
    try testing.expectEqual(last, watch.get());
}

test "Watch: followers see the latest value, versions only grow, the last change arrives" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            try watchFanOut(io, 4, 3000, false);
            try watchFanOut(io, 3, 3000, true); // a foreign OS thread sends
        }
    }.body);
}

test "Watch: works unchanged on std.Io.Threaded" {
    var threaded: Io.Threaded = .init(testing.allocator, .{});
    defer threaded.deinit();
    try watchFanOut(threaded.io(), 2, 500, false);
}

fn watchChangedOnce(io: Io, receiver: *U64Watch.Receiver) U64Watch.ChangedError!void {
    return receiver.changed(io);
}

fn watchWaiting(watch: *U64Watch) bool {
    return watch.waiting() > 0;
}

test "Watch: a send or close wakes parked receivers; cancel and timeout mark nothing seen" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var watch: U64Watch = .init(10);
            var receiver = watch.subscribe();
            var blocked = try io.concurrent(watchChangedOnce, .{ io, &receiver });
            try waitUntil(io, &watch, watchWaiting);
            try watch.send(io, 11);
            try deadline.await(io, &blocked);
            try testing.expectEqual(@as(u64, 1), receiver.seen);

            var canceled = try io.concurrent(watchChangedOnce, .{ io, &receiver });
            try waitUntil(io, &watch, watchWaiting);
            try testing.expectError(error.Canceled, canceled.cancel(io));
            try testing.expectEqual(@as(u64, 1), receiver.seen);
            try testing.expectError(error.Timeout, receiver.changedTimeout(io, timeout_short));
            try testing.expectEqual(@as(u32, 0), watch.waiting());
            try watch.send(io, 12);
            try receiver.changedTimeout(io, timeout_short); // the change was kept for it
            try testing.expectEqual(@as(u64, 12), receiver.borrow());

            var closing = try io.concurrent(watchChangedOnce, .{ io, &receiver });
            try waitUntil(io, &watch, watchWaiting);
            watch.close(io);
            try testing.expectError(error.Closed, deadline.await(io, &closing));
            try testing.expectEqual(@as(u64, 12), receiver.borrow());
        }
    }.body);
}

// ---------------------------------------------------------------------------------- Barrier

pub fn barrierParty(
    io: Io,
    barrier: *sync.Barrier,
    phase: *std.atomic.Value(u32),
    leaders: *std.atomic.Value(u32),
    generations: u32,
) !void {
    for (0..generations) |g| {
        // Nobody may be a generation ahead: every party passed barrier g before any passes g+1.
        if (phase.load(.acquire) / barrier.parties != g) return error.GenerationMixed;
        _ = phase.fetchAdd(1, .acq_rel);
        if (try barrier.wait(io)) _ = leaders.fetchAdd(1, .monotonic);
        if (phase.load(.acquire) < (g + 1) * barrier.parties) return error.PassedEarly;
        // A second barrier keeps the phase check of the next round honest.
        _ = try barrier.wait(io);
    }
}

test "Barrier: reuse across generations, one leader each, nobody passes early" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            const parties = 5;
            const generations = 300;
            var barrier: sync.Barrier = .init(parties);
            var phase: std.atomic.Value(u32) = .init(0);
            var leaders: std.atomic.Value(u32) = .init(0);
            var futures: [parties]FutureOf(barrierParty) = undefined;
            for (&futures) |*f| f.* = try io.concurrent(barrierParty, .{
                io,
                &barrier,
                &phase,
                &leaders,
                generations,
            });
            for (&futures) |*f| try deadline.await(io, f);
            // One leader per round's first barrier; two generations per round.
            try testing.expectEqual(@as(u32, generations), leaders.load(.monotonic));
            const generation = barrier.state.load(.monotonic).generation;
            try testing.expectEqual(@as(u16, generations * 2), generation);
        }
    }.body);
}

fn barrierWaiter(io: Io, barrier: *sync.Barrier) Io.Cancelable!bool {
    return barrier.wait(io);
}

test "Barrier: a canceled waiter withdraws its arrival; OS threads take part" {
    try withRuntime(struct {
        fn arrived(b: *sync.Barrier) bool {
            return b.state.load(.monotonic).arrived == 1;
        }
        fn threadParty(io: Io, b: *sync.Barrier) void {
            _ = b.waitUncancelable(io);
        }
        fn body(io: Io) !void {
            var barrier: sync.Barrier = .init(2);
            var waiter = try io.concurrent(barrierWaiter, .{ io, &barrier });
            try waitUntil(io, &barrier, arrived);
            try testing.expectError(error.Canceled, waiter.cancel(io));
            try testing.expectEqual(@as(u16, 0), barrier.state.load(.monotonic).arrived);
            const thread = try std.Thread.spawn(.{}, threadParty, .{ io, &barrier });
            try waitUntil(io, &barrier, arrived);
            // The second arrival leads.
            try testing.expect(try deadline.run(io, sync.Barrier.wait, .{ &barrier, io }));
            thread.join();
        }
    }.body);
}

// ---------------------------------------------------------------------------------- WaitGroup

fn groupJob(io: Io, group: *sync.WaitGroup, finished: *std.atomic.Value(u32)) Io.Cancelable!void {
    try io.sleep(.fromMicroseconds(50), .awake);
    _ = finished.fetchAdd(1, .monotonic);
    group.done(io);
}

test "WaitGroup: wait returns after every done; timeout while jobs are outstanding" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var wait_group: sync.WaitGroup = .init;
            var finished: std.atomic.Value(u32) = .init(0);
            var group: Io.Group = .init;
            defer group.cancel(io);
            wait_group.add(20);
            for (0..20) |_| try group.concurrent(io, groupJob, .{ io, &wait_group, &finished });
            try deadline.run(io, sync.WaitGroup.wait, .{ &wait_group, io });
            try testing.expectEqual(@as(u32, 20), finished.load(.monotonic));
            wait_group.add(1);
            try testing.expectError(error.Timeout, wait_group.waitTimeout(io, timeout_short));
            wait_group.done(io);
            try wait_group.waitTimeout(io, timeout_short);
            try deadline.awaitGroup(io, &group);
        }
    }.body);
}

// ---------------------------------------------------------------------------------- OnceCell

const SlowInit = struct {
    runs: std.atomic.Value(u32) = .init(0),
    fn make(io: Io, self: *SlowInit) Io.Cancelable!u64 {
        _ = self.runs.fetchAdd(1, .monotonic);
        try io.sleep(.fromMicroseconds(200), .awake); // others arrive meanwhile and wait
        return 42;
    }
};

fn blockedInit(io: Io, cell: *sync.OnceCell(u64), never: *sync.Notify) Io.Cancelable!void {
    _ = try cell.getOrInit(io, struct {
        fn make(io_: Io, notify: *sync.Notify) Io.Cancelable!u64 {
            try notify.wait(io_);
            return 0;
        }
    }.make, .{ io, never });
}

fn cellReader(io: Io, cell: *sync.OnceCell(u64), init: *SlowInit) Io.Cancelable!void {
    const value = try cell.getOrInit(io, SlowInit.make, .{ io, init });
    std.debug.assert(value.* == 42);
}

test "OnceCell: concurrent getOrInit runs the initialiser once; a canceled one resets" {
    try withRuntime(struct {
        fn initializing(c: *sync.OnceCell(u64)) bool {
            return c.state.load(.monotonic) != 0;
        }
        fn body(io: Io) !void {
            var cell: sync.OnceCell(u64) = .init;
            var init: SlowInit = .{};
            var group: Io.Group = .init;
            for (0..10) |_| try group.concurrent(io, cellReader, .{ io, &cell, &init });
            try deadline.awaitGroup(io, &group);
            try testing.expectEqual(@as(u32, 1), init.runs.load(.monotonic));
            try testing.expectEqual(@as(u64, 42), cell.get().?.*);

            var second: sync.OnceCell(u64) = .init;
            // An initialiser that blocks until canceled: no race with the cancel below.
            var never: sync.Notify = .init;
            var canceled = try io.concurrent(blockedInit, .{ io, &second, &never });
            try waitUntil(io, &second, initializing);
            try testing.expectError(error.Canceled, canceled.cancel(io));
            try testing.expect(second.get() == null); // the failed initialiser left it empty
            try testing.expectEqual(@as(u64, 42), (try second.getOrInit(io, SlowInit.make, .{
                io,
                &init,
            })).*);
        }
    }.body);
}

// ---------------------------------------------------------------------------------- Semaphore

pub fn semaphoreUser(
    io: Io,
    semaphore: *sync.Semaphore,
    inside: *std.atomic.Value(u32),
    limit: u32,
    rounds: u32,
) !void {
    for (0..rounds) |i| {
        try semaphore.acquire(io);
        defer semaphore.release(io);
        if (inside.fetchAdd(1, .monotonic) + 1 > limit) return error.TooMany;
        if (i % 16 == 0) try io.sleep(.fromNanoseconds(1), .awake);
        _ = inside.fetchSub(1, .monotonic);
    }
}

test "Semaphore: never more holders than permits under contention; all permits back" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var semaphore: sync.Semaphore = .init(2);
            var inside: std.atomic.Value(u32) = .init(0);
            var futures: [8]FutureOf(semaphoreUser) = undefined;
            for (&futures) |*f| f.* = try io.concurrent(semaphoreUser, .{
                io,
                &semaphore,
                &inside,
                2,
                500,
            });
            for (&futures) |*f| try deadline.await(io, f);
            try testing.expectEqual(@as(u32, 2), semaphore.available());
        }
    }.body);
}

fn semaphoreWaiter(
    io: Io,
    semaphore: *sync.Semaphore,
    arrivals: *Arrivals,
    id: u32,
) Io.Cancelable!void {
    try semaphore.acquire(io);
    arrivals.record(id);
}

test "Semaphore: FIFO hand-off; canceled and timed-out acquires hold nothing" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var semaphore: sync.Semaphore = .init(0);
            var arrivals: Arrivals = .{};
            var futures: [3]Io.Future(Io.Cancelable!void) = undefined;
            for (&futures, 0..) |*f, id| {
                f.* = try io.concurrent(semaphoreWaiter, .{
                    io,
                    &semaphore,
                    &arrivals,
                    @as(u32, @intCast(id)),
                });
                try waitForWaiters(io, &semaphore, id + 1);
            }
            try testing.expectError(error.Canceled, futures[1].cancel(io));
            try testing.expectError(error.Timeout, semaphore.acquireTimeout(io, timeout_short));
            // One permit at a time: with several executors the two woken waiters would
            // otherwise append in parallel.
            semaphore.release(io);
            try waitUntil(io, &arrivals, Arrivals.hasOne);
            try arrivals.expectIds(&.{0});
            semaphore.release(io);
            try deadline.await(io, &futures[0]);
            try deadline.await(io, &futures[2]);
            try arrivals.expectIds(&.{ 0, 2 });
            try testing.expectEqual(@as(u32, 0), semaphore.available());
            semaphore.release(io);
            try testing.expect(semaphore.tryAcquire());
        }
    }.body);
}

// ---------------------------------------------------------------------------------- RwLock

/// Who holds an `RwLock` now, checked by every holder: a writer must be alone, a reader must
/// see no writer, and a reader must never see a half-done write (`value` and `shadow` differ).
pub const RwShared = struct {
    lock: sync.RwLock = .init,
    value: u64 = 0,
    shadow: u64 = 0,
    readers_inside: std.atomic.Value(u32) = .init(0),
    writers_inside: std.atomic.Value(u32) = .init(0),
    reads: std.atomic.Value(u64) = .init(0),

    fn write(shared: *RwShared, io: Io, pause: bool) !void {
        defer shared.lock.unlock(io);
        if (shared.writers_inside.fetchAdd(1, .monotonic) != 0) return error.TwoWriters;
        if (shared.readers_inside.load(.monotonic) != 0) return error.WriterWithReaders;
        shared.value += 1;
        if (pause) try io.sleep(.fromNanoseconds(1), .awake);
        shared.shadow += 1;
        _ = shared.writers_inside.fetchSub(1, .monotonic);
    }

    fn read(shared: *RwShared, io: Io, pause: bool) !void {
        defer shared.lock.unlockShared(io);
        _ = shared.readers_inside.fetchAdd(1, .monotonic);
        if (shared.writers_inside.load(.monotonic) != 0) return error.ReaderWithWriter;
        const seen = shared.value;
        if (pause) try io.sleep(.fromNanoseconds(1), .awake);
        if (shared.shadow != seen) return error.TornRead;
        _ = shared.readers_inside.fetchSub(1, .monotonic);
        _ = shared.reads.fetchAdd(1, .monotonic);
    }
};

const rw_ops = 400;

pub fn rwTask(io: Io, shared: *RwShared, writer: bool, ops: usize) !void {
    for (0..ops) |i| {
        const pause = i % 32 == 0;
        if (writer) {
            try shared.lock.lock(io);
            try shared.write(io, pause);
        } else {
            try shared.lock.lockShared(io);
            try shared.read(io, pause);
        }
    }
}

/// An OS thread's share: the uncancelable variants, which block the thread.
fn rwThread(io: Io, shared: *RwShared, writer: bool, failed: *std.atomic.Value(bool)) void {
    for (0..rw_ops) |_| {
        const result = if (writer) blk: {
            shared.lock.lockUncancelable(io);
            break :blk shared.write(io, false);
        } else blk: {
            shared.lock.lockSharedUncancelable(io);
            break :blk shared.read(io, false);
        };
        result catch failed.store(true, .monotonic);
    }
}

test "RwLock: one writer or many readers, never a torn read, across executors and threads" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var shared: RwShared = .{};
            var failed: std.atomic.Value(bool) = .init(false);
            var threads: [2]std.Thread = undefined;
            for (&threads, 0..) |*t, i| {
                t.* = try std.Thread.spawn(.{}, rwThread, .{ io, &shared, i == 0, &failed });
            }
            var futures: [6]FutureOf(rwTask) = undefined;
            for (&futures, 0..) |*f, i| {
                f.* = try io.concurrent(rwTask, .{ io, &shared, i < 2, rw_ops });
            }
            for (&futures) |*f| try deadline.await(io, f);
            for (threads) |t| t.join();
            try testing.expect(!failed.load(.monotonic));
            try testing.expectEqual(@as(u64, 3 * rw_ops), shared.value);
            try testing.expectEqual(@as(u64, 5 * rw_ops), shared.reads.load(.monotonic));
            try testing.expectEqual(@as(u32, 0), shared.lock.state.load(.monotonic));
        }
    }.body);
}

test "RwLock: works unchanged on std.Io.Threaded" {
    var threaded: Io.Threaded = .init(testing.allocator, .{});
    defer threaded.deinit();
    const io = threaded.io();
    var shared: RwShared = .{};
    var failed: std.atomic.Value(bool) = .init(false);
    var threads: [4]std.Thread = undefined;
    for (&threads, 0..) |*t, i| {
        t.* = try std.Thread.spawn(.{}, rwThread, .{ io, &shared, i < 2, &failed });
    }
    for (threads) |t| t.join();
    try testing.expect(!failed.load(.monotonic));
    try testing.expectEqual(@as(u64, 2 * rw_ops), shared.value);
    try testing.expectEqual(@as(u32, 0), shared.lock.state.load(.monotonic));
}

/// Arrival order of the tasks that got the lock, and how many readers are inside together.
const RwOrder = struct {
    lock: sync.RwLock = .init,
    order: [4]u8 = @splat(0),
    order_len: std.atomic.Value(u32) = .init(0),
    readers_inside: std.atomic.Value(u32) = .init(0),

    fn note(rw_order: *RwOrder, id: u8) void {
        rw_order.order[rw_order.order_len.fetchAdd(1, .monotonic)] = id;
    }

    fn queued(rw_order: *RwOrder, io: Io, count: u32) !void {
        var polls: u32 = 0;
        while (true) : (polls += 1) {
            rw_order.lock.lock_internal.lock();
            const len = rw_order.lock.waiters.len;
            rw_order.lock.lock_internal.unlock();
            if (len == count) return;
            if (polls == 100_000) return error.StateNeverReached;
            try io.sleep(.fromMicroseconds(20), .awake);
        }
    }
};

fn rwOrderWriter(io: Io, rw_order: *RwOrder, id: u8) !void {
    try rw_order.lock.lock(io);
    defer rw_order.lock.unlock(io);
    rw_order.note(id);
}

/// A reader of a batch: it notes itself, then stays inside until both readers are: had the
/// batch not been admitted together, the second could never enter (`StateNeverReached`).
fn rwOrderReader(io: Io, rw_order: *RwOrder, id: u8) !void {
    try rw_order.lock.lockShared(io);
    defer rw_order.lock.unlockShared(io);
    rw_order.note(id);
    _ = rw_order.readers_inside.fetchAdd(1, .monotonic);
    try waitUntil(io, &rw_order.readers_inside, struct {
        fn f(inside: *std.atomic.Value(u32)) bool {
            return inside.load(.monotonic) == 2;
        }
    }.f);
}

test "RwLock: FIFO: a waiting writer holds back later readers, who then enter together" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var rw_order: RwOrder = .{};
            try rw_order.lock.lockShared(io);
            var writer = try io.concurrent(rwOrderWriter, .{ io, &rw_order, 1 });
            try rw_order.queued(io, 1);
            // A writer waits: readers queue behind it even though readers hold the lock.
            try testing.expect(!rw_order.lock.tryLockShared());
            var reader_a = try io.concurrent(rwOrderReader, .{ io, &rw_order, 2 });
            var reader_b = try io.concurrent(rwOrderReader, .{ io, &rw_order, 3 });
            try rw_order.queued(io, 3);
            rw_order.lock.unlockShared(io);
            try deadline.await(io, &writer);
            try deadline.await(io, &reader_a);
            try deadline.await(io, &reader_b);
            try testing.expectEqual(@as(u8, 1), rw_order.order[0]);
            try testing.expectEqual(@as(u32, 3), rw_order.order_len.load(.monotonic));
            try testing.expectEqual(@as(u32, 0), rw_order.lock.state.load(.monotonic));
        }
    }.body);
}

test "RwLock: canceled and timed-out locks hold nothing; readers behind a withdrawn writer enter" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var rw_order: RwOrder = .{};
            try rw_order.lock.lockShared(io);
            var writer = try io.concurrent(rwOrderWriter, .{ io, &rw_order, 1 });
            try rw_order.queued(io, 1);
            // Both time out behind the writer (a reader too: FIFO), holding nothing.
            try testing.expectError(error.Timeout, rw_order.lock.lockTimeout(io, timeout_short));
            try testing.expectError(
                error.Timeout,
                rw_order.lock.lockSharedTimeout(io, timeout_short),
            );
            var reader = try io.concurrent(rwOrderSolo, .{ io, &rw_order });
            try rw_order.queued(io, 2);
            // The writer at the head withdraws: the reader behind it joins the holder.
            try testing.expectError(error.Canceled, writer.cancel(io));
            // Polled, not awaited: a lost hand-off fails the test instead of hanging it.
            try waitUntil(io, &rw_order.order_len, struct {
                fn f(len: *std.atomic.Value(u32)) bool {
                    return len.load(.monotonic) == 1;
                }
            }.f);
            try deadline.await(io, &reader);
            try testing.expectEqual(@as(u8, 2), rw_order.order[0]); // the reader, not the writer
            try testing.expectEqual(@as(u32, 1), rw_order.lock.readers());
            rw_order.lock.unlockShared(io);
            try testing.expectEqual(@as(u32, 0), rw_order.lock.state.load(.monotonic));
            try testing.expect(rw_order.lock.tryLock());
            rw_order.lock.unlock(io);
        }
    }.body);
}

fn rwOrderSolo(io: Io, rw_order: *RwOrder) !void {
    try rw_order.lock.lockShared(io);
    rw_order.note(2);
    rw_order.lock.unlockShared(io);
}

// ------------------------------------------------------------ std's futex-based primitives

fn rwUser(io: Io, lock: *Io.RwLock, value: *u64, shadow: *u64, writer: bool) !void {
    for (0..300) |i| {
        if (writer) {
            try lock.lock(io);
            defer lock.unlock(io);
            value.* += 1;
            if (i % 32 == 0) try io.sleep(.fromNanoseconds(1), .awake);
            shadow.* += 1;
        } else {
            try lock.lockShared(io);
            defer lock.unlockShared(io);
            const seen = value.*;
            if (i % 32 == 0) try io.sleep(.fromNanoseconds(1), .awake);
            if (shadow.* != seen) return error.TornRead;
        }
    }
}

test "std RwLock under contention on weft: readers never see a half-done write" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var lock: Io.RwLock = .init;
            var value: u64 = 0;
            var shadow: u64 = 0;
            var futures: [6]FutureOf(rwUser) = undefined;
            for (&futures, 0..) |*f, i| f.* = try io.concurrent(rwUser, .{
                io,
                &lock,
                &value,
                &shadow,
                i < 2,
            });
            for (&futures) |*f| try deadline.await(io, f);
            try testing.expectEqual(@as(u64, 600), value);
            try testing.expectEqual(value, shadow);
        }
    }.body);
}

fn futexWaiter(io: Io, word: *const u32, returned: *std.atomic.Value(u32)) Io.Cancelable!void {
    try io.futexWait(u32, word, 0);
    _ = returned.fetchAdd(1, .release);
}

test "futex: a wake of one wakes the oldest waiter only; the next stays parked" {
    if (!platform.fibers) return os.skipTest(@src(), "weft's futex: std.Io.Threaded's is the OS's");
    try withRuntime(struct {
        fn body(io: Io) !void {
            var word: u32 = 0;
            var returned: std.atomic.Value(u32) = .init(0);
            var first = try io.concurrent(futexWaiter, .{ io, &word, &returned });
            defer first.cancel(io) catch {};
            try task_parked.waitParked(io, &first, .cancelable);
            var second = try io.concurrent(futexWaiter, .{ io, &word, &returned });
            defer second.cancel(io) catch {};
            try task_parked.waitParked(io, &second, .cancelable);
            io.futexWake(u32, &word, 1);
            // `futexWake` marks each task it wakes before it returns, so a second one woken
            // (a wasted switch, and a spurious return for it) shows at once, not later.
            try testing.expect(task_parked.isParked(&second, .cancelable));
            try deadline.await(io, &first);
            try testing.expectEqual(1, returned.load(.acquire));
            try testing.expect(task_parked.isParked(&second, .cancelable));
            io.futexWake(u32, &word, 1);
            try deadline.await(io, &second);
            try testing.expectEqual(2, returned.load(.acquire));
        }
    }.body);
}

const Mailbox = struct {
    mutex: Io.Mutex = .init,
    condition: Io.Condition = .init,
    items: u32 = 0,
    taken: u32 = 0,
};

fn conditionTaker(io: Io, box: *Mailbox, count: u32) Io.Cancelable!void {
    for (0..count) |_| {
        try box.mutex.lock(io);
        defer box.mutex.unlock(io);
        while (box.items == 0) try box.condition.wait(io, &box.mutex);
        box.items -= 1;
        box.taken += 1;
    }
}

test "std Condition and Semaphore under contention on weft" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var box: Mailbox = .{};
            var group: Io.Group = .init;
            for (0..4) |_| try group.concurrent(io, conditionTaker, .{ io, &box, 250 });
            for (0..1000) |i| {
                try box.mutex.lock(io);
                box.items += 1;
                if (i % 2 == 0) box.condition.signal(io) else box.condition.broadcast(io);
                box.mutex.unlock(io);
                if (i % 64 == 0) try io.sleep(.fromNanoseconds(1), .awake);
            }
            try deadline.awaitGroup(io, &group);
            try testing.expectEqual(@as(u32, 1000), box.taken);

            var semaphore: Io.Semaphore = .{ .permits = 1 };
            var total: u64 = 0;
            var sem_group: Io.Group = .init;
            for (0..6) |_| try sem_group.concurrent(io, stdSemaphoreUser, .{
                io,
                &semaphore,
                &total,
            });
            try deadline.awaitGroup(io, &sem_group);
            try testing.expectEqual(@as(u64, 6 * 300), total);
        }
    }.body);
}

fn stdSemaphoreUser(io: Io, semaphore: *Io.Semaphore, total: *u64) Io.Cancelable!void {
    for (0..300) |i| {
        try semaphore.wait(io);
        defer semaphore.post(io);
        const seen = total.*;
        if (i % 32 == 0) try io.sleep(.fromNanoseconds(1), .awake);
        total.* = seen + 1;
    }
}
