//! `Oneshot(T)`: a single value sent once from one task to one other.
//!
//! ```
//! var reply: weft.sync.Oneshot(u64) = .init;
//! // task A                              // task B
//! const v = try reply.recv(io);          reply.send(io, 42);
//! ```
//!
//! The value lives inside the `Oneshot` (no allocation); the caller owns the memory and keeps
//! it alive until both sides are done. A send and a receive are one atomic operation each when
//! the receiver does not have to wait; a waiting receiver parks on the state word itself.
//!
//! Thread-safety: one sender and one receiver, each in any task or OS thread, using the same
//! `Io`. `send` and `close` never block. Cancel-safe: a canceled `recv` either returns
//! `error.Canceled` with the value left in the oneshot (a later `recv` gets it), or returns the
//! value and re-arms the cancel request.
//!
//! ## State word
//!
//!   empty ──recv blocks──▶ waiting ──recv gives up──▶ empty
//!   empty | waiting ──send──▶ full ──recv──▶ taken
//!   empty | waiting ──close──▶ closed
const std = @import("std");
const assert = std.debug.assert;
const Io = std.Io;
const atomic = @import("../os/atomic.zig");

pub fn Oneshot(comptime T: type) type {
    return struct {
        const Self = @This();

        state: atomic.Value(State) = .init(.empty),
        value: T = undefined,

        pub const init: Self = .{};

        const State = enum(u32) { empty, waiting, full, taken, closed };

        pub const RecvError = error{
            /// The sender closed the oneshot without sending.
            Closed,
        } || Io.Cancelable;
        pub const RecvTimeoutError = RecvError || error{Timeout};
        pub const TryRecvError = error{
            /// Nothing sent yet.
            Empty,
            /// The sender closed the oneshot without sending.
            Closed,
        };

        /// Stores the value and wakes the receiver. Never blocks. Asserts that nothing was sent
        /// or closed before.
        pub fn send(oneshot: *Self, io: Io, value: T) void {
            oneshot.value = value;
            oneshot.publish(io, .full);
        }

        /// Tells the receiver that no value will come (`error.Closed`). Never blocks. Asserts
        /// that nothing was sent or closed before.
        pub fn close(oneshot: *Self, io: Io) void {
            oneshot.publish(io, .closed);
        }

        fn publish(oneshot: *Self, io: Io, state: State) void {
            assert(state == .full or state == .closed);
            // Release: the value is visible to the receiver that sees `full`.
            const previous = oneshot.state.swap(state, .release);
            assert(previous == .empty or previous == .waiting); // sent or closed twice
            if (previous == .waiting) io.futexWake(State, &oneshot.state.raw, 1);
        }

        /// Takes the value if it is there. Never blocks.
        pub fn tryRecv(oneshot: *Self) TryRecvError!T {
            switch (oneshot.state.load(.acquire)) {
                .empty, .waiting => return error.Empty,
                .closed => return error.Closed,
                .taken => unreachable, // received twice
                .full => {
                    oneshot.state.store(.taken, .monotonic);
                    return oneshot.value;
                },
            }
        }

        /// Waits for the value. Cancelation point when it blocks.
        pub fn recv(oneshot: *Self, io: Io) RecvError!T {
            return oneshot.recvDeadline(io, null) catch |err| switch (err) {
                error.Timeout => unreachable, // no deadline
                else => |e| e,
            };
        }

        /// `recv` that gives up with `error.Timeout` (the value, if it comes later, stays for
        /// a later `recv`).
        pub fn recvTimeout(oneshot: *Self, io: Io, timeout: Io.Timeout) RecvTimeoutError!T {
            return oneshot.recvDeadline(io, timeout.toTimestamp(io));
        }

        fn recvDeadline(oneshot: *Self, io: Io, deadline: ?Io.Clock.Timestamp) RecvTimeoutError!T {
            // Fast path: the value is already there (one atomic load).
            if (oneshot.tryRecv()) |value| return value else |err| switch (err) {
                error.Closed => return error.Closed,
                error.Empty => {},
            }
            if (oneshot.state.cmpxchgStrong(.empty, .waiting, .acquire, .acquire)) |state| {
                assert(state == .full or state == .closed); // a second receiver
                return oneshot.tryRecv() catch |err| switch (err) {
                    error.Empty => unreachable,
                    error.Closed => error.Closed,
                };
            }
            while (true) {
                const timeout: Io.Timeout = if (deadline) |d| .{ .deadline = d } else .none;
                const result = io.futexWaitTimeout(State, &oneshot.state.raw, .waiting, timeout);
                if (oneshot.tryRecv()) |value| {
                    // The send won any race with cancelation: keep the value, re-arm the request.
                    _ = result catch io.recancel();
                    return value;
                } else |err| switch (err) {
                    error.Closed => {
                        _ = result catch io.recancel();
                        return error.Closed;
                    },
                    error.Empty => {},
                }
                const timed_out = if (deadline) |d|
                    d.durationFromNow(io).raw.nanoseconds <= 0
                else
                    false;
                _ = result catch return oneshot.withdraw(io, error.Canceled);
                if (timed_out) return oneshot.withdraw(io, error.Timeout);
            }
        }

        /// Leaves `waiting`, unless the sender got there first.
        fn withdraw(oneshot: *Self, io: Io, reason: RecvTimeoutError) RecvTimeoutError!T {
            if (oneshot.state.cmpxchgStrong(.waiting, .empty, .acquire, .acquire) == null) {
                return reason;
            }
            if (reason == error.Canceled) io.recancel();
            return oneshot.tryRecv() catch |err| switch (err) {
                error.Empty => unreachable,
                error.Closed => error.Closed,
            };
        }
    };
}

test "Oneshot: send then recv, close, tryRecv" {
    const io = std.testing.io;
    var oneshot: Oneshot(u64) = .init;
    try std.testing.expectError(error.Empty, oneshot.tryRecv());
    oneshot.send(io, 7);
    try std.testing.expectEqual(@as(u64, 7), try oneshot.recv(io));
    var closed: Oneshot(u64) = .init;
    closed.close(io);
    try std.testing.expectError(error.Closed, closed.recv(io));
}

const Checker = @import("../testing/InterleavingChecker.zig");

/// A sender fills four oneshots in turn (closing one of them instead, on some seeds) while a
/// receiver takes them in turn; its receives are canceled, time out and wake spuriously at
/// random (the value then stays for the next try). `Oneshot` has its own re-arm, apart from
/// `WaitQueue`'s: after a value (or the close) that won the race, and in its withdrawal.
const OneshotScenario = struct {
    oneshots: [count]Oneshot(u32) = @splat(.init),
    prng: std.Random.DefaultPrng,
    /// The oneshot closed instead of sent, if any.
    closed: ?usize,
    received: [count]?u32 = @splat(null),
    closed_seen: [count]bool = @splat(false),

    const count = 4;
    pub const rearming_threads = [_]usize{1}; // the receiver

    pub fn init(seed: u64) OneshotScenario {
        var prng: std.Random.DefaultPrng = .init(seed ^ 0x0e5e);
        const closed = prng.random().uintLessThan(usize, 2 * count);
        return .{ .prng = prng, .closed = if (closed < count) closed else null };
    }

    pub fn bodies(scenario: *OneshotScenario) [2]Checker.Body {
        return .{ Checker.bodyOf(sender, scenario), Checker.bodyOf(receiver, scenario) };
    }

    fn sender(scenario: *OneshotScenario, io_: Io) void {
        for (&scenario.oneshots, 0..) |*oneshot, index| {
            if (scenario.closed == index) {
                oneshot.close(io_);
            } else {
                oneshot.send(io_, @intCast(index));
            }
        }
    }

    fn receiver(scenario: *OneshotScenario, io_: Io) void {
        for (&scenario.oneshots, 0..) |*oneshot, index| {
            while (true) {
                const deadline = Checker.maybeDeadline(io_, scenario.prng.random());
                const timeout: Io.Timeout = if (deadline) |d| .{ .deadline = d } else .none;
                const value = oneshot.recvTimeout(io_, timeout) catch |err| switch (err) {
                    error.Canceled, error.Timeout => {
                        Checker.noteError(io_, err);
                        continue; // the value, if it comes, stays
                    },
                    error.Closed => {
                        scenario.closed_seen[index] = true;
                        break;
                    },
                };
                scenario.received[index] = value;
                break;
            }
            Checker.cancelationPoint(io_);
        }
    }

    pub fn check(scenario: *OneshotScenario) !void {
        for (scenario.received, scenario.closed_seen, 0..) |received, closed_seen, index| {
            try std.testing.expectEqual(scenario.closed == index, closed_seen);
            const expected: ?u32 = if (closed_seen) null else @intCast(index);
            try std.testing.expectEqual(expected, received);
        }
    }
};

test "interleave: Oneshot, 1000 seeds: each value received once, every cancel seen once" {
    try Checker.checkSeeds(OneshotScenario);
}
