//! A task: one fiber plus what `std.Io` needs around it (its result, its group, its
//! cancelation state, its place in a timer heap and in a futex queue).
//!
//! ## Wait state (`wait_state`), the park/wake protocol
//!
//!   running ──prepareWait──▶ waiting | waiting_cancelable ──wake / cancel──▶ notified
//!      ▲                                  │ abandonWait (nobody woke it yet)      │
//!      └──────────────────────────────────┴────────── resumed by its executor ◀───┘
//!
//! - Only the task itself moves `running → waiting*` and `notified → running`; the task
//!   publishes `waiting*` *before* it registers in any wait queue, so a wake that comes before
//!   the task has switched away is never lost: the waker moves it to `notified` and queues it,
//!   and the task, when it parks, is resumed at once.
//! - Wakers (any thread) move `waiting* → notified` with a CAS; exactly one wins and queues the
//!   task on its executor. A wake that finds `running` or `notified` is dropped; every wait
//!   loops on its own condition, so a dropped or stale wake costs at most a recheck.
//! - A cancel request only wakes `waiting_cancelable`: a task that blocks cancelation (or waits
//!   uncancelably) is never woken by one.
//!
//! ## Cancel state (`cancel_state`)
//!
//!   none ──request──▶ requested ──delivered at a cancelation point──▶ acknowledged
//!                        ▲                                                  │
//!                        └────────────── recancel / another request ◀───────┘
//!
//! ## Where a task runs
//!
//! `executor` is the executor running the task, or the one that ran it last. A parked task may
//! be resumed by any executor of its runtime unless `home` is set (the main task, a task whose
//! I/O operation is in flight on its executor's ring, every task in pinned mode). `on_cpu` is
//! true from the moment an executor resumes the task until the executor that switched away
//! from it has left its stack: no other executor resumes it before (see sched/Executor.zig).
const Task = @This();

const std = @import("std");
const assert = std.debug.assert;
const Io = std.Io;
const atomic = @import("../os/atomic.zig");
const fiber_context = @import("../fiber/context.zig");
const Stack = @import("../fiber/stack.zig").Stack;
const Executor = @import("Executor.zig");
const Waiter = @import("Waiter.zig").Waiter;
const futex = @import("futex.zig");
const Timers = @import("Timers.zig");
const WaitReason = @import("../wait_reason.zig").WaitReason;

context: fiber_context.Context = undefined,
/// The executor running the task or, while it is parked, the one that ran it last. Written by
/// the executor that resumes the task.
executor: *Executor,
/// Set while the task must resume on that executor only. Written by the task itself (or its
/// spawner, before it starts); read by wakers after they won the wake (ordered by `wait_state`).
home: ?*Executor = null,
/// See "Where a task runs" above.
on_cpu: atomic.Value(bool) = .init(false),
/// Null until the task first runs (stacks are taken lazily, so queued tasks cost no stack), or
/// reserved at spawn for `concurrent`.
stack: ?Stack = null,
/// Whether `context` is prepared to start on `stack`. A stack reserved at spawn is prepared only
/// by the executor that first runs the task, so that the first touch of its memory (a page
/// fault, the main cost of spawning many tasks that stay alive) happens there.
context_ready: bool = false,
/// Set while an I/O operation of the task is in flight on its executor's ring
/// (sched/io_wait.zig), which binds it there whatever `home` said before: the watchdog never
/// displaces the main task then (`Scheduler.displaceMain`). Written by the task itself.
waits_for_io: bool = false,
/// Link in a run queue.
next: ?*Task = null,
wait_state: atomic.Value(WaitState) = .init(.running),
cancel_state: atomic.Value(CancelState) = .init(.none),
/// Owned by the task itself.
cancel_protection: Io.CancelProtection = .unblocked,
/// Calls that returned without waiting since the task last yielded (`Executor.cooperate`).
calls_since_yield: u32 = 0,
kind: Kind,

/// What to run, and where its bytes live (all inside `allocation()`).
start: Start = .none,
context_offset: u32 = 0,
result_offset: u32 = 0,
result_len: u32 = 0,
/// The task's own allocation starts at the task; 0 for the main task, which is not allocated.
/// A length and not a slice: the 12 bytes saved keep a task with a small context within 256
/// bytes, the allocator's size class below 512 (the task is 240 bytes: a test pins it).
allocation_len: u32 = 0,

/// Future tasks: 0 while running, then `awaiter_finished`, or the encoded `Waiter` of whoever
/// awaits. The finishing task swaps in `awaiter_finished`: its last touch of this memory.
awaiter: atomic.Value(usize) = .init(0),

/// Group members: the group and the links of its member list (guarded by the group's lock).
group: ?*anyopaque = null,
group_prev: ?*Task = null,
group_next: ?*Task = null,

/// Timer: the deadline (CLOCK_MONOTONIC ns) and where the executor's `Timers` keep it.
timer_deadline_ns: u64 = 0,
timer_place: Timers.Place = .none,
timer_prev: ?*Task = null,
timer_next: ?*Task = null,
/// The executor whose `Timers` hold the task's timer; written by the task itself.
timer_owner: ?*Executor = null,
/// Set by the timer's executor when it fires; read by the task once it runs again.
timer_fired: atomic.Value(bool) = .init(false),

/// The node this task occupies in a futex queue while it waits on one.
futex_node: futex.Node = undefined,

/// What the task waits for while `wait_state` says it waits (a `WaitReason`), written by the
/// task itself in `prepareWait`, before `wait_state` publishes the wait; read by task dumps.
/// Stale while the task runs or is ready: readers look at `wait_state` first.
wait_reason: atomic.Value(u64) = .init(0),
/// The task's slot in its scheduler's `LiveTasks` (id, name, age), set when it is added there.
slot: u32 = 0,

pub const allocation_align = 64;
pub const awaiter_finished = Waiter.awaiter_finished;

pub const WaitState = enum(u8) { running, waiting, waiting_cancelable, notified };
pub const CancelState = enum(u8) { none, requested, acknowledged };
pub const Kind = enum(u8) { main, future, group_member };

pub const Start = union(enum) {
    none,
    future: *const fn (context: *const anyopaque, result: *anyopaque) void,
    group: *const fn (context: *const anyopaque) void,
};

/// The memory that holds the task, its context and its result.
pub fn allocation(task: *Task) []align(allocation_align) u8 {
    assert(task.allocation_len >= @sizeOf(Task));
    const base: [*]align(allocation_align) u8 = @ptrCast(@alignCast(task));
    return base[0..task.allocation_len];
}

pub fn contextPointer(task: *Task) *const anyopaque {
    return @ptrCast(task.allocation()[task.context_offset..].ptr);
}

pub fn resultBytes(task: *Task) []u8 {
    return task.allocation()[task.result_offset..][0..task.result_len];
}

/// Announces that the task is about to park, waiting for `reason`. Must precede registering in
/// any wait queue.
pub fn prepareWait(task: *Task, cancelable: bool, reason: WaitReason) void {
    assert(task.wait_state.load(.monotonic) == .running);
    task.noteReason(reason);
    const can_cancel = cancelable and task.cancel_protection == .unblocked;
    // seq_cst pairs with `requestCancel`: either the requester sees `waiting_cancelable`
    // and wakes us, or we see its request here and wake ourselves.
    task.wait_state.store(if (can_cancel) .waiting_cancelable else .waiting, .seq_cst);
    if (can_cancel and task.cancel_state.load(.seq_cst) == .requested) task.wake();
}

/// The first half of `prepareWait`, for a caller whose next step is a lock: publishes the
/// waiting state with a plain store and returns whether a cancel request may wake the task.
/// The caller takes its lock (a locked read-modify-write, a full barrier on x86 and ordered
/// after a release store on ARMv8) and then calls `recheckCancel`: the lock orders the store
/// before that load, as the seq_cst store of `prepareWait` would, without a second locked
/// instruction on the path of every fiber hand-off.
pub fn announceWait(task: *Task, cancelable: bool, reason: WaitReason) bool {
    assert(task.wait_state.load(.monotonic) == .running);
    task.noteReason(reason);
    const can_cancel = cancelable and task.cancel_protection == .unblocked;
    task.wait_state.store(if (can_cancel) .waiting_cancelable else .waiting, .release);
    return can_cancel;
}

/// Relaxed: the store of `wait_state` that follows (release or stronger) publishes it to a
/// dump that reads that state with acquire.
fn noteReason(task: *Task, reason: WaitReason) void {
    assert(reason.kind != .none);
    task.wait_reason.store(@bitCast(reason), .monotonic);
}

/// What the task waits for, as far as a reader on another thread can tell: see `wait_reason`.
pub fn waitReason(task: *const Task) WaitReason {
    return @bitCast(task.wait_reason.load(.monotonic));
}

/// The second half of `prepareWait`, after the caller's lock (see `announceWait`): either a
/// concurrent `requestCancel` saw the waiting state and woke us, or we see its request here.
pub fn recheckCancel(task: *Task, can_cancel: bool) void {
    if (can_cancel and task.cancel_state.load(.seq_cst) == .requested) task.wake();
}

/// Withdraws a `prepareWait` that turned out unnecessary (the condition was already met).
pub fn abandonWait(task: *Task) void {
    const state = task.wait_state.load(.monotonic);
    assert(state != .running);
    if (state != .notified) {
        if (task.wait_state.cmpxchgStrong(state, .running, .acquire, .monotonic) == null) return;
    }
    // Someone queued us in the meantime: park once to take ourselves off the run queue.
    task.park();
}

/// Switches away until the task is made ready again (see `Executor.park`). The caller must
/// have called `prepareWait` (or queued the task itself, to yield). Re-read `executor` after:
/// the task may continue on another one.
pub fn park(task: *Task) void {
    Executor.park(task);
}

/// Whether the task's timer went off since it was started.
pub fn timerFired(task: *const Task) bool {
    return task.timer_fired.load(.monotonic);
}

/// Thread-safe: makes a waiting task runnable; see the protocol at the top of the file.
pub fn wake(task: *Task) void {
    var state = task.wait_state.load(.acquire);
    while (true) switch (state) {
        .running, .notified => return,
        .waiting, .waiting_cancelable => {
            state = task.wait_state.cmpxchgWeak(state, .notified, .acq_rel, .acquire) orelse {
                task.executor.scheduler.makeReady(task);
                return;
            };
        },
    };
}

/// Thread-safe: requests cancelation; wakes the task if it waits cancelably.
pub fn requestCancel(task: *Task) void {
    task.cancel_state.store(.requested, .seq_cst);
    const wait_state = &task.wait_state;
    if (wait_state.cmpxchgStrong(.waiting_cancelable, .notified, .seq_cst, .monotonic) == null) {
        task.executor.scheduler.makeReady(task);
    }
}

/// The cancelation point: delivers a pending request, exactly once.
pub fn checkCancel(task: *Task) Io.Cancelable!void {
    if (task.cancel_protection == .blocked) return;
    if (task.cancel_state.load(.acquire) != .requested) return;
    if (task.cancel_state.cmpxchgStrong(.requested, .acknowledged, .acq_rel, .monotonic) == null) {
        return error.Canceled;
    }
}

/// Whether a request is pending and would be delivered at a cancelation point now.
pub fn cancelPending(task: *const Task) bool {
    return task.cancel_protection == .unblocked and
        task.cancel_state.load(.acquire) == .requested;
}

pub fn recancel(task: *Task) void {
    const previous = task.cancel_state.swap(.requested, .monotonic);
    assert(previous == .acknowledged); // recancel without a delivered cancelation
}

test "Task: 240 bytes, so that a task with up to 16 bytes of context and result takes 256" {
    // The promise of `allocation_len` above: 256 bytes is the allocator's size class below 512.
    // TSan builds add the sanitizer's fiber handle to `context`.
    const sanitizer_bytes = @sizeOf(fiber_context.Context) - @sizeOf(std.Io.fiber.Context);
    try std.testing.expectEqual(@as(usize, 240 + sanitizer_bytes), @sizeOf(Task));
}
