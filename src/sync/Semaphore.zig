//! A counting semaphore with FIFO direct hand-off.
//!
//! ```
//! var slots: weft.sync.Semaphore = .init(2); // two at a time
//! try slots.acquire(io);
//! defer slots.release(io);
//! ```
//!
//! Uncontended `acquire` and `release` are one CAS each, no lock. When tasks wait, a `release`
//! hands its permit straight to the oldest waiter (it never returns to the counter where a
//! newcomer could take it first), so waiters are served in arrival order. Compare std's
//! `Io.Semaphore` (a Mutex and a Condition: every operation takes the mutex, and a woken
//! waiter competes with newcomers).
//!
//! Thread-safety: any mix of tasks and OS threads with the same `Io`. Cancel-safe: a canceled
//! (or timed-out) `acquire` either holds no permit and returns the error, or was handed one
//! first and returns normally (cancel request re-armed; see `WaitQueue`). No allocation.
//!
//! ## State word
//!
//! The number of free permits, or `queued` (a flag value) when tasks wait. Invariant: while
//! tasks wait there is no free permit, so the lock-free paths (take a permit when one is free,
//! return one when nobody waits) never meet a waiter; `queued` is set and cleared only under
//! the lock.
const Semaphore = @This();

const std = @import("std");
const assert = std.debug.assert;
const Io = std.Io;
const atomic = @import("../os/atomic.zig");
const WaitQueue = @import("WaitQueue.zig");

state: atomic.Value(u32),
lock: WaitQueue.Lock = .{},
waiters: WaitQueue = .of(.semaphore),

/// Free permits at most.
pub const permits_max = queued - 1;
const queued: u32 = std.math.maxInt(u32);

/// Node completion code: a permit was handed over.
const handed: u32 = 1;

pub const AcquireError = Io.Cancelable;
pub const AcquireTimeoutError = Io.Cancelable || error{Timeout};

pub fn init(permits: u32) Semaphore {
    assert(permits <= permits_max);
    return .{ .state = .init(permits) };
}

/// Takes a permit if one is free. Never blocks.
pub fn tryAcquire(semaphore: *Semaphore) bool {
    var state = semaphore.state.load(.monotonic);
    while (state != 0 and state != queued) {
        // Acquire: pairs with the release of the permit's last holder.
        state = semaphore.state.cmpxchgWeak(state, state - 1, .acquire, .monotonic) orelse
            return true;
    }
    return false;
}

/// Takes a permit, waiting in FIFO order for one. Cancelation point when it blocks.
pub fn acquire(semaphore: *Semaphore, io: Io) AcquireError!void {
    semaphore.acquireDeadline(io, null) catch |err| switch (err) {
        error.Canceled => return error.Canceled,
        error.Timeout => unreachable, // no deadline
    };
}

/// `acquire` that gives up with `error.Timeout` (holding no permit).
pub fn acquireTimeout(semaphore: *Semaphore, io: Io, timeout: Io.Timeout) AcquireTimeoutError!void {
    return semaphore.acquireDeadline(io, timeout.toTimestamp(io));
}

/// `acquire` that is not a cancelation point.
pub fn acquireUncancelable(semaphore: *Semaphore, io: Io) void {
    if (semaphore.tryAcquire()) return;
    var node: WaitQueue.Node = .{};
    if (!semaphore.enqueue(&node)) return;
    assert(semaphore.waiters.waitUncancelable(&node, io) == handed);
}

fn acquireDeadline(
    semaphore: *Semaphore,
    io: Io,
    deadline: ?Io.Clock.Timestamp,
) AcquireTimeoutError!void {
    if (semaphore.tryAcquire()) return;
    var node: WaitQueue.Node = .{};
    if (!semaphore.enqueue(&node)) return;
    const code = semaphore.waiters.wait(&semaphore.lock, io, &node, deadline) catch |err| {
        // Withdrawn: if it was the last waiter, the permits are zero again.
        semaphore.lock.lock();
        defer semaphore.lock.unlock();
        if (semaphore.waiters.isEmpty() and semaphore.state.load(.monotonic) == queued) {
            semaphore.state.store(0, .monotonic);
        }
        return err;
    };
    assert(code == handed);
}

/// Under the lock: takes a permit freed meanwhile (returns false) or queues `node` (true).
fn enqueue(semaphore: *Semaphore, node: *WaitQueue.Node) bool {
    semaphore.lock.lock();
    defer semaphore.lock.unlock();
    var state = semaphore.state.load(.monotonic);
    while (state != queued) {
        if (state == 0) {
            state = semaphore.state.cmpxchgWeak(0, queued, .monotonic, .monotonic) orelse break;
        } else {
            state = semaphore.state.cmpxchgWeak(state, state - 1, .acquire, .monotonic) orelse
                return false;
        }
    }
    semaphore.waiters.push(node);
    return true;
}

/// Returns a permit: to the oldest waiter if any, else to the counter. Never blocks.
pub fn release(semaphore: *Semaphore, io: Io) void {
    while (true) {
        var state = semaphore.state.load(.monotonic);
        while (state != queued) {
            assert(state < permits_max); // more releases than permits
            // Release: the holder's writes are visible to the next one.
            state = semaphore.state.cmpxchgWeak(state, state + 1, .release, .monotonic) orelse
                return;
        }
        if (semaphore.releaseQueued(io)) return;
    }
}

/// Under the lock, state `queued` seen: hands the permit to the oldest waiter. Returns false
/// (for a retry) if the last waiter withdrew and already left `queued`.
fn releaseQueued(semaphore: *Semaphore, io: Io) bool {
    semaphore.lock.lock();
    const node = semaphore.waiters.pop() orelse {
        // The last waiter withdrew. Still `queued` (it has not reset the state yet): nobody
        // can change the word without the lock, so store the permit. Else retry lock-free.
        const was_queued = semaphore.state.load(.monotonic) == queued;
        if (was_queued) semaphore.state.store(1, .release);
        semaphore.lock.unlock();
        return was_queued;
    };
    assert(semaphore.state.load(.monotonic) == queued);
    if (semaphore.waiters.isEmpty()) semaphore.state.store(0, .monotonic);
    node.complete(handed);
    semaphore.lock.unlock();
    node.wake(io);
    return true;
}

/// Free permits now (a snapshot; 0 while tasks wait).
pub fn available(semaphore: *const Semaphore) u32 {
    const state = semaphore.state.load(.monotonic);
    return if (state == queued) 0 else state;
}

test "Semaphore: permits count down and up without blocking" {
    var semaphore: Semaphore = .init(2);
    try std.testing.expect(semaphore.tryAcquire());
    try std.testing.expect(semaphore.tryAcquire());
    try std.testing.expect(!semaphore.tryAcquire());
    semaphore.release(std.testing.io);
    try std.testing.expectEqual(@as(u32, 1), semaphore.available());
    try semaphore.acquire(std.testing.io);
    semaphore.release(std.testing.io);
    semaphore.release(std.testing.io);
    try std.testing.expectEqual(@as(u32, 2), semaphore.available());
}

const Checker = @import("../testing/InterleavingChecker.zig");

/// Four tasks take one of a `Semaphore`'s two permits twice each, now and then uncancelably;
/// their acquires are canceled, time out and wake spuriously at random (a failed acquire holds
/// nothing and is retried). The task's own cancelation point comes while it holds the permit,
/// where a request re-armed by the acquire surfaces. A permit handed to a waiter that then
/// reported an error would be lost (a deadlock, or fewer permits at the end); one taken twice
/// shows as a third holder.
const SemaphoreScenario = struct {
    semaphore: Semaphore = .init(permits),
    prng: std.Random.DefaultPrng,
    holders: atomic.Value(u32) = .init(0),
    over_capacity: bool = false,
    acquired: [takers]u32 = @splat(0),

    const permits = 2;
    const takers = 4;
    const rounds = 2;
    pub const rearming_threads = [_]usize{ 0, 1, 2, 3 };

    pub fn init(seed: u64) SemaphoreScenario {
        return .{ .prng = .init(seed ^ 0x5e4a) };
    }

    pub fn bodies(scenario: *SemaphoreScenario) [takers]Checker.Body {
        return .{
            Checker.bodyOf(taker0, scenario),
            Checker.bodyOf(taker1, scenario),
            Checker.bodyOf(taker2, scenario),
            Checker.bodyOf(taker3, scenario),
        };
    }

    fn take(scenario: *SemaphoreScenario, io_: Io, index: usize) void {
        for (0..rounds) |_| {
            if (scenario.prng.random().uintLessThan(u32, 4) == 0) {
                scenario.semaphore.acquireUncancelable(io_);
            } else while (true) {
                const deadline = Checker.maybeDeadline(io_, scenario.prng.random());
                const timeout: Io.Timeout = if (deadline) |d| .{ .deadline = d } else .none;
                scenario.semaphore.acquireTimeout(io_, timeout) catch |err| {
                    Checker.noteError(io_, err);
                    continue; // holds nothing
                };
                break;
            }
            if (scenario.holders.fetchAdd(1, .monotonic) >= permits) {
                scenario.over_capacity = true;
            }
            scenario.acquired[index] += 1;
            Checker.cancelationPoint(io_);
            _ = scenario.holders.fetchSub(1, .monotonic);
            scenario.semaphore.release(io_);
        }
    }

    fn taker0(scenario: *SemaphoreScenario, io_: Io) void {
        scenario.take(io_, 0);
    }

    fn taker1(scenario: *SemaphoreScenario, io_: Io) void {
        scenario.take(io_, 1);
    }

    fn taker2(scenario: *SemaphoreScenario, io_: Io) void {
        scenario.take(io_, 2);
    }

    fn taker3(scenario: *SemaphoreScenario, io_: Io) void {
        scenario.take(io_, 3);
    }

    pub fn check(scenario: *SemaphoreScenario) !void {
        try std.testing.expect(!scenario.over_capacity);
        for (scenario.acquired) |count| try std.testing.expectEqual(@as(u32, rounds), count);
        try std.testing.expectEqual(@as(u32, permits), scenario.semaphore.available());
        try std.testing.expect(scenario.semaphore.waiters.isEmpty());
    }
};

test "interleave: Semaphore, 1000 seeds: no permit lost or doubled, every cancel seen once" {
    try Checker.checkSeeds(SemaphoreScenario);
}
