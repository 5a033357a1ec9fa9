//! An intrusive FIFO of parked waiters, the building block of weft's blocking primitives
//! (`Notify`, `Semaphore`, `Channel`).
//!
//! ## Design
//!
//! Each waiter owns a `Node` on its own stack (a fiber's stack or a thread's: nothing is
//! allocated). The node carries its own futex word, `state`. The primitive that owns the queue
//! also owns a lock (`Lock`, a spin lock that is never held across a park or a blocking call,
//! so a contender never needs a kernel wake) and changes the queue only while holding it.
//!
//! A waiter, holding the lock, decides it must wait, `push`es its node and unlocks, then
//! `wait`s: it parks through `io.futexWait` on `node.state` until the state leaves `pending`.
//! On weft that parks the fiber; from a plain OS thread (or on `std.Io.Threaded`) it blocks the
//! thread. A releaser, holding the lock, `pop`s the first node, hands it whatever the waiter
//! waited for (a value, a permit) by writing the node's payload, and `complete`s it with a code
//! (a `u32` the primitive defines, never `pending`); after unlocking it `wake`s it. This is
//! direct hand-off: the value or permit never goes back to a shared pool where a newcomer could
//! barge in, so waiters are served strictly in arrival order (FIFO fairness).
//!
//! Before parking, a waiter on a weft executor may spin briefly for its completion
//! (`spinWhilePending`): only when another executor is awake, so the releaser can be running,
//! and its own executor has nothing else queued. On two executors a FIFO hand-off otherwise
//! parks and wakes on every acquisition under contention (a lock convoy across cores).
//!
//! ## Node states
//!
//!     pending ──(releaser, under the lock: unlinked + payload written)──▶ completed(code)
//!        │
//!        └──(waiter, canceled or timed out, under the lock, still linked)──▶ removed
//!
//! - `pending`: linked in the queue. The waiter may only read `state`; the queue (and the
//!   releaser, under the lock) owns the links and the payload.
//! - completed: unlinked; the code and payload belong to the waiter again. The releaser stores
//!   the code with release ordering *under the lock*, so a waiter that takes the lock and finds
//!   its node unlinked also finds its code. The releaser touches the node only through the
//!   futex address afterwards (a wake of an address that has been reused is a spurious wake,
//!   which every futex user tolerates).
//!
//! ## Nodes of a `select`
//!
//! A `select` (select.zig) waits on several queues at once with one node per arm. Its nodes
//! share one word, the `Selector`, instead of their own `state`: the first completion to
//! change it from `pending` wins and every other arm of that select is dead. A releaser,
//! under the lock, writes the payload, then calls `tryComplete`; a dead node is unlinked by
//! the pop and skipped (the releaser looks at the next one), and the payload written into it is
//! never read, so nothing is lost. The select's owner unlinks its other nodes itself, under
//! each owner's lock, before it returns. Plain waits never see this: `tryComplete` of a plain
//! node always succeeds.
//!
//! ## Cancelation and timeouts
//!
//! Cancelation races with completion, and completion wins if it happened first: a waiter that
//! gets `error.Canceled` (or reaches its deadline) takes the lock; if its node is still linked,
//! it unlinks it and reports the error (nothing was handed to it); if not, it was completed and
//! keeps what it was handed, returns the code, and re-arms the cancel request with
//! `io.recancel()` so the task still sees `error.Canceled` at its next cancelation point. So a
//! canceled operation never loses or duplicates a value or a permit.
//!
//! Thread-safety: the list operations are not thread-safe (callers hold the owner's lock);
//! `wait` and `wake` are called without it.
const WaitQueue = @This();

const std = @import("std");
const assert = std.debug.assert;
const Io = std.Io;
const atomic = @import("../os/atomic.zig");
const config = @import("../config.zig");
const Executor = @import("../sched/Executor.zig");
const platform = @import("../platform.zig");
const wait_reason = @import("../wait_reason.zig");
/// The short internal lock of the primitives (never held across a park); see atomic.zig.
pub const Lock = atomic.Lock;

head: ?*Node = null,
tail: ?*Node = null,
len: u32 = 0,
/// What a task dump says its waiters wait for (with the queue's address).
kind: wait_reason.Kind = .sync,

pub const empty: WaitQueue = .{};

/// An empty queue whose waiters a task dump shows as waiting for `kind`.
pub fn of(kind: wait_reason.Kind) WaitQueue {
    return .{ .kind = kind };
}

/// The code of a node still waiting; every completion code differs from it.
pub const pending: u32 = 0;

pub const Node = struct {
    /// The futex word: `pending`, or the completion code. Unused by the nodes of a select.
    state: atomic.Value(u32) = .init(pending),
    prev: ?*Node = null,
    next: ?*Node = null,
    linked: bool = false,
    /// Set for the arms of a select: the word they share (see the file's doc).
    selector: ?*Selector = null,
    /// Which arm of its select this node stands for.
    arm: u16 = 0,

    /// Under the owner's lock, after `pop` or `remove`: hands the node its completion code.
    /// The waiter may return (and reuse the node's memory) as soon as it sees the store.
    /// For queues that never hold a select's nodes; see `tryComplete` for those that may.
    pub fn complete(node: *Node, code: u32) void {
        assert(code != pending);
        assert(!node.linked);
        assert(node.selector == null);
        assert(node.state.load(.monotonic) == pending); // a node is completed at most once
        // A plain release store, not a swap: a plain node's state has one writer, this call,
        // made under the owner's lock (the waiter only reads it, and withdraws under the same
        // lock), so no update can be lost. Release: the payload written before is visible to
        // the waiter that sees the code. Saves a locked instruction per hand-off.
        node.state.store(code, .release);
    }

    /// Under the owner's lock, after `pop` or `remove`, with the payload written: completes
    /// the node with `code`, unless it is an arm of a select already decided. Returns the
    /// futex word to wake once the lock is released (`wakeWord`), or null for a dead node,
    /// which the caller skips: nothing was handed over.
    pub fn tryComplete(node: *Node, code: u32) ?*const u32 {
        assert(code != pending);
        assert(!node.linked);
        const selector = node.selector orelse {
            node.complete(code);
            return &node.state.raw;
        };
        // Acq_rel (in `tryDecide`): publishes the payload to the owner that sees its arm won.
        if (!selector.tryDecide(Selector.decided(node.arm, code))) return null;
        return &selector.state.raw;
    }

    /// After `complete`, usually once the lock is released: unparks the waiter. The node may
    /// be gone already; only its address is used.
    pub fn wake(node: *const Node, io: Io) void {
        io.futexWake(u32, &node.state.raw, 1);
    }
};

/// The word the arms of one select share: `pending` until decided, then `decided(arm, code)`
/// for the arm that completed, or `withdrawn` when the owner gave up first.
pub const Selector = struct {
    state: atomic.Value(u32) = .init(pending),

    /// The owner's own decision (canceled, timed out): no arm may complete any more.
    pub const withdrawn: u32 = std.math.maxInt(u32);

    pub fn decided(arm: u16, code: u32) u32 {
        assert(code != pending);
        assert(code <= std.math.maxInt(u16));
        const value = @as(u32, arm) << 16 | code;
        assert(value != withdrawn);
        return value;
    }

    pub fn armOf(value: u32) u16 {
        assert(value != pending and value != withdrawn);
        return @intCast(value >> 16);
    }

    pub fn codeOf(value: u32) u32 {
        assert(value != pending and value != withdrawn);
        return value & 0xFFFF;
    }

    /// Decides the select for `value` unless it is decided already; returns whether it won.
    pub fn tryDecide(selector: *Selector, value: u32) bool {
        assert(value != pending);
        return selector.state.cmpxchgStrong(pending, value, .acq_rel, .acquire) == null;
    }
};

/// Wakes the waiter parked on `word` (a node's or a selector's), after the lock is released.
/// Only the address is used: the waiter may have returned already (a spurious wake then).
pub fn wakeWord(io: Io, word: *const u32) void {
    io.futexWake(u32, word, 1);
}

/// Futex words to wake once the owner's lock is released, so that the lock is not held across
/// the wakes (each a futex-table lookup and a run-queue push, which other executors would wait
/// out). Addresses only: a completed waiter may return as soon as it sees its code, and a wake
/// of a reused address is spurious. Past `deferred_max` words, `add` wakes at once, under the
/// lock: correct, only slower.
pub const Wakes = struct {
    words: [deferred_max]*const u32 = undefined,
    len: u32 = 0,

    pub const deferred_max = 8;

    /// Under the lock, right after the completion: defers the wake if there is room, else
    /// wakes now.
    pub fn add(wakes: *Wakes, io: Io, word: *const u32) void {
        assert(wakes.len <= deferred_max);
        if (wakes.len == deferred_max) return wakeWord(io, word);
        wakes.words[wakes.len] = word;
        wakes.len += 1;
    }

    /// After the lock is released.
    pub fn wakeAll(wakes: *const Wakes, io: Io) void {
        for (wakes.words[0..wakes.len]) |word| wakeWord(io, word);
    }
};

pub const WaitError = Io.Cancelable || error{Timeout};

pub fn isEmpty(queue: *const WaitQueue) bool {
    assert((queue.head == null) == (queue.len == 0));
    return queue.head == null;
}

/// Appends `node`. Under the owner's lock.
pub fn push(queue: *WaitQueue, node: *Node) void {
    assert(!node.linked);
    assert(node.state.load(.monotonic) == pending);
    node.prev = queue.tail;
    node.next = null;
    if (queue.tail) |tail| tail.next = node else queue.head = node;
    queue.tail = node;
    node.linked = true;
    queue.len += 1;
}

/// Unlinks and returns the oldest node. Under the owner's lock.
pub fn pop(queue: *WaitQueue) ?*Node {
    const node = queue.head orelse return null;
    queue.remove(node);
    return node;
}

/// Unlinks `node`, which must be linked in this queue. Under the owner's lock.
pub fn remove(queue: *WaitQueue, node: *Node) void {
    assert(node.linked);
    assert(queue.len > 0);
    if (node.prev) |prev| prev.next = node.next else queue.head = node.next;
    if (node.next) |next| next.prev = node.prev else queue.tail = node.prev;
    node.prev = null;
    node.next = null;
    node.linked = false;
    queue.len -= 1;
}

/// Parks until `node` (pushed by the caller under `lock`, which the caller has released) is
/// completed, and returns its code. Cancelation point; `deadline` null waits forever.
///
/// Errors (the node is then unlinked and nothing was handed to it):
/// - `Canceled`: the task's cancel request arrived first.
/// - `Timeout`: `deadline` passed first.
/// A cancel request that arrives after the completion is re-armed (`io.recancel`).
pub fn wait(
    queue: *WaitQueue,
    lock: *Lock,
    io: Io,
    node: *Node,
    deadline: ?Io.Clock.Timestamp,
) WaitError!u32 {
    if (spinWhilePending(&node.state)) |code| return code;
    while (true) {
        const code = node.state.load(.acquire);
        if (code != pending) return code;
        const timeout: Io.Timeout = if (deadline) |d| .{ .deadline = d } else .none;
        wait_reason.label(queue.kind, @intFromPtr(queue));
        const waited = io.futexWaitTimeout(u32, &node.state.raw, pending, timeout);
        wait_reason.unlabel();
        waited catch |err| switch (err) {
            error.Canceled => return queue.withdraw(lock, io, node, error.Canceled),
        };
        if (deadline) |d| {
            if (node.state.load(.acquire) != pending) continue;
            if (d.durationFromNow(io).raw.nanoseconds > 0) continue; // a spurious wake
            return queue.withdraw(lock, io, node, error.Timeout);
        }
    }
}

/// Parks uncancelably and without a deadline until `node` (pushed on this queue) is
/// completed; returns its code.
pub fn waitUncancelable(queue: *const WaitQueue, node: *Node, io: Io) u32 {
    if (spinWhilePending(&node.state)) |code| return code;
    while (true) {
        const code = node.state.load(.acquire);
        if (code != pending) return code;
        wait_reason.label(queue.kind, @intFromPtr(queue));
        io.futexWaitUncancelable(u32, &node.state.raw, pending);
        wait_reason.unlabel();
    }
}

/// Spins a short while for `word` (a node's state or a selector's) to leave `pending` before
/// its waiter parks; see `spinUntil`. Returns the new value, or null to park.
pub fn spinWhilePending(word: *const atomic.Value(u32)) ?u32 {
    return spinUntil(word, leftPending);
}

fn leftPending(word: *const atomic.Value(u32)) ?u32 {
    const value = word.load(.acquire);
    return if (value != pending) value else null;
}

/// Spins a short while for `check(context)` to return a value before the caller parks, when a
/// hand-off can come from a task running on another executor (`Executor.spinWorthwhile`);
/// null: park. Under contention on several executors a FIFO hand-off otherwise parks and
/// wakes on every acquisition (a lock convoy); a hand-off that lands during the spin costs a
/// cache-line transfer instead. Not a cancelation point: the spin is bounded, and the park
/// that follows checks for cancelation.
pub fn spinUntil(context: anytype, comptime check: fn (@TypeOf(context)) ?u32) ?u32 {
    if (!platform.fibers_supported) return null; // no executors to hand off from
    if (!Executor.spinWorthwhile()) return null;
    for (0..config.handoff_spins_max) |_| {
        if (check(context)) |value| return value;
        std.atomic.spinLoopHint();
    }
    return null;
}

/// The waiter gave up (`reason`): unlink the node if it is still queued, else keep the code it
/// was completed with (re-arming a cancel request, which the completion won against).
fn withdraw(
    queue: *WaitQueue,
    lock: *Lock,
    io: Io,
    node: *Node,
    reason: WaitError,
) WaitError!u32 {
    lock.lock();
    if (node.linked) {
        queue.remove(node);
        lock.unlock();
        assert(node.state.load(.monotonic) == pending);
        return reason;
    }
    lock.unlock();
    // Completed under the lock, so the code is visible now.
    const code = node.state.load(.acquire);
    assert(code != pending);
    if (reason == error.Canceled) io.recancel();
    return code;
}

test "WaitQueue: FIFO order, remove from the middle" {
    var queue: WaitQueue = .empty;
    var nodes: [4]Node = @splat(.{});
    for (&nodes) |*node| queue.push(node);
    queue.remove(&nodes[1]);
    try std.testing.expectEqual(@as(u32, 3), queue.len);
    try std.testing.expectEqual(&nodes[0], queue.pop().?);
    try std.testing.expectEqual(&nodes[2], queue.pop().?);
    try std.testing.expectEqual(&nodes[3], queue.pop().?);
    try std.testing.expect(queue.pop() == null);
    try std.testing.expect(queue.isEmpty());
}

test "WaitQueue: model-based fuzz against an array, many seeds" {
    const nodes_max = 16;
    for (0..200) |seed| {
        var prng: std.Random.DefaultPrng = .init(seed);
        const random = prng.random();
        var queue: WaitQueue = .empty;
        var nodes: [nodes_max]Node = @splat(.{});
        var model: [nodes_max]u8 = undefined; // indices of linked nodes, oldest first
        var model_len: usize = 0;
        for (0..500) |_| {
            const index = random.uintLessThan(u8, nodes_max);
            const node = &nodes[index];
            switch (random.uintLessThan(u8, 3)) {
                0 => if (!node.linked) {
                    queue.push(node);
                    model[model_len] = index;
                    model_len += 1;
                },
                1 => if (node.linked) {
                    queue.remove(node);
                    const at = std.mem.indexOfScalar(u8, model[0..model_len], index).?;
                    const tail = model[at + 1 .. model_len];
                    std.mem.copyForwards(u8, model[at .. model_len - 1], tail);
                    model_len -= 1;
                },
                2 => if (queue.pop()) |popped| {
                    try std.testing.expectEqual(&nodes[model[0]], popped);
                    std.mem.copyForwards(u8, model[0 .. model_len - 1], model[1..model_len]);
                    model_len -= 1;
                } else try std.testing.expectEqual(@as(usize, 0), model_len),
                else => unreachable,
            }
            try std.testing.expectEqual(model_len, queue.len);
            var cursor = queue.head;
            for (model[0..model_len]) |expected| {
                try std.testing.expectEqual(&nodes[expected], cursor.?);
                cursor = cursor.?.next;
            }
            try std.testing.expect(cursor == null);
        }
    }
}

const Checker = @import("../testing/InterleavingChecker.zig");

/// A hand-off of tokens through a bare `WaitQueue` (the protocol every primitive follows):
/// two releasers hand out four tokens, two acquirers each want two, and their waits are
/// canceled, time out or wake spuriously at random. A token handed to a waiter that then
/// reported an error would be lost (a deadlock); one counted twice shows in the check.
const TokenScenario = struct {
    lock: WaitQueue.Lock = .{},
    queue: WaitQueue = .empty,
    free: u32 = 0,
    acquired: [2]u32 = .{ 0, 0 },
    prng: std.Random.DefaultPrng,

    const tokens_per_acquirer = 2;
    const handed: u32 = 1;
    pub const rearming_threads = [_]usize{ 0, 1 }; // the acquirers

    pub fn init(seed: u64) TokenScenario {
        return .{ .prng = .init(seed ^ 0x70cc) };
    }

    pub fn bodies(scenario: *TokenScenario) [4]Checker.Body {
        return .{
            Checker.bodyOf(acquirer0, scenario),
            Checker.bodyOf(acquirer1, scenario),
            Checker.bodyOf(releaser, scenario),
            Checker.bodyOf(releaser, scenario),
        };
    }

    fn release(scenario: *TokenScenario, io_: Io) void {
        scenario.lock.lock();
        if (scenario.queue.pop()) |node| {
            const word = node.tryComplete(handed).?; // plain nodes are never dead
            scenario.lock.unlock();
            WaitQueue.wakeWord(io_, word);
            return;
        }
        scenario.free += 1;
        scenario.lock.unlock();
    }

    fn acquire(scenario: *TokenScenario, io_: Io) WaitQueue.WaitError!void {
        scenario.lock.lock();
        if (scenario.free > 0) {
            scenario.free -= 1;
            scenario.lock.unlock();
            return;
        }
        var node: WaitQueue.Node = .{};
        scenario.queue.push(&node);
        scenario.lock.unlock();
        const deadline = Checker.maybeDeadline(io_, scenario.prng.random());
        const code = try scenario.queue.wait(&scenario.lock, io_, &node, deadline);
        assert(code == handed);
    }

    fn acquireAll(scenario: *TokenScenario, io_: Io, index: usize) void {
        while (scenario.acquired[index] < tokens_per_acquirer) {
            scenario.acquire(io_) catch |err| {
                Checker.noteError(io_, err);
                continue; // took nothing: try again
            };
            scenario.acquired[index] += 1;
            Checker.cancelationPoint(io_); // a re-armed request surfaces here
        }
    }

    fn acquirer0(scenario: *TokenScenario, io_: Io) void {
        scenario.acquireAll(io_, 0);
    }

    fn acquirer1(scenario: *TokenScenario, io_: Io) void {
        scenario.acquireAll(io_, 1);
    }

    fn releaser(scenario: *TokenScenario, io_: Io) void {
        for (0..tokens_per_acquirer) |_| scenario.release(io_);
    }

    pub fn check(scenario: *TokenScenario) !void {
        try std.testing.expectEqual(@as(u32, 0), scenario.free);
        try std.testing.expect(scenario.queue.isEmpty());
        for (scenario.acquired) |count| try std.testing.expectEqual(tokens_per_acquirer, count);
    }
};

test "interleave: WaitQueue hand-off, 1000 seeds: no lost wake-up, no token lost or doubled" {
    try Checker.checkSeeds(TokenScenario);
}
