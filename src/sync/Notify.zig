//! Wakes tasks waiting for an event, with a stored permit as in Tokio's `Notify`.
//!
//! - `notifyOne` wakes the oldest waiter, or, if nobody waits, stores one permit (at most one:
//!   several calls without a waiter in between store one) which the next `wait` consumes at
//!   once.
//! - `notifyAll` wakes every task waiting at the time of the call and stores no permit.
//!
//! ```
//! var ready: weft.sync.Notify = .init;
//! // task A                         // task B
//! try ready.wait(io);               ready.notifyOne(io);
//! ```
//!
//! Fast paths (a permit is taken or stored with nobody waiting) are one atomic operation;
//! waiters queue in a `WaitQueue` and are woken in FIFO order. No allocation.
//!
//! Thread-safety: every method may be called from any task or OS thread, as long as all use
//! the same `Io`. Works on any `std.Io` (it parks through `futexWait`).
//!
//! ## State word
//!
//!   empty ◀──notifyOne/wait (lock-free CAS)──▶ permit
//!   empty ──wait (under the lock, node queued)──▶ waiting ──last waiter leaves──▶ empty
//!
//! `waiting` is entered and left only under the lock, and then the queue is non-empty exactly
//! when the state is `waiting`; the lock-free transitions only go between `empty` and
//! `permit`, so with `waiting` set nobody changes the word without the lock.
const Notify = @This();

const std = @import("std");
const assert = std.debug.assert;
const Io = std.Io;
const atomic = @import("../os/atomic.zig");
const WaitQueue = @import("WaitQueue.zig");

state: atomic.Value(State) = .init(.empty),
lock: WaitQueue.Lock = .{},
waiters: WaitQueue = .of(.notify),

pub const init: Notify = .{};

const State = enum(u32) { empty, permit, waiting };

/// Node completion code: the waiter was notified.
const notified: u32 = 1;

pub const WaitError = Io.Cancelable;
pub const WaitTimeoutError = Io.Cancelable || error{Timeout};

/// Wakes the oldest waiter, or stores the permit if nobody waits. Never blocks; not a
/// cancelation point.
pub fn notifyOne(notify: *Notify, io: Io) void {
    var state = notify.state.load(.monotonic);
    while (state != .waiting) {
        if (state == .permit) return;
        // Release: what the notifier did before is visible to whoever takes the permit.
        state = notify.state.cmpxchgWeak(.empty, .permit, .release, .monotonic) orelse return;
    }
    notify.lock.lock();
    const node = notify.waiters.pop() orelse {
        // The last waiter withdrew (canceled or timed out) and has not yet, or has just, left
        // `waiting`: nobody waits, so store the permit.
        notify.state.store(.permit, .release);
        notify.lock.unlock();
        return;
    };
    assert(notify.state.load(.monotonic) == .waiting);
    if (notify.waiters.isEmpty()) notify.state.store(.empty, .monotonic);
    node.complete(notified);
    notify.lock.unlock();
    node.wake(io);
}

/// Wakes every current waiter; stores no permit. Never blocks; not a cancelation point.
pub fn notifyAll(notify: *Notify, io: Io) void {
    if (notify.state.load(.monotonic) != .waiting) return;
    notify.lock.lock();
    defer notify.lock.unlock();
    // Woken under the lock: once a node is completed its waiter may return and reuse the
    // memory, so the next link is read before completing, and the wake (address only) comes
    // right after; the queue is bounded by the number of parked tasks.
    var woken: u32 = 0;
    while (notify.waiters.pop()) |node| {
        node.complete(notified);
        node.wake(io);
        woken += 1;
    }
    assert(notify.waiters.isEmpty());
    if (woken > 0) notify.state.store(.empty, .monotonic);
}

/// Consumes the permit without blocking; returns whether there was one.
pub fn tryWait(notify: *Notify) bool {
    // Acquire: pairs with the release of `notifyOne`.
    return notify.state.cmpxchgStrong(.permit, .empty, .acquire, .monotonic) == null;
}

/// Returns at once if a permit is stored (consuming it), else blocks until notified.
/// Cancelation point when it blocks: `error.Canceled` means no notification was consumed (a
/// notification that won the race is kept and the request re-armed; see `WaitQueue`).
pub fn wait(notify: *Notify, io: Io) WaitError!void {
    notify.waitDeadline(io, null) catch |err| switch (err) {
        error.Canceled => return error.Canceled,
        error.Timeout => unreachable, // no deadline
    };
}

/// `wait` that gives up with `error.Timeout` when `timeout` passes first (then no
/// notification was consumed).
pub fn waitTimeout(notify: *Notify, io: Io, timeout: Io.Timeout) WaitTimeoutError!void {
    const deadline = timeout.toTimestamp(io);
    return notify.waitDeadline(io, deadline);
}

/// `wait` that is not a cancelation point.
pub fn waitUncancelable(notify: *Notify, io: Io) void {
    if (notify.tryWait()) return;
    var node: WaitQueue.Node = .{};
    if (!notify.enqueue(&node)) return;
    const code = notify.waiters.waitUncancelable(&node, io);
    assert(code == notified);
}

fn waitDeadline(notify: *Notify, io: Io, deadline: ?Io.Clock.Timestamp) WaitTimeoutError!void {
    if (notify.tryWait()) return;
    var node: WaitQueue.Node = .{};
    if (!notify.enqueue(&node)) return;
    const code = notify.waiters.wait(&notify.lock, io, &node, deadline) catch |err| {
        // The node was withdrawn; if it was the last one, leave `waiting`.
        notify.lock.lock();
        defer notify.lock.unlock();
        if (notify.waiters.isEmpty() and notify.state.load(.monotonic) == .waiting) {
            notify.state.store(.empty, .monotonic);
        }
        return err;
    };
    assert(code == notified);
}

/// Takes a permit that arrived meanwhile (returns false), or queues `node` (returns true).
fn enqueue(notify: *Notify, node: *WaitQueue.Node) bool {
    notify.lock.lock();
    defer notify.lock.unlock();
    var state = notify.state.load(.monotonic);
    while (true) switch (state) {
        .permit => {
            state = notify.state.cmpxchgWeak(.permit, .empty, .acquire, .monotonic) orelse
                return false;
        },
        .empty => {
            state = notify.state.cmpxchgWeak(.empty, .waiting, .monotonic, .monotonic) orelse
                break;
        },
        .waiting => break,
    };
    assert(notify.state.load(.monotonic) == .waiting);
    notify.waiters.push(node);
    return true;
}

// Tests of behaviour across tasks are in src/testing/sync_test.zig.

test "Notify: a stored permit is consumed once; several notifies store one" {
    var notify: Notify = .init;
    try std.testing.expect(!notify.tryWait());
    notify.notifyOne(std.testing.io);
    notify.notifyOne(std.testing.io);
    try std.testing.expect(notify.tryWait());
    try std.testing.expect(!notify.tryWait());
    notify.notifyAll(std.testing.io); // no waiter: no permit
    try std.testing.expect(!notify.tryWait());
}

const Checker = @import("../testing/InterleavingChecker.zig");

/// A notifier sends `notifications` notifications through a `Notify`, each only once the one
/// before was consumed (so none is folded into a stored permit), then one more per waiter,
/// which tells it to stop. Two waiters wait for them, now and then uncancelably; their waits
/// are canceled, time out and wake spuriously at random. Each notification must be consumed by
/// exactly one wait: one handed to a waiter that then reported an error leaves the notifier
/// waiting (a deadlock), one consumed twice shows in the count.
const NotifyScenario = struct {
    notify: Notify = .init,
    prng: std.Random.DefaultPrng,
    /// Notifications consumed: the futex word the notifier waits on.
    consumed: atomic.Value(u32) = .init(0),

    const notifications = 4;
    const waiters = 2;
    pub const rearming_threads = [_]usize{ 1, 2 }; // the waiters

    pub fn init(seed: u64) NotifyScenario {
        return .{ .prng = .init(seed ^ 0x40f1) };
    }

    pub fn bodies(scenario: *NotifyScenario) [1 + waiters]Checker.Body {
        return .{
            Checker.bodyOf(notifier, scenario),
            Checker.bodyOf(waiter, scenario),
            Checker.bodyOf(waiter, scenario),
        };
    }

    fn notifier(scenario: *NotifyScenario, io_: Io) void {
        for (0..notifications + waiters) |sent| {
            scenario.notify.notifyOne(io_);
            const before: u32 = @intCast(sent);
            while (scenario.consumed.load(.acquire) == before) {
                io_.futexWaitUncancelable(u32, &scenario.consumed.raw, before);
            }
        }
    }

    fn waiter(scenario: *NotifyScenario, io_: Io) void {
        while (true) {
            if (scenario.prng.random().uintLessThan(u32, 4) == 0) {
                scenario.notify.waitUncancelable(io_);
            } else while (true) {
                const deadline = Checker.maybeDeadline(io_, scenario.prng.random());
                const timeout: Io.Timeout = if (deadline) |d| .{ .deadline = d } else .none;
                scenario.notify.waitTimeout(io_, timeout) catch |err| {
                    Checker.noteError(io_, err);
                    continue; // consumed nothing
                };
                break;
            }
            const index = scenario.consumed.fetchAdd(1, .acq_rel);
            io_.futexWake(u32, &scenario.consumed.raw, 1);
            Checker.cancelationPoint(io_);
            if (index >= notifications) return; // a stop
        }
    }

    pub fn check(scenario: *NotifyScenario) !void {
        const consumed = scenario.consumed.load(.monotonic);
        try std.testing.expectEqual(@as(u32, notifications + waiters), consumed);
        try std.testing.expect(!scenario.notify.tryWait()); // no permit left behind
        try std.testing.expect(scenario.notify.waiters.isEmpty());
    }
};

test "interleave: Notify, 1000 seeds: each notification consumed once, every cancel seen once" {
    try Checker.checkSeeds(NotifyScenario);
}
