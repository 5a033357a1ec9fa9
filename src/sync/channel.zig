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
//! Every operation takes the channel's lock (`WaitQueue.Lock`: one CAS to take, one swap to
//! release when uncontended; never held across a park). Blocking parks the fiber (or the
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
        senders: WaitQueue = .empty,
        receivers: WaitQueue = .empty,

        /// A blocked sender: the value it offers.
        const SendWaiter = struct { node: WaitQueue.Node = .{}, value: T };
        /// A blocked receiver: where a sender puts the value.
        const RecvWaiter = struct { node: WaitQueue.Node = .{}, value: T = undefined };

        /// Node completion codes.
        const handed: u32 = 1;
        const closed_code: u32 = 2;

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
            assert(!channel.closed);
            if (channel.receivers.pop()) |node| {
                assert(channel.len == 0);
                assert(channel.senders.isEmpty());
                const waiter: *RecvWaiter = @fieldParentPtr("node", node);
                waiter.value = value;
                node.complete(handed);
                channel.lock.unlock();
                node.wake(io);
                return true;
            }
            if (channel.len == channel.buffer.len) return false;
            assert(channel.senders.isEmpty());
            channel.buffer[(channel.head + channel.len) % channel.buffer.len] = value;
            channel.len += 1;
            channel.lock.unlock();
            return true;
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

        /// Under the lock: takes the oldest value (refilling its slot from the oldest blocked
        /// sender) and releases the lock, or returns null and keeps it.
        fn take(channel: *Self, io: Io) ?T {
            if (channel.len > 0) {
                assert(channel.receivers.isEmpty());
                const value = channel.buffer[channel.head];
                channel.head = (channel.head + 1) % channel.buffer.len;
                channel.len -= 1;
                const node = channel.senders.pop() orelse {
                    channel.lock.unlock();
                    return value;
                };
                assert(channel.len + 1 == channel.buffer.len);
                const waiter: *SendWaiter = @fieldParentPtr("node", node);
                channel.buffer[(channel.head + channel.len) % channel.buffer.len] = waiter.value;
                channel.len += 1;
                node.complete(handed);
                channel.lock.unlock();
                node.wake(io);
                return value;
            }
            // Senders wait on an empty buffer only at capacity 0: take straight from the
            // oldest one (a rendezvous).
            const node = channel.senders.pop() orelse return null;
            const waiter: *SendWaiter = @fieldParentPtr("node", node);
            const value = waiter.value;
            node.complete(handed);
            channel.lock.unlock();
            node.wake(io);
            return value;
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
                node.complete(closed_code);
                node.wake(io);
            }
            while (channel.senders.pop()) |node| {
                node.complete(closed_code);
                node.wake(io);
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
            if (!channel.receivers.isEmpty()) assert(channel.senders.isEmpty());
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
