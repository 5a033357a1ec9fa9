//! `Broadcast(T)`: a bounded ring that every subscribed receiver reads in full, each at its own
//! pace. Senders never wait for receivers: a slow receiver loses the oldest values and is told
//! how many.
//!
//! ```
//! var ring: [64]Event = undefined;
//! var events: weft.sync.Broadcast(Event) = .init(&ring);
//! var receiver = events.subscribe(); // sees what is sent from now on
//! // senders                             // each receiver
//! try events.send(io, event);            while (receiver.recv(io)) |got| switch (got) {
//!                                            .value => |event| handle(event),
//!                                            .lagged => |missed| log(missed),
//!                                        } else |err| ... // error.Closed once drained
//! events.close(io);
//! ```
//!
//! The caller provides the ring (its length is the capacity, at least 1), as for `Channel`.
//! Values are copied in by `send` and copied out by `recv`; nothing allocates.
//!
//! ## Semantics
//!
//! - Every value sent is numbered (`sent()` counts them); the ring holds the newest
//!   `capacity` of them. A receiver has a cursor: the number of the next value it reads.
//!   `subscribe` starts the cursor at the next value to be sent.
//! - `send` never blocks: with the ring full it overwrites the oldest value, even if some
//!   receiver has not read it. Values from one sender are numbered in the order it sent them;
//!   every receiver reads the numbers in order, so all receivers see the same sequence.
//! - Lag: a receiver whose cursor points at an overwritten value gets `.{ .lagged = n }` from
//!   `recv`, where `n` is exactly how many values it missed; its cursor moves to the oldest
//!   value still held, which the next `recv` returns. Zig errors carry no payload, so lag is
//!   reported in the result union `Received` rather than as an error: a caller that does not
//!   care about lag still has to look at it (the switch is exhaustive), and no count is lost.
//! - `close`: later sends fail with `error.Closed`; receivers drain what they have not read
//!   (lag included), then get `error.Closed`. Idempotent.
//! - Cancel-safe: a blocked `recv` waits without taking anything. Canceled (or timed out), it
//!   returns `error.Canceled` (`error.Timeout`) with its cursor unchanged, so the value it
//!   waited for is read by the next `recv`. If a send woke it before the cancel request
//!   arrived, it returns the value and re-arms the request (`io.recancel`).
//!
//! ## Design
//!
//! One lock (`WaitQueue.Lock`, never held across a park) serialises the senders and guards the
//! queue of parked receivers and the slow paths of receiving (lag, close, parking). Senders do
//! not know the receivers: a value's number says where it lives (`number % capacity`) and
//! whether it is still there (it is when `number + capacity >= sent`), so a receiver's cursor
//! is all the state it needs, and subscribing or dropping a receiver costs nothing. A receiver
//! with nothing to read parks in the queue; `send` wakes every parked receiver (they then read
//! themselves: the value stays in the ring, which is what makes cancelation exact without
//! hand-off).
//!
//! ## Reading without the lock
//!
//! A receiver on another core than the sender that took the lock for every value would move
//! the lock's cache line back and forth with the sender and every other receiver, which was
//! most of the cost of a broadcast spread over two executors. So `recv` reads values without
//! the lock, the way a seqlock reader does, with the send count as the sequence:
//!
//! - the sender, holding the lock, stores the value into its slot, then publishes the new
//!   count in `published` (release);
//! - the receiver loads `published` (acquire), copies the values from its cursor up to it
//!   (at most `batch_max`), then loads `published` again. The sender overwrites value `n` only
//!   while it sends value `n + capacity`, which it starts once `published` reached
//!   `n + capacity`; if the second load is below that for the oldest value copied, no copy can
//!   be torn and the receiver keeps them all, else it drops them and reads under the lock;
//! - a copy races with a store by design, so both move the value as atomic words (release
//!   stores, acquire loads; on x86 plain moves), never as a plain `T` copy, which would be a
//!   data race for any `T` wider than one word. The acquire loads keep the second load of
//!   `published` after the copies, and a load that saw part of a newer value sees, through its
//!   release, the count that the sender published before writing it.
//!
//! Lag, close and parking go through the lock, as does `tryRecv`.
//!
//! ## Batched receives
//!
//! A receiver that is behind would look at the shared counters (or take the lock) once per
//! value. So `recv`, when it reads a value, also copies up to `batch_max` (16 for small `T`) of
//! the values after it that are in the ring, into the `Receiver`, and returns them from there.
//! A value so copied belongs to the receiver: it is returned even if the ring overwrites it
//! afterwards, so lag is counted when values are copied out, not when they are returned; no
//! value is lost or reported twice either way. `tryRecv` returns batched values first, then
//! takes one value per call (its lag reports are exact to the call). `pending` counts batched
//! values.
//!
//! Thread-safety: `send`, `close`, `subscribe` and the queries may be called from any task or
//! OS thread; a `Receiver` is used by one task or thread at a time (it is a cursor), any
//! number of receivers at once. All with the same `Io`.
const std = @import("std");
const assert = std.debug.assert;
const Io = std.Io;
const WaitQueue = @import("WaitQueue.zig");
const atomic = @import("../os/atomic.zig");

pub fn Broadcast(comptime T: type) type {
    return struct {
        const Self = @This();

        lock: WaitQueue.Lock = .{},
        buffer: []T,
        /// Values sent so far: the number of the next one.
        sent_count: u64 = 0,
        closed: bool = false,
        /// `sent_count`, with `closed_bit` set once closed: stored under the lock whenever
        /// either changes, read without it by `recv` (see "Reading without the lock").
        published: atomic.Value(u64) = .init(0),
        /// Receivers parked until something is sent or the broadcast closes.
        receivers: WaitQueue = .empty,

        /// Values one `recv` copies out of the ring at once, at most (about 256 bytes worth,
        /// at least one): receivers that are behind read the shared counters once per batch
        /// instead of once per value (see the file's doc, "Batched receives").
        const batch_max: u32 = @max(1, @min(16, 256 / @max(1, @sizeOf(T))));

        /// Node completion codes.
        const sent_code: u32 = 1;
        const closed_code: u32 = 2;

        /// In `published`: the broadcast is closed. No count of values reaches it.
        const closed_bit: u64 = 1 << 63;

        /// What `recv` returns: a value, or how many values this receiver missed.
        pub const Received = union(enum) {
            value: T,
            /// Values overwritten before this receiver read them; the cursor moved past them.
            lagged: u64,
        };

        pub const SendError = error{
            /// The broadcast was closed.
            Closed,
        };
        pub const RecvError = error{
            /// The broadcast is closed and this receiver has read everything.
            Closed,
        } || Io.Cancelable;
        pub const RecvTimeoutError = RecvError || error{Timeout};
        pub const TryRecvError = error{
            /// Nothing new for this receiver.
            Empty,
            /// The broadcast is closed and this receiver has read everything.
            Closed,
        };

        /// A broadcast whose capacity is `buffer.len` (at least 1). The buffer must outlive it.
        pub fn init(buffer: []T) Self {
            assert(buffer.len > 0);
            return .{ .buffer = buffer };
        }

        pub fn capacity(broadcast: *const Self) usize {
            return broadcast.buffer.len;
        }

        /// A receiver that reads every value sent from now on. Never blocks.
        pub fn subscribe(broadcast: *Self) Receiver {
            broadcast.lock.lock();
            defer broadcast.lock.unlock();
            return .{ .broadcast = broadcast, .cursor = broadcast.sent_count };
        }

        /// Appends `value`, overwriting the oldest one when the ring is full, and wakes every
        /// parked receiver. Never blocks (the lock is held for a copy and the wake-ups); not a
        /// cancelation point.
        pub fn send(broadcast: *Self, io: Io, value: T) SendError!void {
            var wakes: WaitQueue.Wakes = .{};
            defer wakes.wakeAll(io); // after the unlock (defers run in reverse)
            broadcast.lock.lock();
            defer broadcast.lock.unlock();
            if (broadcast.closed) return error.Closed;
            storeValue(&broadcast.buffer[broadcast.slot(broadcast.sent_count)], value);
            broadcast.sent_count += 1;
            assert(broadcast.sent_count < closed_bit);
            // Release: a receiver that reads the count without the lock sees the value.
            broadcast.published.store(broadcast.sent_count, .release);
            broadcast.completeAll(io, sent_code, &wakes);
        }

        /// Closes the broadcast: see the file's doc. Idempotent; never blocks.
        pub fn close(broadcast: *Self, io: Io) void {
            var wakes: WaitQueue.Wakes = .{};
            defer wakes.wakeAll(io);
            broadcast.lock.lock();
            defer broadcast.lock.unlock();
            broadcast.closed = true;
            broadcast.published.store(broadcast.sent_count | closed_bit, .monotonic);
            broadcast.completeAll(io, closed_code, &wakes);
        }

        /// Under the lock: completes every parked receiver and notes its futex word to wake
        /// once the lock is released (the first `Wakes.deferred_max`; the rest are woken at
        /// once). A completed node may vanish at once: after `complete` only its word's
        /// address is kept. Bounded by the number of parked receivers.
        fn completeAll(broadcast: *Self, io: Io, code: u32, wakes: *WaitQueue.Wakes) void {
            while (broadcast.receivers.pop()) |node| {
                node.complete(code);
                wakes.add(io, &node.state.raw);
            }
            assert(broadcast.receivers.isEmpty());
        }

        pub fn isClosed(broadcast: *Self) bool {
            broadcast.lock.lock();
            defer broadcast.lock.unlock();
            return broadcast.closed;
        }

        /// Values sent so far (a snapshot).
        pub fn sent(broadcast: *Self) u64 {
            broadcast.lock.lock();
            defer broadcast.lock.unlock();
            return broadcast.sent_count;
        }

        /// Receivers parked in `recv` now (a snapshot, for tests and diagnostics).
        pub fn waiting(broadcast: *Self) u32 {
            broadcast.lock.lock();
            defer broadcast.lock.unlock();
            return broadcast.receivers.len;
        }

        /// The unit in which values cross between a sender and a receiver that does not hold
        /// the lock: the widest atomic word that tiles `T` (see "Reading without the lock").
        const Word = for ([_]type{ u64, u32, u16 }) |W| {
            if (@sizeOf(T) % @sizeOf(W) == 0 and @alignOf(T) >= @alignOf(W)) break W;
        } else u8;
        const words_per_value = @sizeOf(T) / @sizeOf(Word);

        fn storeValue(destination: *T, value: T) void {
            if (words_per_value == 0) return;
            const from: *const [words_per_value]Word = @ptrCast(&value);
            const to: *[words_per_value]Word = @ptrCast(destination);
            for (to, from) |*word_to, word_from| {
                atomic.step(); // lets the interleaving checker run a reader between the words
                @atomicStore(Word, word_to, word_from, .release);
            }
        }

        fn loadValue(source: *const T) T {
            var value: T = undefined;
            if (words_per_value == 0) return value;
            const from: *const [words_per_value]Word = @ptrCast(source);
            const to: *[words_per_value]Word = @ptrCast(&value);
            for (to, from) |*word_to, *word_from| {
                atomic.step(); // lets the interleaving checker run a sender between the words
                word_to.* = @atomicLoad(Word, word_from, .acquire);
            }
            return value;
        }

        fn slot(broadcast: *const Self, number: u64) usize {
            return @intCast(number % broadcast.buffer.len);
        }

        /// Under the lock: what `cursor` reads next, advancing it; null if nothing is new.
        fn take(broadcast: *const Self, cursor: *u64) ?Received {
            assert(cursor.* <= broadcast.sent_count);
            const oldest = broadcast.sent_count -| broadcast.buffer.len;
            if (cursor.* < oldest) {
                const missed = oldest - cursor.*;
                cursor.* = oldest;
                return .{ .lagged = missed };
            }
            if (cursor.* == broadcast.sent_count) return null;
            const value = broadcast.buffer[broadcast.slot(cursor.*)];
            cursor.* += 1;
            assert(cursor.* <= broadcast.sent_count);
            return .{ .value = value };
        }

        /// A subscriber's cursor into the ring. Copying it forks the cursor: both copies read
        /// the same values from where it was.
        pub const Receiver = struct {
            broadcast: *Self,
            /// The number of the next value this receiver reads from the ring (the values in
            /// `batch` come before it).
            cursor: u64,
            /// Values `recv` copied out of the ring in one lock hold and has not returned
            /// yet, oldest at `batch_start`; numbered `cursor - batch_len` up to `cursor`.
            batch: [batch_max]T = undefined,
            batch_start: u32 = 0,
            batch_len: u32 = 0,

            /// The next value (or lag report) without blocking. Not a cancelation point.
            /// Takes one value per call from the ring (after any that `recv` batched), so its
            /// lag reports are exact to the call.
            pub fn tryRecv(receiver: *Receiver) TryRecvError!Received {
                if (receiver.popBatched()) |value| return .{ .value = value };
                const broadcast = receiver.broadcast;
                broadcast.lock.lock();
                defer broadcast.lock.unlock();
                if (broadcast.take(&receiver.cursor)) |received| return received;
                return if (broadcast.closed) error.Closed else error.Empty;
            }

            fn popBatched(receiver: *Receiver) ?T {
                if (receiver.batch_len == 0) return null;
                assert(receiver.batch_start + receiver.batch_len <= batch_max);
                const value = receiver.batch[receiver.batch_start];
                receiver.batch_start += 1;
                receiver.batch_len -= 1;
                return value;
            }

            /// Under the lock, right after `take` returned a value: copies up to `batch_max`
            /// more values that are already in the ring, so that the next `recv`s return them
            /// without the lock.
            fn fillBatch(receiver: *Receiver) void {
                const broadcast = receiver.broadcast;
                assert(receiver.batch_len == 0);
                const available = broadcast.sent_count - receiver.cursor;
                const count: u32 = @intCast(@min(available, batch_max));
                for (receiver.batch[0..count]) |*value| {
                    value.* = broadcast.buffer[broadcast.slot(receiver.cursor)];
                    receiver.cursor += 1;
                }
                receiver.batch_start = 0;
                receiver.batch_len = count;
                assert(receiver.cursor <= broadcast.sent_count);
            }

            /// The next value, or `.lagged` if this receiver fell more than the capacity
            /// behind; waits while there is nothing new. After `close`, returns what is left,
            /// then `error.Closed`. Cancelation point when it blocks.
            pub fn recv(receiver: *Receiver, io: Io) RecvError!Received {
                return receiver.recvDeadline(io, null) catch |err| switch (err) {
                    error.Timeout => unreachable, // no deadline
                    else => |e| e,
                };
            }

            /// `recv` that gives up with `error.Timeout` (then nothing was read).
            pub fn recvTimeout(
                receiver: *Receiver,
                io: Io,
                timeout: Io.Timeout,
            ) RecvTimeoutError!Received {
                return receiver.recvDeadline(io, timeout.toTimestamp(io));
            }

            fn recvDeadline(
                receiver: *Receiver,
                io: Io,
                deadline: ?Io.Clock.Timestamp,
            ) RecvTimeoutError!Received {
                const broadcast = receiver.broadcast;
                // A wake-up means something was sent or the broadcast closed, and only this
                // receiver moves its cursor: the second look always finds a result.
                if (receiver.popBatched()) |value| return .{ .value = value };
                if (receiver.readWithoutLock()) |value| return .{ .value = value };
                // Nothing new, or a lag or the close to report (the lock path's job). With the
                // sender on another executor news is usually a moment away: wait for it reading
                // `published` rather than parking, which would make the next send wake us.
                if (WaitQueue.spinUntil(receiver, hasNews) != null) {
                    if (receiver.readWithoutLock()) |value| return .{ .value = value };
                }
                var parks: u32 = 0;
                while (parks < 2) : (parks += 1) {
                    broadcast.lock.lock();
                    if (broadcast.take(&receiver.cursor)) |received| {
                        if (received == .value) receiver.fillBatch();
                        broadcast.lock.unlock();
                        return received;
                    }
                    if (broadcast.closed) {
                        broadcast.lock.unlock();
                        return error.Closed;
                    }
                    var node: WaitQueue.Node = .{};
                    broadcast.receivers.push(&node);
                    broadcast.lock.unlock();
                    const code = try broadcast.receivers.wait(
                        &broadcast.lock,
                        io,
                        &node,
                        deadline,
                    );
                    assert(code == sent_code or code == closed_code);
                }
                unreachable; // woken with nothing to read: see above
            }

            /// The next value and a batch of those after it, read without the lock (see "Reading
            /// without the lock"); null when there is nothing new, when this receiver lags or
            /// the broadcast is closed (the lock path reports those exactly), and when the
            /// sender overtook the copy.
            fn readWithoutLock(receiver: *Receiver) ?T {
                assert(receiver.batch_len == 0);
                const broadcast = receiver.broadcast;
                const capacity_values = broadcast.buffer.len;
                const published = broadcast.published.load(.acquire);
                if (published & closed_bit != 0) return null;
                const cursor = receiver.cursor;
                assert(cursor <= published);
                if (published == cursor or published - cursor > capacity_values) return null;
                const count: u32 = @intCast(@min(published - cursor, batch_max));
                for (receiver.batch[0..count], cursor..) |*value, number| {
                    value.* = loadValue(&broadcast.buffer[broadcast.slot(number)]);
                }
                const published_after = broadcast.published.load(.monotonic) & ~closed_bit;
                if (cursor + capacity_values <= published_after) return null; // maybe torn
                receiver.cursor = cursor + count;
                receiver.batch_start = 1;
                receiver.batch_len = count - 1;
                return receiver.batch[0];
            }

            /// For `spinUntil`: non-null once something was sent after the cursor, or the
            /// broadcast closed (read without the lock: a hint).
            fn hasNews(receiver: *Receiver) ?u32 {
                const published = receiver.broadcast.published.load(.monotonic);
                return if (published != receiver.cursor) 1 else null;
            }

            /// Values (counting overwritten ones) this receiver has not read yet (a snapshot).
            pub fn pending(receiver: *const Receiver) u64 {
                const broadcast = receiver.broadcast;
                broadcast.lock.lock();
                defer broadcast.lock.unlock();
                assert(receiver.cursor <= broadcast.sent_count);
                return broadcast.sent_count - receiver.cursor + receiver.batch_len;
            }
        };
    };
}

// Tests of behaviour across tasks are in src/testing/sync_test.zig.

test "Broadcast: lag is reported exactly, then reading resumes at the oldest value" {
    const io = std.testing.io;
    var ring: [4]u32 = undefined;
    var broadcast: Broadcast(u32) = .init(&ring);
    var early = broadcast.subscribe();
    for (0..3) |i| try broadcast.send(io, @intCast(i));
    var late = broadcast.subscribe();
    for (3..10) |i| try broadcast.send(io, @intCast(i));
    try std.testing.expectEqual(@as(u64, 6), (try early.tryRecv()).lagged);
    for (6..10) |i| try std.testing.expectEqual(@as(u32, @intCast(i)), (try early.tryRecv()).value);
    try std.testing.expectError(error.Empty, early.tryRecv());
    try std.testing.expectEqual(@as(u64, 3), (try late.tryRecv()).lagged);
    broadcast.close(io);
    try std.testing.expectError(error.Closed, broadcast.send(io, 10));
    for (6..10) |i| try std.testing.expectEqual(@as(u32, @intCast(i)), (try late.recv(io)).value);
    try std.testing.expectError(error.Closed, late.recv(io));
    try std.testing.expectError(error.Closed, early.tryRecv());
}

test "Broadcast: recv batches what the ring holds; a batched value outlives its overwrite" {
    const io = std.testing.io;
    var ring: [4]u32 = undefined;
    var broadcast: Broadcast(u32) = .init(&ring);
    var receiver = broadcast.subscribe();
    for (0..3) |i| try broadcast.send(io, @intCast(i));
    try std.testing.expectEqual(@as(u32, 0), (try receiver.recv(io)).value);
    try std.testing.expectEqual(@as(u32, 2), receiver.batch_len); // 1 and 2 copied out
    try std.testing.expectEqual(@as(u64, 2), receiver.pending());
    for (3..10) |i| try broadcast.send(io, @intCast(i)); // the ring now holds 6..9
    try std.testing.expectEqual(@as(u64, 9), receiver.pending());
    try std.testing.expectEqual(@as(u32, 1), (try receiver.recv(io)).value);
    try std.testing.expectEqual(@as(u32, 2), (try receiver.tryRecv()).value);
    try std.testing.expectEqual(@as(u64, 3), (try receiver.recv(io)).lagged); // 3, 4, 5
    for (6..10) |i| {
        try std.testing.expectEqual(@as(u32, @intCast(i)), (try receiver.recv(io)).value);
    }
    try std.testing.expectEqual(@as(u64, 0), receiver.pending());
    broadcast.close(io);
    try std.testing.expectError(error.Closed, receiver.recv(io));
}

test "Broadcast: model-based fuzz of send, tryRecv and close, many seeds" {
    const io = std.testing.io;
    const receivers_max = 3;
    for (0..100) |seed| {
        var prng: std.Random.DefaultPrng = .init(seed);
        const random = prng.random();
        var ring: [5]u64 = undefined;
        const ring_len = random.intRangeAtMost(usize, 1, ring.len);
        var broadcast: Broadcast(u64) = .init(ring[0..ring_len]);
        var receivers: [receivers_max]Broadcast(u64).Receiver = undefined;
        var model_cursors: [receivers_max]u64 = undefined;
        for (&receivers, &model_cursors) |*r, *c| {
            r.* = broadcast.subscribe();
            c.* = 0;
        }
        var sent: u64 = 0;
        var closed = false;
        for (0..300) |_| {
            const which = random.uintLessThan(usize, receivers_max);
            switch (random.uintLessThan(u8, 10)) {
                0...4 => if (broadcast.send(io, sent * 3)) {
                    try std.testing.expect(!closed);
                    sent += 1;
                } else |err| {
                    try std.testing.expect(closed);
                    try std.testing.expectEqual(error.Closed, err);
                },
                5...8 => {
                    const result = receivers[which].tryRecv();
                    const cursor = &model_cursors[which];
                    const oldest = sent -| ring_len;
                    if (cursor.* < oldest) {
                        try std.testing.expectEqual(oldest - cursor.*, (try result).lagged);
                        cursor.* = oldest;
                    } else if (cursor.* < sent) {
                        try std.testing.expectEqual(cursor.* * 3, (try result).value);
                        cursor.* += 1;
                    } else if (closed) {
                        try std.testing.expectError(error.Closed, result);
                    } else {
                        try std.testing.expectError(error.Empty, result);
                    }
                },
                9 => if (random.uintLessThan(u8, 8) == 0) {
                    broadcast.close(io);
                    closed = true;
                },
                else => unreachable,
            }
            try std.testing.expectEqual(sent, broadcast.sent());
            const pending = receivers[which].pending();
            try std.testing.expectEqual(sent - model_cursors[which], pending);
        }
    }
}

const Checker = @import("../testing/InterleavingChecker.zig");

/// A sender sends eight numbered values into a ring of two, waits until both receivers have
/// accounted for all of them (so that only a send's wake-up can tell a parked receiver), then
/// closes; two receivers read with `recvTimeout`, canceled, timed out and woken spuriously at
/// random, so they fall behind (lag), read without the lock while the sender overwrites the
/// slot they copy (the copy must be dropped), and lose the race of a cancel request with a
/// send's wake-up (the value is returned and the request re-armed). Each receiver sees the
/// numbers in order, each value or lag exactly once: every number is accounted for once.
const BroadcastScenario = struct {
    ring: [2]u32 = undefined,
    broadcast: Broadcast(u32) = undefined,
    receivers: [2]Broadcast(u32).Receiver = undefined,
    prng: std.Random.DefaultPrng,
    /// Per receiver: the number of the next value it expects (values and lags move it).
    next: [2]u64 = @splat(0),
    out_of_order: [2]bool = @splat(false),
    closed_at: [2]?u64 = @splat(null),
    /// Receivers that have accounted for every value (a futex word the sender waits on).
    caught_up: atomic.Value(u32) = .init(0),

    const values = 8;
    pub const rearming_threads = [_]usize{ 1, 2 };

    pub fn init(seed: u64) BroadcastScenario {
        return .{ .prng = .init(seed ^ 0xb40c) };
    }

    pub fn bodies(scenario: *BroadcastScenario) [3]Checker.Body {
        scenario.broadcast = .init(&scenario.ring);
        for (&scenario.receivers) |*receiver| receiver.* = scenario.broadcast.subscribe();
        return .{
            Checker.bodyOf(sender, scenario),
            Checker.bodyAt(follow, scenario, 0),
            Checker.bodyAt(follow, scenario, 1),
        };
    }

    fn sender(scenario: *BroadcastScenario, io: Io) void {
        for (0..values) |value| {
            scenario.broadcast.send(io, @intCast(value)) catch unreachable; // closed below
        }
        while (true) {
            const count = scenario.caught_up.load(.acquire);
            if (count == scenario.receivers.len) break;
            io.futexWaitUncancelable(u32, &scenario.caught_up.raw, count);
        }
        scenario.broadcast.close(io);
    }

    fn follow(scenario: *BroadcastScenario, io: Io, index: usize) void {
        const receiver = &scenario.receivers[index];
        const next = &scenario.next[index];
        while (true) {
            const deadline = Checker.maybeDeadline(io, scenario.prng.random());
            const timeout: Io.Timeout = if (deadline) |d| .{ .deadline = d } else .none;
            const received = receiver.recvTimeout(io, timeout) catch |err| switch (err) {
                error.Canceled, error.Timeout => {
                    Checker.noteError(io, err);
                    continue; // nothing read: the value waits for the next call
                },
                error.Closed => {
                    scenario.closed_at[index] = next.*;
                    return;
                },
            };
            switch (received) {
                .value => |value| {
                    if (value != next.*) scenario.out_of_order[index] = true;
                    next.* += 1;
                },
                .lagged => |missed| {
                    if (missed == 0) scenario.out_of_order[index] = true;
                    next.* += missed;
                },
            }
            if (next.* > values) scenario.out_of_order[index] = true;
            if (next.* == values) {
                _ = scenario.caught_up.fetchAdd(1, .release);
                io.futexWake(u32, &scenario.caught_up.raw, 1);
            }
            Checker.cancelationPoint(io);
        }
    }

    pub fn check(scenario: *BroadcastScenario) !void {
        for (scenario.closed_at, scenario.out_of_order) |closed_at, out_of_order| {
            try std.testing.expectEqual(@as(?u64, values), closed_at);
            try std.testing.expect(!out_of_order);
        }
        try std.testing.expectEqual(@as(u32, 0), scenario.broadcast.waiting());
    }
};

test "interleave: Broadcast, 1000 seeds: every number once and in order, lag exact" {
    try Checker.checkSeeds(BroadcastScenario);
}
