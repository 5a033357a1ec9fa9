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
