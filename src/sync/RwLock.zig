//! A reader/writer lock with FIFO hand-off: many readers or one writer.
//!
//! ```
//! var lock: weft.sync.RwLock = .init;
//! try lock.lockShared(io); // readers, any number at once
//! defer lock.unlockShared(io);
//! // or
//! try lock.lock(io); // one writer, alone
//! defer lock.unlock(io);
//! ```
//!
//! Uncontended paths are one CAS to lock and one to unlock (reads and writes alike), no lock
//! and no syscall. Compare std's `Io.RwLock`, whose write lock costs five locked operations (a
//! count add, its inner mutex's CAS and another add to lock; an and plus the mutex swap to
//! unlock): a writer there also pays for the readers' bookkeeping.
//!
//! ## Fairness: FIFO, with reader batches
//!
//! Once a task waits, every newcomer queues behind it, reader or writer: a waiting writer is
//! never starved by a stream of readers (a reader arriving while readers hold the lock and a
//! writer waits queues behind the writer), and a waiting reader is never starved by writers.
//! The lock is handed to waiters in arrival order, directly (it never becomes free in between,
//! so a newcomer cannot barge in): a writer alone, or every reader at the head of the queue up
//! to the next writer, together. The rejected alternative, writer preference (readers queue
//! whenever a writer waits, and waiting writers go first), starves readers under a steady
//! stream of writes; reader preference starves writers.
//!
//! Thread-safety: any mix of tasks and OS threads with the same `Io` (on weft a blocked task
//! parks its fiber; a plain OS thread blocks). Cancel-safe: a canceled (or timed-out) lock
//! either holds nothing and returns the error, or was handed the lock first and returns
//! normally (cancel request re-armed; see `WaitQueue`). Not reentrant: a task that holds the
//! lock and locks it again deadlocks. No allocation: waiters queue nodes on their own stacks.
//!
//! ## State word
//!
//!     bit 0      writer: a writer holds the lock
//!     bit 1      queued: tasks wait in `waiters`
//!     bits 2..   readers: how many readers hold the lock
//!
//! `queued` is set and cleared only under the internal lock, and it is set whenever the queue
//! is non-empty. (It may outlive the queue briefly: a waiter that withdraws unlinks its node
//! in `WaitQueue.wait` and clears `queued`, or hands the lock on, when it takes the internal
//! lock again; newcomers meanwhile queue, and that waiter's `grant` serves them.) Lock-free
//! transitions never touch a word
//! with `queued` set except a reader's unlock that leaves other readers holding, and the
//! writer's unlock never succeeds lock-free with `queued` set (its CAS expects the bare writer
//! bit): so the holder whose release frees the lock while tasks wait always takes the internal
//! lock and hands the lock on in the same critical section, and "free with waiters" is never
//! seen outside it. The queue's head is therefore a writer blocked by readers, or anyone
//! blocked by a writer; a withdrawn head (canceled, timed out) hands the lock to those behind
//! it if they can now have it.
const RwLock = @This();

const std = @import("std");
const assert = std.debug.assert;
const Io = std.Io;
const atomic = @import("../os/atomic.zig");
const WaitQueue = @import("WaitQueue.zig");

state: atomic.Value(u32) = .init(0),
lock_internal: WaitQueue.Lock = .{},
waiters: WaitQueue = .of(.rwlock),

pub const init: RwLock = .{};

const writer: u32 = 1 << 0;
const queued: u32 = 1 << 1;
const reader: u32 = 1 << 2;

/// Readers holding the lock at once, at most (the width of the count).
pub const readers_max: u32 = std.math.maxInt(u32) / reader;

/// Node completion code: the lock (shared or exclusive, as asked) was handed over.
const handed: u32 = 1;

pub const LockError = Io.Cancelable;
pub const LockTimeoutError = Io.Cancelable || error{Timeout};

const Mode = enum { shared, exclusive };

/// A waiter's node and what it waits for.
const Waiter = struct {
    node: WaitQueue.Node = .{},
    mode: Mode,

    fn of(node: *WaitQueue.Node) *Waiter {
        return @fieldParentPtr("node", node);
    }
};

/// Takes the lock exclusively if it is free and nobody waits. Never blocks.
pub fn tryLock(rw: *RwLock) bool {
    // Acquire: pairs with the release of the previous holder's unlock.
    return rw.state.cmpxchgStrong(0, writer, .acquire, .monotonic) == null;
}

/// Takes the lock shared if no writer holds it and nobody waits. Never blocks.
pub fn tryLockShared(rw: *RwLock) bool {
    var state = rw.state.load(.monotonic);
    while (state & (writer | queued) == 0) {
        assert(state / reader < readers_max); // more readers than the count holds
        // Acquire: pairs with the release of the last writer's unlock.
        state = rw.state.cmpxchgWeak(state, state + reader, .acquire, .monotonic) orelse
            return true;
    }
    return false;
}

/// Takes the lock exclusively, waiting in FIFO order. Cancelation point when it blocks.
pub fn lock(rw: *RwLock, io: Io) LockError!void {
    if (rw.tryLock()) return;
    return noTimeout(rw.lockSlow(io, .exclusive, null));
}

/// Takes the lock shared, waiting in FIFO order. Cancelation point when it blocks.
pub fn lockShared(rw: *RwLock, io: Io) LockError!void {
    if (rw.tryLockShared()) return;
    return noTimeout(rw.lockSlow(io, .shared, null));
}

/// `lock` that gives up with `error.Timeout` (holding nothing) when `timeout` passes first.
pub fn lockTimeout(rw: *RwLock, io: Io, timeout: Io.Timeout) LockTimeoutError!void {
    if (rw.tryLock()) return;
    return rw.lockSlow(io, .exclusive, timeout.toTimestamp(io));
}

/// `lockShared` that gives up with `error.Timeout` (holding nothing) when `timeout` passes.
pub fn lockSharedTimeout(rw: *RwLock, io: Io, timeout: Io.Timeout) LockTimeoutError!void {
    if (rw.tryLockShared()) return;
    return rw.lockSlow(io, .shared, timeout.toTimestamp(io));
}

/// `lock` that is not a cancelation point.
pub fn lockUncancelable(rw: *RwLock, io: Io) void {
    if (rw.tryLock()) return;
    rw.lockSlowUncancelable(io, .exclusive);
}

/// `lockShared` that is not a cancelation point.
pub fn lockSharedUncancelable(rw: *RwLock, io: Io) void {
    if (rw.tryLockShared()) return;
    rw.lockSlowUncancelable(io, .shared);
}

fn noTimeout(result: LockTimeoutError!void) LockError!void {
    result catch |err| switch (err) {
        error.Canceled => return error.Canceled,
        error.Timeout => unreachable, // no deadline
    };
}

fn lockSlow(rw: *RwLock, io: Io, mode: Mode, deadline: ?Io.Clock.Timestamp) LockTimeoutError!void {
    var waiter: Waiter = .{ .mode = mode };
    if (!rw.enqueue(&waiter)) return;
    const code = rw.waiters.wait(&rw.lock_internal, io, &waiter.node, deadline) catch |err| {
        // Withdrawn. If it was the head, those behind may be able to have the lock now.
        rw.lock_internal.lock();
        var wakes: WaitQueue.Wakes = .{};
        if (rw.state.load(.monotonic) & queued != 0) rw.grant(io, &wakes);
        rw.lock_internal.unlock();
        wakes.wakeAll(io);
        return err;
    };
    assert(code == handed);
    rw.assertHeld(mode);
}

fn lockSlowUncancelable(rw: *RwLock, io: Io, mode: Mode) void {
    var waiter: Waiter = .{ .mode = mode };
    if (!rw.enqueue(&waiter)) return;
    assert(rw.waiters.waitUncancelable(&waiter.node, io) == handed);
    rw.assertHeld(mode);
}

fn assertHeld(rw: *const RwLock, mode: Mode) void {
    const state = rw.state.load(.monotonic);
    switch (mode) {
        .exclusive => assert(state & writer != 0),
        .shared => assert(state >= reader),
    }
}

/// Under the internal lock: takes the lock if it became available meanwhile (returns false),
/// else queues the waiter (returns true).
fn enqueue(rw: *RwLock, waiter: *Waiter) bool {
    rw.lock_internal.lock();
    defer rw.lock_internal.unlock();
    var state = rw.state.load(.monotonic);
    while (state & queued == 0) {
        const held = switch (waiter.mode) {
            .exclusive => state != 0,
            .shared => state & writer != 0,
        };
        const next = if (held) state | queued else switch (waiter.mode) {
            .exclusive => writer,
            .shared => state + reader,
        };
        // Acquire (when it takes the lock): pairs with the release of the previous holder.
        state = rw.state.cmpxchgWeak(state, next, .acquire, .monotonic) orelse {
            if (!held) return false;
            break;
        };
    }
    // Never free with `queued` outside the internal lock (see the file's doc).
    assert(rw.state.load(.monotonic) != queued);
    // Waiters imply `queued` (the converse has the withdrawal window of the file's doc).
    assert(rw.waiters.isEmpty() or state & queued != 0);
    rw.waiters.push(&waiter.node);
    return true;
}

/// Releases the exclusive lock: to the waiters at the head of the queue if any. Never blocks.
pub fn unlock(rw: *RwLock, io: Io) void {
    // Release: the writer's changes are visible to the next holder.
    const state = rw.state.cmpxchgStrong(writer, 0, .release, .monotonic) orelse return;
    assert(state == writer | queued); // unlock of a lock not held exclusively
    rw.lock_internal.lock();
    var wakes: WaitQueue.Wakes = .{};
    // Nothing changes the word lock-free while a writer holds it and tasks wait; a waiter that
    // withdrew may have cleared `queued`, which `grant` handles (an empty queue).
    assert(rw.state.load(.monotonic) & writer != 0);
    _ = rw.state.fetchAnd(~writer, .release);
    if (rw.state.load(.monotonic) & queued != 0) rw.grant(io, &wakes);
    rw.lock_internal.unlock();
    wakes.wakeAll(io);
}

/// Releases a shared hold; the last reader out hands the lock to the waiters. Never blocks.
pub fn unlockShared(rw: *RwLock, io: Io) void {
    var state = rw.state.load(.monotonic);
    while (true) {
        assert(state >= reader); // unlock of a lock not held shared
        assert(state & writer == 0);
        // The last reader with tasks waiting hands on under the internal lock.
        if (state == reader | queued) break;
        // Release: the reader's reads happen before a later writer's writes.
        state = rw.state.cmpxchgWeak(state, state - reader, .release, .monotonic) orelse return;
    }
    rw.lock_internal.lock();
    var wakes: WaitQueue.Wakes = .{};
    // Release, as above. Other readers may have entered meanwhile if a withdrawal emptied the
    // queue; then one of them is the last reader.
    const before = rw.state.fetchSub(reader, .release);
    assert(before >= reader);
    if (before - reader == queued) rw.grant(io, &wakes);
    rw.lock_internal.unlock();
    wakes.wakeAll(io);
}

/// Under the internal lock, `queued` set: hands the lock to the head of the queue while it can
/// have it (a writer if the lock is free; readers while no writer holds it), then clears
/// `queued` if the queue emptied.
fn grant(rw: *RwLock, io: Io, wakes: *WaitQueue.Wakes) void {
    assert(rw.state.load(.monotonic) & queued != 0);
    while (rw.waiters.head) |node| {
        const waiter = Waiter.of(node);
        switch (waiter.mode) {
            .exclusive => {
                // Only from free; readers may still be leaving lock-free otherwise.
                // Acquire/release: hands the previous holders' changes to the writer's node.
                if (rw.state.cmpxchgStrong(queued, queued | writer, .acq_rel, .monotonic) != null) {
                    break;
                }
            },
            .shared => {
                if (rw.state.load(.monotonic) & writer != 0) break;
                _ = rw.state.fetchAdd(reader, .acq_rel);
            },
        }
        assert(rw.waiters.pop() == node);
        // Read before the hand-off: once completed, the waiter may return and its node (on
        // its stack) be gone; only the word's address is used after (found by the TSan build).
        const mode = waiter.mode;
        node.complete(handed);
        wakes.add(io, &node.state.raw);
        if (mode == .exclusive) break; // a writer goes alone
    }
    if (rw.waiters.isEmpty()) {
        const before = rw.state.fetchAnd(~queued, .monotonic);
        assert(before & queued != 0);
    }
}

/// Readers holding the lock now (a snapshot).
pub fn readers(rw: *const RwLock) u32 {
    return rw.state.load(.monotonic) / reader;
}

/// Whether a writer holds the lock now (a snapshot).
pub fn isLocked(rw: *const RwLock) bool {
    return rw.state.load(.monotonic) & writer != 0;
}

test "RwLock: readers share, a writer excludes, try-variants never block" {
    var rw: RwLock = .init;
    try std.testing.expect(rw.tryLockShared());
    try std.testing.expect(rw.tryLockShared());
    try std.testing.expectEqual(@as(u32, 2), rw.readers());
    try std.testing.expect(!rw.tryLock());
    rw.unlockShared(std.testing.io);
    rw.unlockShared(std.testing.io);
    try std.testing.expect(rw.tryLock());
    try std.testing.expect(rw.isLocked());
    try std.testing.expect(!rw.tryLockShared());
    try std.testing.expect(!rw.tryLock());
    rw.unlock(std.testing.io);
    try rw.lock(std.testing.io);
    rw.unlock(std.testing.io);
    try rw.lockShared(std.testing.io);
    rw.unlockShared(std.testing.io);
    try std.testing.expectEqual(@as(u32, 0), rw.state.load(.monotonic));
}

const Checker = @import("../testing/InterleavingChecker.zig");

/// Two writers and two readers take an `RwLock` twice each, the readers mixing in the
/// uncancelable variant; locks are canceled, time out and wake spuriously at random (a
/// failed lock holds nothing and is retried). Inside, each holder checks the exclusion with
/// atomic counters, whose steps let the others run in the middle of a critical section. A
/// hand-off lost to a withdrawal shows as a deadlock or a lost wake-up; a lock held twice or
/// by a writer among readers shows in the check.
const RwLockScenario = struct {
    lock: RwLock = .init,
    prng: std.Random.DefaultPrng,
    readers_inside: atomic.Value(u32) = .init(0),
    writers_inside: atomic.Value(u32) = .init(0),
    /// Held together by more than one reader at least once (the batch path ran).
    readers_together: bool = false,
    exclusion_broken: bool = false,
    writes: u32 = 0,
    reads: u32 = 0,

    const ops_per_thread = 2;
    pub const rearming_threads = [_]usize{ 0, 1, 2, 3 };

    pub fn init(seed: u64) RwLockScenario {
        return .{ .prng = .init(seed ^ 0x2710c) };
    }

    pub fn bodies(scenario: *RwLockScenario) [4]Checker.Body {
        return .{
            Checker.bodyOf(writerThread, scenario),
            Checker.bodyOf(writerThread, scenario),
            Checker.bodyOf(readerThread, scenario),
            Checker.bodyOf(readerThread, scenario),
        };
    }

    fn timeout(scenario: *RwLockScenario, io_: Io) Io.Timeout {
        const deadline = Checker.maybeDeadline(io_, scenario.prng.random());
        return if (deadline) |d| .{ .deadline = d } else .none;
    }

    fn writerThread(scenario: *RwLockScenario, io_: Io) void {
        for (0..ops_per_thread) |_| {
            while (true) {
                scenario.lock.lockTimeout(io_, scenario.timeout(io_)) catch |err| {
                    Checker.noteError(io_, err);
                    continue;
                };
                break;
            }
            if (scenario.writers_inside.fetchAdd(1, .monotonic) != 0) {
                scenario.exclusion_broken = true;
            }
            if (scenario.readers_inside.load(.monotonic) != 0) scenario.exclusion_broken = true;
            scenario.writes += 1;
            _ = scenario.writers_inside.fetchSub(1, .monotonic);
            scenario.lock.unlock(io_);
            Checker.cancelationPoint(io_);
        }
    }

    fn readerThread(scenario: *RwLockScenario, io_: Io) void {
        for (0..ops_per_thread) |_| {
            if (scenario.prng.random().boolean()) {
                scenario.lock.lockSharedUncancelable(io_);
            } else while (true) {
                scenario.lock.lockSharedTimeout(io_, scenario.timeout(io_)) catch |err| {
                    Checker.noteError(io_, err);
                    continue;
                };
                break;
            }
            if (scenario.readers_inside.fetchAdd(1, .monotonic) != 0) {
                scenario.readers_together = true;
            }
            if (scenario.writers_inside.load(.monotonic) != 0) scenario.exclusion_broken = true;
            scenario.reads += 1;
            _ = scenario.readers_inside.fetchSub(1, .monotonic);
            scenario.lock.unlockShared(io_);
            Checker.cancelationPoint(io_);
        }
    }

    pub fn check(scenario: *RwLockScenario) !void {
        try std.testing.expect(!scenario.exclusion_broken);
        try std.testing.expectEqual(@as(u32, 2 * ops_per_thread), scenario.writes);
        try std.testing.expectEqual(@as(u32, 2 * ops_per_thread), scenario.reads);
        try std.testing.expectEqual(@as(u32, 0), scenario.lock.state.load(.monotonic));
        try std.testing.expect(scenario.lock.waiters.isEmpty());
    }
};

test "interleave: RwLock, 1000 seeds: exclusion holds, no hand-off lost, nothing left held" {
    try Checker.checkSeeds(RwLockScenario);
}
