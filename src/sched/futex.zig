//! Futex wait queues for fibers and foreign OS threads alike.
//!
//! A fixed table of buckets, each a lock and a doubly linked list of waiting nodes. A waiter
//! checks the value and enqueues itself under the bucket lock, and a waker dequeues and wakes
//! under the same lock, so no wake between "check" and "sleep" is lost (the kernel futex
//! contract). A fiber's node lives in its Task; a thread's node lives on its stack.
const std = @import("std");
const assert = std.debug.assert;
const Io = std.Io;
const config = @import("../config.zig");
const os = @import("../os/linux.zig");
const atomic = @import("../os/atomic.zig");
const Task = @import("Task.zig");
const Executor = @import("Executor.zig");
const waiter_mod = @import("Waiter.zig");
const Waiter = waiter_mod.Waiter;
const ThreadWaiter = waiter_mod.ThreadWaiter;
const wait_reason = @import("../wait_reason.zig");
const WaitReason = wait_reason.WaitReason;

pub const Node = struct {
    address: usize,
    /// `Waiter.encode`d: one word, where the union took two (eight bytes of every `Task`).
    waiter: usize,
    prev: ?*Node = null,
    next: ?*Node = null,
    linked: bool = false,
};

const Bucket = struct {
    /// A spin lock, not `os.Mutex`: held for a few list operations and a wake, taken twice per
    /// fiber hand-off, and never across a switch (see os/SpinLock.zig). Through the shim
    /// (os/atomic.zig: os/SpinLock.zig itself outside tests), as are the atomic accesses below.
    mutex: atomic.Lock = .{},
    head: ?*Node = null,
    tail: ?*Node = null,

    fn append(bucket: *Bucket, node: *Node) void {
        assert(!node.linked);
        node.prev = bucket.tail;
        node.next = null;
        if (bucket.tail) |tail| tail.next = node else bucket.head = node;
        bucket.tail = node;
        node.linked = true;
    }

    fn unlink(bucket: *Bucket, node: *Node) void {
        assert(node.linked);
        if (node.prev) |prev| prev.next = node.next else bucket.head = node.next;
        if (node.next) |next| next.prev = node.prev else bucket.tail = node.prev;
        node.prev = null;
        node.next = null;
        // Read without the lock by a waiting task after it resumes (see `waitTask`).
        atomic.step();
        @atomicStore(bool, &node.linked, false, .release);
    }
};

/// One table per process: a futex word may be shared by tasks of several runtimes and by
/// plain threads, and must always hash to the same queue.
var buckets: [config.futex_buckets]Bucket = @splat(.{});

fn bucketOf(address: usize) *Bucket {
    // Fibonacci hashing spreads neighbouring words (fields of one struct) over buckets.
    const hash = (address >> 2) *% 0x9E3779B97F4A7C15;
    return &buckets[hash >> (64 - @ctz(@as(u64, config.futex_buckets)))];
}

/// Blocks while `ptr.* == expected`, until a wake, `deadline_ns` (CLOCK_MONOTONIC) or, when
/// `cancelable`, a cancel request (`error.Canceled`). Spurious returns are allowed.
pub fn wait(
    ptr: *const u32,
    expected: u32,
    deadline_ns: ?u64,
    cancelable: bool,
) Io.Cancelable!void {
    if (Executor.currentTask()) |task| {
        return waitTask(task, ptr, expected, deadline_ns, cancelable);
    }
    waitThread(ptr, expected, deadline_ns);
}

fn waitTask(
    task: *Task,
    ptr: *const u32,
    expected: u32,
    deadline_ns: ?u64,
    cancelable: bool,
) Io.Cancelable!void {
    // Taken first, so that no return path leaves it for another wait on this thread.
    const reason = wait_reason.takeLabel() orelse WaitReason.at(.futex, @intFromPtr(ptr));
    if (cancelable) try task.checkCancel();
    const bucket = bucketOf(@intFromPtr(ptr));
    const node = &task.futex_node;
    node.* = .{ .address = @intFromPtr(ptr), .waiter = Waiter.encode(.{ .task = task }) };

    // Announced before the lock, whose swap orders it before the cancel check below: one
    // locked instruction per wait instead of two (they are most of a fiber hand-off's cost).
    const can_cancel = task.announceWait(cancelable, reason);
    bucket.mutex.lock();
    atomic.step();
    if (@atomicLoad(u32, ptr, .acquire) != expected) {
        bucket.mutex.unlock();
        task.abandonWait();
        return;
    }
    task.recheckCancel(can_cancel);
    bucket.append(node);
    bucket.mutex.unlock();

    if (deadline_ns) |deadline| Executor.startTimer(task, deadline) catch {
        // No memory for the timer: return at once, which the futex contract allows.
        bucket.mutex.lock();
        if (node.linked) bucket.unlink(node);
        bucket.mutex.unlock();
        task.abandonWait();
        return;
    };
    defer Executor.stopTimer(task);

    while (true) {
        task.park();
        // Fast path: dequeued by `wake`, which woke us and then cleared `linked` as its last
        // touch of our node and task (release; see `wake`). Checked without the bucket lock:
        // seen false, nobody touches the task any more, and it may return and end.
        atomic.step();
        if (!@atomicLoad(bool, &node.linked, .acquire)) return;
        bucket.mutex.lock();
        if (!node.linked) {
            // Dequeued by `wake`: a real wake-up, even if a cancel request came too (it stays
            // pending for the next cancelation point, as with the kernel futex).
            bucket.mutex.unlock();
            return;
        }
        if (cancelable and task.cancelPending()) {
            bucket.unlink(node);
            bucket.mutex.unlock();
            return task.checkCancel();
        }
        if (task.timerFired()) {
            bucket.unlink(node);
            bucket.mutex.unlock();
            return;
        }
        // A stale wake: wait again.
        task.prepareWait(cancelable, reason);
        bucket.mutex.unlock();
    }
}

fn waitThread(ptr: *const u32, expected: u32, deadline_ns: ?u64) void {
    var thread: ThreadWaiter = .{};
    var node: Node = .{
        .address = @intFromPtr(ptr),
        .waiter = Waiter.encode(.{ .thread = &thread }),
    };
    const bucket = bucketOf(@intFromPtr(ptr));
    bucket.mutex.lock();
    atomic.step();
    if (@atomicLoad(u32, ptr, .acquire) != expected) {
        bucket.mutex.unlock();
        return;
    }
    bucket.append(&node);
    bucket.mutex.unlock();

    if (thread.wait(deadline_ns)) return;
    bucket.mutex.lock();
    defer bucket.mutex.unlock();
    if (node.linked) bucket.unlink(&node);
}

/// Wakes up to `waiters_max` waiters on `ptr`, oldest first.
pub fn wake(ptr: *const u32, waiters_max: u32) void {
    if (waiters_max == 0) return;
    const address = @intFromPtr(ptr);
    const bucket = bucketOf(address);
    var woken: u32 = 0;
    bucket.mutex.lock();
    defer bucket.mutex.unlock();
    var cursor = bucket.head;
    while (cursor) |node| {
        if (woken == waiters_max) break;
        cursor = node.next;
        if (node.address != address) continue;
        // Each kind of waiter gets our last touch of its node at the moment it may leave.
        // A task: wake, then unlink, whose release store of `linked = false` is the last
        // touch: a task resumed by something else meanwhile (its timer, a cancel) that saw
        // `linked` already false on its lock-free fast path could return, end and be freed
        // while we still called `wake` on it (found by the TSan build: `destroyTask` freeing
        // what this loop read). Woken first, it sees `linked` true and waits for our lock.
        // A thread: unlink, then wake, the last touch: it returns as soon as it is woken,
        // and its node lives on its stack.
        if (Waiter.decodeTask(node.waiter)) |task| {
            task.wake();
            bucket.unlink(node);
        } else {
            const waiter = Waiter.decode(node.waiter);
            bucket.unlink(node);
            waiter.wake();
        }
        woken += 1;
    }
}

test "futex: value mismatch returns at once; timeout returns normally (thread)" {
    var word: u32 = 1;
    try wait(&word, 0, null, true);
    const start_ns = os.monotonicNs();
    try wait(&word, 1, start_ns + 2 * std.time.ns_per_ms, true);
    try std.testing.expect(os.monotonicNs() - start_ns >= 2 * std.time.ns_per_ms);
}

test "futex: wake reaches a waiting OS thread" {
    var word = std.atomic.Value(u32).init(0);
    const Waker = struct {
        fn run(w: *std.atomic.Value(u32)) void {
            os.sleepThread(std.time.ns_per_ms);
            w.store(1, .release);
            wake(&w.raw, 1);
        }
    };
    const thread = try std.Thread.spawn(.{}, Waker.run, .{&word});
    while (word.load(.acquire) == 0) try wait(&word.raw, 0, null, false);
    thread.join();
}
