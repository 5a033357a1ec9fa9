//! `Channel(T)`: a bounded multi-producer, multi-consumer FIFO channel.
//!
//! ```
//! var buffer: [64]Job = undefined;
//! var jobs: weft.sync.Channel(Job) = .init(&buffer);
//! // producers                          // consumers
//! try jobs.send(io, job);                while (jobs.recv(io)) |job| run(job) else |err| ...
//! jobs.close(io); // when done: consumers drain what is left, then get error.Closed
//! ```
//!
//! The caller provides the ring buffer (its length is the capacity; 0 makes a rendezvous
//! channel where every send waits for a receiver). Nothing allocates.
//!
//! ## Semantics
//!
//! - FIFO: values are received in the order their sends completed; one producer's values
//!   arrive in the order it sent them.
//! - Fairness: blocked senders and blocked receivers are each served in arrival order
//!   (`WaitQueue`): a receiver that blocks is handed the next value directly by a sender, and
//!   a receiver that frees a slot moves the oldest blocked sender's value into it, so no
//!   newcomer overtakes a waiter.
//! - `close`: later sends fail with `error.Closed` (blocked senders too: their values are not
//!   delivered); receivers drain the buffer, then get `error.Closed`. Idempotent.
//! - Cancel-safe: a canceled `send` either delivered its value (returns success, cancel
//!   re-armed) or did not (returns `error.Canceled`); a canceled `recv` either got a value
//!   (returns it, cancel re-armed) or took nothing (`error.Canceled`). No value is lost or
//!   duplicated. The same holds for timeouts.
//!
//! ## Cost
//!
//! Every operation takes the channel's lock (`WaitQueue.Lock`: one swap to take, a plain store
//! to release; never held across a park). Blocking parks the fiber (or the
//! thread, off weft) through `io.futexWait` on the waiter's own node. A lock-free ring
//! (sequence numbers per slot) was rejected for now: it makes the uncontended path one CAS
//! cheaper but needs a second protocol to hand values to parked waiters and to make
//! cancelation exact, and this channel's contract is exactness first.
//!
//! Thread-safety: every method may be called from any task or OS thread, all with the same
//! `Io`.
const std = @import("std");
const assert = std.debug.assert;
const Io = std.Io;
const WaitQueue = @import("WaitQueue.zig");

pub fn Channel(comptime T: type) type {
    return struct {
        const Self = @This();

        lock: WaitQueue.Lock = .{},
        buffer: []T,
        /// Index of the oldest buffered value.
        head: usize = 0,
        len: usize = 0,
        closed: bool = false,
        senders: WaitQueue = .of(.channel_send),
        receivers: WaitQueue = .of(.channel_recv),

        /// The type of the values carried.
        pub const Item = T;

        /// A blocked sender (or a send arm of a select): the value it offers.
        pub const SendWaiter = struct { node: WaitQueue.Node = .{}, value: T };
        /// A blocked receiver (or a recv arm of a select): where a sender puts the value.
        pub const RecvWaiter = struct { node: WaitQueue.Node = .{}, value: T = undefined };

        /// Node completion codes.
        pub const handed: u32 = 1;
        pub const closed_code: u32 = 2;

        /// A value taken under the lock, and the waiter to wake once the lock is released (a
        /// sender whose value moved into the buffer or was taken directly).
        pub const Taken = struct { value: T, wake: ?*const u32 };

        pub const SendError = error{
            /// The channel was closed before the value was delivered.
            Closed,
        } || Io.Cancelable;
        pub const SendTimeoutError = SendError || error{Timeout};
        pub const TrySendError = error{
            /// No room and no waiting receiver.
            Full,
            Closed,
        };
        pub const RecvError = error{
            /// The channel is closed and empty.
            Closed,
        } || Io.Cancelable;
        pub const RecvTimeoutError = RecvError || error{Timeout};
        pub const TryRecvError = error{
            /// Nothing buffered and no waiting sender.
            Empty,
            Closed,
        };

        /// A channel whose capacity is `buffer.len`. The buffer must outlive the channel.
        pub fn init(buffer: []T) Self {
            return .{ .buffer = buffer };
        }

        pub fn capacity(channel: *const Self) usize {
            return channel.buffer.len;
        }

        /// Sends without blocking. Not a cancelation point.
        pub fn trySend(channel: *Self, io: Io, value: T) TrySendError!void {
            channel.lock.lock();
            if (channel.closed) {
                channel.lock.unlock();
                return error.Closed;
            }
            if (channel.offer(io, value)) return; // unlocked by `offer`
            channel.lock.unlock();
            return error.Full;
        }

        /// Sends, waiting for room (or, capacity 0, for a receiver). Cancelation point when it
        /// blocks. See the file's doc for cancelation and close.
        pub fn send(channel: *Self, io: Io, value: T) SendError!void {
            return channel.sendDeadline(io, value, null) catch |err| switch (err) {
                error.Timeout => unreachable, // no deadline
                else => |e| e,
            };
        }

        /// `send` that gives up with `error.Timeout` (the value then was not delivered).
        pub fn sendTimeout(
            channel: *Self,
            io: Io,
            value: T,
            timeout: Io.Timeout,
        ) SendTimeoutError!void {
            return channel.sendDeadline(io, value, timeout.toTimestamp(io));
        }

        fn sendDeadline(
            channel: *Self,
            io: Io,
            value: T,
            deadline: ?Io.Clock.Timestamp,
        ) SendTimeoutError!void {
            channel.lock.lock();
            if (channel.closed) {
                channel.lock.unlock();
                return error.Closed;
            }
            if (channel.offer(io, value)) return; // unlocked by `offer`
            var waiter: SendWaiter = .{ .value = value };
            channel.senders.push(&waiter.node);
            channel.assertInvariants();
            channel.lock.unlock();
            const code = try channel.senders.wait(&channel.lock, io, &waiter.node, deadline);
            return switch (code) {
                handed => {},
                closed_code => error.Closed,
                else => unreachable,
            };
        }

        /// Under the lock, open channel: delivers `value` to a waiting receiver or into the
        /// buffer and releases the lock (returns true), or leaves both alone (returns false).
        fn offer(channel: *Self, io: Io, value: T) bool {
            switch (channel.deliverLocked(value)) {
                .full => return false,
                .buffered => channel.lock.unlock(),
                .handed => |word| {
                    channel.lock.unlock();
                    WaitQueue.wakeWord(io, word);
                },
            }
            return true;
        }

        const Delivery = union(enum) { full, buffered, handed: *const u32 };

        /// Under the lock, open channel: hands `value` to the oldest live receiver (the word
        /// to wake after unlocking is returned), else buffers it, else reports `full`.
        fn deliverLocked(channel: *Self, value: T) Delivery {
            assert(!channel.closed);
            // Bounded by the queue's length; each pass unlinks one node.
            while (channel.receivers.pop()) |node| {
                assert(channel.len == 0);
                // Both queues hold nodes only at capacity 0, when one select waits on both.
                assert(channel.senders.isEmpty() or channel.buffer.len == 0);
                const waiter: *RecvWaiter = @fieldParentPtr("node", node);
                waiter.value = value;
                // A dead arm of a decided select never reads the value: try the next one.
                if (node.tryComplete(handed)) |word| return .{ .handed = word };
            }
            if (channel.len == channel.buffer.len) return .full;
            assert(channel.senders.isEmpty());
            channel.buffer[(channel.head + channel.len) % channel.buffer.len] = value;
            channel.len += 1;
            return .buffered;
        }

        /// Receives without blocking. Not a cancelation point.
        pub fn tryRecv(channel: *Self, io: Io) TryRecvError!T {
            channel.lock.lock();
            if (channel.take(io)) |value| return value; // unlocked by `take`
            const closed = channel.closed;
            channel.lock.unlock();
            return if (closed) error.Closed else error.Empty;
        }

        /// Receives, waiting for a value. After `close`, returns what is left, then
        /// `error.Closed`. Cancelation point when it blocks.
        pub fn recv(channel: *Self, io: Io) RecvError!T {
            return channel.recvDeadline(io, null) catch |err| switch (err) {
                error.Timeout => unreachable, // no deadline
                else => |e| e,
            };
        }

        /// `recv` that gives up with `error.Timeout` (then nothing was taken).
        pub fn recvTimeout(channel: *Self, io: Io, timeout: Io.Timeout) RecvTimeoutError!T {
            return channel.recvDeadline(io, timeout.toTimestamp(io));
        }

        fn recvDeadline(channel: *Self, io: Io, deadline: ?Io.Clock.Timestamp) RecvTimeoutError!T {
            channel.lock.lock();
            if (channel.take(io)) |value| return value; // unlocked by `take`
            if (channel.closed) {
                channel.lock.unlock();
                return error.Closed;
            }
            var waiter: RecvWaiter = .{};
            channel.receivers.push(&waiter.node);
            channel.assertInvariants();
            channel.lock.unlock();
            const code = try channel.receivers.wait(&channel.lock, io, &waiter.node, deadline);
            return switch (code) {
                handed => waiter.value,
                closed_code => error.Closed,
                else => unreachable,
            };
        }

        /// Under the lock: takes the oldest value and releases the lock, or returns null and
        /// keeps it.
        fn take(channel: *Self, io: Io) ?T {
            const taken = channel.takeLocked() orelse return null;
            channel.lock.unlock();
            if (taken.wake) |word| WaitQueue.wakeWord(io, word);
            return taken.value;
        }

        /// Under the lock: takes the oldest value, refilling its slot from the oldest live
        /// blocked sender, or (capacity 0) straight from that sender; null if there is none.
        fn takeLocked(channel: *Self) ?Taken {
            if (channel.len > 0) {
                assert(channel.receivers.isEmpty());
                const value = channel.buffer[channel.head];
                channel.head = (channel.head + 1) % channel.buffer.len;
                channel.len -= 1;
                // Bounded by the queue's length; each pass unlinks one node.
                while (channel.senders.pop()) |node| {
                    assert(channel.len + 1 == channel.buffer.len);
                    const waiter: *SendWaiter = @fieldParentPtr("node", node);
                    // Copied before completing: a plain sender may return (and reuse the
                    // memory) as soon as it is completed. Past `len`, so a dead arm's value
                    // copied here is simply never read.
                    const slot = (channel.head + channel.len) % channel.buffer.len;
                    channel.buffer[slot] = waiter.value;
                    const word = node.tryComplete(handed) orelse continue;
                    channel.len += 1;
                    return .{ .value = value, .wake = word };
                }
                return .{ .value = value, .wake = null };
            }
            // Senders wait on an empty buffer only at capacity 0: take straight from the
            // oldest live one (a rendezvous).
            while (channel.senders.pop()) |node| {
                assert(channel.buffer.len == 0);
                const waiter: *SendWaiter = @fieldParentPtr("node", node);
                const value = waiter.value;
                const word = node.tryComplete(handed) orelse continue;
                return .{ .value = value, .wake = word };
            }
            return null;
        }

        /// Closes the channel: see the file's doc. Idempotent; never blocks.
        pub fn close(channel: *Self, io: Io) void {
            channel.lock.lock();
            defer channel.lock.unlock();
            channel.closed = true;
            // Woken under the lock: a completed node may vanish at once, so each is popped,
            // completed and woken before the next is looked at.
            while (channel.receivers.pop()) |node| {
                assert(channel.len == 0);
                if (node.tryComplete(closed_code)) |word| WaitQueue.wakeWord(io, word);
            }
            while (channel.senders.pop()) |node| {
                if (node.tryComplete(closed_code)) |word| WaitQueue.wakeWord(io, word);
            }
        }

        // ------------------------------------------------------------------ for `select`
        // Each called with the lock held (select.zig takes the locks of all its channels).

        pub const RecvAttempt = union(enum) { empty, closed, taken: Taken };
        pub const Side = enum { send, recv };

        /// What a `tryRecv` would do now; takes the value if there is one.
        pub fn attemptRecvLocked(channel: *Self) RecvAttempt {
            if (channel.takeLocked()) |taken| return .{ .taken = taken };
            return if (channel.closed) .closed else .empty;
        }

        pub const SendAttempt = union(enum) { full, closed, buffered, handed: *const u32 };

        /// What a `trySend` would do now; delivers the value if it can.
        pub fn attemptSendLocked(channel: *Self, value: T) SendAttempt {
            if (channel.closed) return .closed;
            return switch (channel.deliverLocked(value)) {
                .full => .full,
                .buffered => .buffered,
                .handed => |word| .{ .handed = word },
            };
        }

        /// Queues a select's recv arm (after `attemptRecvLocked` found nothing).
        pub fn pushReceiverLocked(channel: *Self, waiter: *RecvWaiter) void {
            assert(waiter.node.selector != null);
            assert(!channel.closed);
            channel.receivers.push(&waiter.node);
            channel.assertInvariants();
        }

        /// Queues a select's send arm (after `attemptSendLocked` found no room).
        pub fn pushSenderLocked(channel: *Self, waiter: *SendWaiter) void {
            assert(waiter.node.selector != null);
            assert(!channel.closed);
            channel.senders.push(&waiter.node);
            channel.assertInvariants();
        }

        /// Unlinks a select's arm if it is still queued (a losing or withdrawn arm).
        pub fn withdrawLocked(channel: *Self, node: *WaitQueue.Node, side: Side) void {
            assert(node.selector != null);
            if (!node.linked) return;
            switch (side) {
                .send => channel.senders.remove(node),
                .recv => channel.receivers.remove(node),
            }
        }

        pub fn isClosed(channel: *Self) bool {
            channel.lock.lock();
            defer channel.lock.unlock();
            return channel.closed;
        }

        /// Values buffered now (a snapshot).
        pub fn count(channel: *Self) usize {
            channel.lock.lock();
            defer channel.lock.unlock();
            return channel.len;
        }

        /// Blocked senders and receivers now (a snapshot, for tests and diagnostics).
        pub fn waiting(channel: *Self) struct { senders: u32, receivers: u32 } {
            channel.lock.lock();
            defer channel.lock.unlock();
            return .{ .senders = channel.senders.len, .receivers = channel.receivers.len };
        }

        fn assertInvariants(channel: *const Self) void {
            assert(channel.len <= channel.buffer.len);
            // Receivers wait only on an empty buffer with no sender waiting, and vice versa.
            if (!channel.receivers.isEmpty()) assert(channel.len == 0);
            // Both queues hold nodes only at capacity 0, when one select waits on both.
            if (!channel.receivers.isEmpty() and !channel.senders.isEmpty()) {
                assert(channel.buffer.len == 0);
            }
            if (!channel.senders.isEmpty()) assert(channel.len == channel.buffer.len);
            if (channel.closed) assert(channel.receivers.isEmpty() and channel.senders.isEmpty());
        }
    };
}

test "Channel: model-based fuzz of the non-blocking operations, many seeds" {
    const io = std.testing.io;
    for (0..100) |seed| {
        var prng: std.Random.DefaultPrng = .init(seed);
        const random = prng.random();
        var buffer: [5]u32 = undefined;
        const capacity = random.uintAtMost(usize, buffer.len);
        var channel: Channel(u32) = .init(buffer[0..capacity]);
        var model: std.Deque(u32) = .empty;
        defer model.deinit(std.testing.allocator);
        var next: u32 = 0;
        for (0..300) |_| {
            switch (random.uintLessThan(u8, 10)) {
                0...4 => {
                    const result = channel.trySend(io, next);
                    if (channel.closed) {
                        try std.testing.expectError(error.Closed, result);
                    } else if (model.len == capacity) {
                        try std.testing.expectError(error.Full, result);
                    } else {
                        try result;
                        try model.pushBack(std.testing.allocator, next);
                    }
                    next += 1;
                },
                5...8 => {
                    const result = channel.tryRecv(io);
                    if (model.popFront()) |expected| {
                        try std.testing.expectEqual(expected, try result);
                    } else if (channel.closed) {
                        try std.testing.expectError(error.Closed, result);
                    } else {
                        try std.testing.expectError(error.Empty, result);
                    }
                },
                9 => if (random.uintLessThan(u8, 8) == 0) channel.close(io),
                else => unreachable,
            }
            try std.testing.expectEqual(model.len, channel.count());
        }
    }
}

const Checker = @import("../testing/InterleavingChecker.zig");

/// Two producers send three values each (retrying a send that was canceled or timed out,
/// which delivered nothing); the last one closes. Two consumers receive until closed. The
/// capacity (0, 1 or 2) comes from the seed.
const ChannelScenario = struct {
    buffer: [2]u32 = undefined,
    channel: Channel(u32),
    prng: std.Random.DefaultPrng,
    producers_left: u32 = 2,
    /// How many times each value was sent (send returned success) and received.
    sent: [values_max]u8 = @splat(0),
    received: [values_max]u8 = @splat(0),
    /// Per consumer, the last sequence number seen of each producer (FIFO check).
    last: [2][2]?u32 = @splat(@splat(null)),
    order_broken: bool = false,

    const per_producer = 3;
    const values_max = 2 * per_producer;
    pub const rearming_threads = [_]usize{ 0, 1, 2, 3 };

    pub fn init(seed: u64) ChannelScenario {
        var scenario: ChannelScenario = .{ .channel = undefined, .prng = .init(seed ^ 0xc4a2) };
        const capacity = scenario.prng.random().uintAtMost(usize, 2);
        scenario.channel = .init(scenario.buffer[0..capacity]);
        return scenario;
    }

    pub fn bodies(scenario: *ChannelScenario) [4]Checker.Body {
        return .{
            Checker.bodyOf(producer0, scenario),
            Checker.bodyOf(producer1, scenario),
            Checker.bodyOf(consumer0, scenario),
            Checker.bodyOf(consumer1, scenario),
        };
    }

    fn produce(scenario: *ChannelScenario, io_: Io, producer: u32) void {
        for (0..per_producer) |sequence| {
            const value: u32 = producer * per_producer + @as(u32, @intCast(sequence));
            while (true) {
                const deadline = Checker.maybeDeadline(io_, scenario.prng.random());
                const timeout: Io.Timeout = if (deadline) |d| .{ .deadline = d } else .none;
                scenario.channel.sendTimeout(io_, value, timeout) catch |err| switch (err) {
                    error.Canceled, error.Timeout => {
                        Checker.noteError(io_, err);
                        continue; // not delivered
                    },
                    error.Closed => unreachable, // closed after both producers
                };
                break;
            }
            scenario.sent[value] += 1;
            Checker.cancelationPoint(io_);
        }
        scenario.producers_left -= 1;
        if (scenario.producers_left == 0) scenario.channel.close(io_);
    }

    fn consume(scenario: *ChannelScenario, io_: Io, consumer: usize) void {
        while (true) {
            const deadline = Checker.maybeDeadline(io_, scenario.prng.random());
            const timeout: Io.Timeout = if (deadline) |d| .{ .deadline = d } else .none;
            const value = scenario.channel.recvTimeout(io_, timeout) catch |err| switch (err) {
                error.Canceled, error.Timeout => {
                    Checker.noteError(io_, err);
                    continue; // took nothing
                },
                error.Closed => return,
            };
            scenario.note(consumer, value);
            Checker.cancelationPoint(io_);
        }
    }

    fn note(scenario: *ChannelScenario, consumer: usize, value: u32) void {
        scenario.received[value] += 1;
        const producer = value / per_producer;
        const sequence = value % per_producer;
        const last = &scenario.last[consumer][producer];
        if (last.*) |previous| if (sequence <= previous) {
            scenario.order_broken = true;
        };
        last.* = sequence;
    }

    fn producer0(scenario: *ChannelScenario, io_: Io) void {
        scenario.produce(io_, 0);
    }

    fn producer1(scenario: *ChannelScenario, io_: Io) void {
        scenario.produce(io_, 1);
    }

    fn consumer0(scenario: *ChannelScenario, io_: Io) void {
        scenario.consume(io_, 0);
    }

    fn consumer1(scenario: *ChannelScenario, io_: Io) void {
        scenario.consume(io_, 1);
    }

    pub fn check(scenario: *ChannelScenario) !void {
        try std.testing.expect(!scenario.order_broken);
        for (scenario.sent, scenario.received) |sent, received| {
            try std.testing.expectEqual(@as(u8, 1), sent);
            try std.testing.expectEqual(@as(u8, 1), received);
        }
        const waiting = scenario.channel.waiting();
        try std.testing.expectEqual(@as(u32, 0), waiting.senders + waiting.receivers);
    }
};

test "interleave: Channel, 1000 seeds: every value once, in order, no lost wake-up" {
    try Checker.checkSeeds(ChannelScenario);
}
