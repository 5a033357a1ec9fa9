//! `Watch(T)`: one value with a version; senders replace it, receivers read the latest and
//! wait for it to change.
//!
//! ```
//! var config: weft.sync.Watch(Config) = .init(defaults);
//! var receiver = config.subscribe(); // has seen the current version
//! // a sender                           // each receiver
//! try config.send(io, new_config);      while (receiver.changed(io)) |_| {
//!                                           apply(receiver.borrowAndUpdate());
//!                                       } else |err| ... // error.Closed
//! config.close(io);
//! ```
//!
//! ## Semantics
//!
//! - `send` replaces the value, increments the version and wakes every receiver parked in
//!   `changed`. Never blocks. Intermediate values may never be read: a receiver sees the
//!   latest, not every one (use `Broadcast` or `Channel` for that).
//! - A `Receiver` remembers the last version it has seen. `changed` returns as soon as the
//!   version is newer (at once if it already is) and marks it seen; so no change is missed:
//!   a send that happens between a read and the next `changed` makes that `changed` return.
//!   Versions only grow.
//! - `borrow` returns a copy of the current value, taken under the lock, and leaves the seen
//!   version alone; `borrowAndUpdate` also marks the current version seen. Copies rather than
//!   a lock-guarded reference: no caller can hold the lock across a park or forget to release
//!   it. The price is one copy of `T` per read, so keep `T` small (or a handle).
//! - `close`: later sends fail with `error.Closed`; `changed` still reports a change made
//!   before the close, then returns `error.Closed`. The last value stays readable.
//!   Idempotent.
//! - Cancel-safe: a canceled or timed-out `changed` leaves the seen version as it was, so the
//!   change it waited for is reported by the next `changed`. If a send woke it before the
//!   cancel request, it returns normally and re-arms the request (`io.recancel`).
//!
//! ## Design
//!
//! One lock (`WaitQueue.Lock`, never held across a park) guards the value, the version and the
//! queue of parked receivers; a wake-up only says "look again", the receiver then compares
//! versions under the lock itself. Rejected: a seqlock for lock-free reads, for the reason
//! given in broadcast.zig (copying a `T` that may be written meanwhile is a data race).
//!
//! Thread-safety: every method of the watch may be called from any task or OS thread; a
//! `Receiver` is used by one task or thread at a time, any number of receivers at once. All
//! with the same `Io`.
const std = @import("std");
const assert = std.debug.assert;
const Io = std.Io;
const WaitQueue = @import("WaitQueue.zig");

pub fn Watch(comptime T: type) type {
    return struct {
        const Self = @This();

        lock: WaitQueue.Lock = .{},
        value: T,
        /// Incremented by every send; starts at 0 with the initial value.
        version: u64 = 0,
        closed: bool = false,
        /// Receivers parked in `changed`.
        receivers: WaitQueue = .empty,

        /// Node completion codes.
        const changed_code: u32 = 1;
        const closed_code: u32 = 2;

        pub const SendError = error{
            /// The watch was closed.
            Closed,
        };
        pub const ChangedError = error{
            /// The watch is closed and this receiver has seen the last version.
            Closed,
        } || Io.Cancelable;
        pub const ChangedTimeoutError = ChangedError || error{Timeout};

        /// A watch holding `value` at version 0.
        pub fn init(value: T) Self {
            return .{ .value = value };
        }

        /// A receiver that has seen the current version. Never blocks.
        pub fn subscribe(watch: *Self) Receiver {
            watch.lock.lock();
            defer watch.lock.unlock();
            return .{ .watch = watch, .seen = watch.version };
        }

        /// Replaces the value and wakes every parked receiver. Never blocks; not a
        /// cancelation point.
        pub fn send(watch: *Self, io: Io, value: T) SendError!void {
            watch.lock.lock();
            defer watch.lock.unlock();
            if (watch.closed) return error.Closed;
            watch.value = value;
            watch.version += 1;
            watch.wakeAll(io, changed_code);
        }

        /// Closes the watch: see the file's doc. Idempotent; never blocks.
        pub fn close(watch: *Self, io: Io) void {
            watch.lock.lock();
            defer watch.lock.unlock();
            watch.closed = true;
            watch.wakeAll(io, closed_code);
        }

        /// Under the lock: completes and wakes every parked receiver, one at a time (a
        /// completed node may vanish at once). Bounded by the number of parked receivers.
        fn wakeAll(watch: *Self, io: Io, code: u32) void {
            while (watch.receivers.pop()) |node| {
                node.complete(code);
                node.wake(io);
            }
            assert(watch.receivers.isEmpty());
        }

        /// A copy of the current value. Never blocks.
        pub fn get(watch: *Self) T {
            watch.lock.lock();
            defer watch.lock.unlock();
            return watch.value;
        }

        pub fn isClosed(watch: *Self) bool {
            watch.lock.lock();
            defer watch.lock.unlock();
            return watch.closed;
        }

        /// Receivers parked in `changed` now (a snapshot, for tests and diagnostics).
        pub fn waiting(watch: *Self) u32 {
            watch.lock.lock();
            defer watch.lock.unlock();
            return watch.receivers.len;
        }

        /// One subscriber's view: the last version it has seen.
        pub const Receiver = struct {
            watch: *Self,
            /// The newest version this receiver has seen (never decreases).
            seen: u64,

            /// A copy of the current value; the seen version is unchanged. Never blocks.
            pub fn borrow(receiver: *const Receiver) T {
                return receiver.watch.get();
            }

            /// A copy of the current value, whose version is marked seen. Never blocks.
            pub fn borrowAndUpdate(receiver: *Receiver) T {
                const watch = receiver.watch;
                watch.lock.lock();
                defer watch.lock.unlock();
                assert(receiver.seen <= watch.version);
                receiver.seen = watch.version;
                return watch.value;
            }

            /// Whether the value changed since the seen version (does not mark it seen).
            pub fn hasChanged(receiver: *const Receiver) bool {
                const watch = receiver.watch;
                watch.lock.lock();
                defer watch.lock.unlock();
                assert(receiver.seen <= watch.version);
                return watch.version > receiver.seen;
            }

            /// Waits until the version is newer than the seen one, then marks it seen; returns
            /// at once if it already is. Cancelation point when it blocks.
            pub fn changed(receiver: *Receiver, io: Io) ChangedError!void {
                return receiver.changedDeadline(io, null) catch |err| switch (err) {
                    error.Timeout => unreachable, // no deadline
                    else => |e| e,
                };
            }

            /// `changed` that gives up with `error.Timeout` (then nothing was marked seen).
            pub fn changedTimeout(
                receiver: *Receiver,
                io: Io,
                timeout: Io.Timeout,
            ) ChangedTimeoutError!void {
                return receiver.changedDeadline(io, timeout.toTimestamp(io));
            }

            fn changedDeadline(
                receiver: *Receiver,
                io: Io,
                deadline: ?Io.Clock.Timestamp,
            ) ChangedTimeoutError!void {
                const watch = receiver.watch;
                // A wake-up means a send or the close happened, and only this receiver moves
                // `seen`: the second look always decides.
                var parks: u32 = 0;
                while (parks < 2) : (parks += 1) {
                    watch.lock.lock();
                    assert(receiver.seen <= watch.version);
                    if (watch.version > receiver.seen) {
                        receiver.seen = watch.version;
                        watch.lock.unlock();
                        return;
                    }
                    if (watch.closed) {
                        watch.lock.unlock();
                        return error.Closed;
                    }
                    var node: WaitQueue.Node = .{};
                    watch.receivers.push(&node);
                    watch.lock.unlock();
                    const code = try watch.receivers.wait(&watch.lock, io, &node, deadline);
                    assert(code == changed_code or code == closed_code);
                }
                unreachable; // woken with nothing changed: see above
            }
        };
    };
}

// Tests of behaviour across tasks are in src/testing/sync_test.zig.

test "Watch: versions, borrow versus borrowAndUpdate, close keeps the last change" {
    const io = std.testing.io;
    var watch: Watch(u32) = .init(1);
    var receiver = watch.subscribe();
    try std.testing.expect(!receiver.hasChanged());
    try std.testing.expectEqual(@as(u32, 1), receiver.borrow());
    try watch.send(io, 2);
    try watch.send(io, 3);
    try std.testing.expect(receiver.hasChanged());
    try std.testing.expectEqual(@as(u32, 3), receiver.borrow());
    try std.testing.expect(receiver.hasChanged()); // borrow marks nothing seen
    try std.testing.expectEqual(@as(u32, 3), receiver.borrowAndUpdate());
    try std.testing.expect(!receiver.hasChanged());
    try watch.send(io, 4);
    try receiver.changed(io); // at once: version 3 is newer than 2
    try std.testing.expectEqual(@as(u64, 3), receiver.seen);
    try watch.send(io, 5);
    watch.close(io);
    try std.testing.expectError(error.Closed, watch.send(io, 6));
    try receiver.changed(io); // the change made before the close
    try std.testing.expectError(error.Closed, receiver.changed(io));
    try std.testing.expectEqual(@as(u32, 5), receiver.borrow());
    var late = watch.subscribe();
    try std.testing.expectError(error.Closed, late.changed(io));
}

const Checker = @import("../testing/InterleavingChecker.zig");

/// A sender makes four versions (value = version), waits until both receivers have seen the
/// last one (so that only a send's wake-up can tell a parked receiver), then closes; two
/// receivers follow with `changedTimeout`, canceled, timed out and woken spuriously at random.
/// A send that woke a receiver before its cancel request arrived makes `changed` return and
/// re-arm the request. Each receiver sees versions only grow, reads a value at least as new as
/// its seen version, and ends, at `error.Closed`, having seen the last version.
const WatchScenario = struct {
    watch: Watch(u32) = .init(0),
    receivers: [2]Watch(u32).Receiver = undefined,
    prng: std.Random.DefaultPrng,
    /// Per receiver: the seen version when it got `error.Closed`, and whether a check failed.
    closed_at: [2]?u64 = @splat(null),
    went_back: [2]bool = @splat(false),
    /// Receivers that have seen the last version (a futex word the sender waits on).
    caught_up: atomic.Value(u32) = .init(0),

    const atomic = @import("../os/atomic.zig");
    const versions = 4;
    pub const rearming_threads = [_]usize{ 1, 2 };

    pub fn init(seed: u64) WatchScenario {
        return .{ .prng = .init(seed ^ 0x3a7c) };
    }

    pub fn bodies(scenario: *WatchScenario) [3]Checker.Body {
        for (&scenario.receivers) |*receiver| receiver.* = scenario.watch.subscribe();
        return .{
            Checker.bodyOf(sender, scenario),
            Checker.bodyAt(follow, scenario, 0),
            Checker.bodyAt(follow, scenario, 1),
        };
    }

    fn sender(scenario: *WatchScenario, io: Io) void {
        for (1..versions + 1) |value| {
            scenario.watch.send(io, @intCast(value)) catch unreachable; // closed below
        }
        while (true) {
            const count = scenario.caught_up.load(.acquire);
            if (count == scenario.receivers.len) break;
            io.futexWaitUncancelable(u32, &scenario.caught_up.raw, count);
        }
        scenario.watch.close(io);
    }

    fn follow(scenario: *WatchScenario, io: Io, index: usize) void {
        const receiver = &scenario.receivers[index];
        while (true) {
            const seen_before = receiver.seen;
            const deadline = Checker.maybeDeadline(io, scenario.prng.random());
            const timeout: Io.Timeout = if (deadline) |d| .{ .deadline = d } else .none;
            receiver.changedTimeout(io, timeout) catch |err| switch (err) {
                error.Canceled, error.Timeout => {
                    Checker.noteError(io, err);
                    // Nothing marked seen: the change waited for comes with the next call.
                    if (receiver.seen != seen_before) scenario.went_back[index] = true;
                    continue;
                },
                error.Closed => {
                    scenario.closed_at[index] = receiver.seen;
                    return;
                },
            };
            if (receiver.seen <= seen_before) scenario.went_back[index] = true;
            if (receiver.borrow() < receiver.seen) scenario.went_back[index] = true;
            if (receiver.seen == versions) {
                _ = scenario.caught_up.fetchAdd(1, .release);
                io.futexWake(u32, &scenario.caught_up.raw, 1);
            }
            Checker.cancelationPoint(io);
        }
    }

    pub fn check(scenario: *WatchScenario) !void {
        for (scenario.closed_at, scenario.went_back) |closed_at, went_back| {
            try std.testing.expectEqual(@as(?u64, versions), closed_at);
            try std.testing.expect(!went_back);
        }
        try std.testing.expectEqual(@as(u32, 0), scenario.watch.waiting());
    }
};

test "interleave: Watch, 1000 seeds: no change missed, versions only grow, cancels seen once" {
    try Checker.checkSeeds(WatchScenario);
}
