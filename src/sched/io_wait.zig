//! The bridge from a fiber to its executor's loop: perform one `Completion.Op` while the
//! calling task is parked, as a cancelation point, optionally with a deadline.
//!
//! Protocol (the completion lives on the task's stack, so the task must not return before its
//! callback ran):
//! 1. `prepareWait(cancelable, reason)`, start the deadline timer, submit; park.
//! 2. Resumed: the callback ran (done) → the result. Else the timer fired or a cancel request
//!    is pending → `loop.cancel` the operation and keep waiting, uncancelably, for its
//!    callback. Else a stale wake: wait again.
//! 3. A result of `-ECANCELED` that our own cancel caused becomes `error.Timeout` or
//!    `error.Canceled` (through `checkCancel`, so the request is delivered exactly once). An
//!    operation that completed despite the cancel keeps its result; a pending request is then
//!    seen at the task's next cancelation point.
//!
//! Timeouts use the executor's timer heap plus `loop.cancel`, not io_uring's linked timeouts:
//! one mechanism for both backends, and the same path as a cancel request (rejected: a
//! LINK_TIMEOUT per operation, which epoll would have to emulate with this very code anyway).
//!
//! While the operation is in flight the task is bound to its executor (`Task.home`): the
//! cancel must go to the same ring. One exception: while a task holds that executor for long,
//! the watchdog may reap the completion for it (`Loop.rescue`, docs/STALLS.md) and, through
//! `claimForRescue`, wake the waiting task unbound, onto another executor.
//!
//! On a thread weft does not run, the operation runs directly, blocking the thread in
//! `poll(2)` while the socket is not ready (see `loop/nonblocking.zig`).
const std = @import("std");
const builtin = @import("builtin");
const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};
const assert = std.debug.assert;
const Completion = @import("../loop/Completion.zig");
const nonblocking = @import("../loop/nonblocking.zig");
const Executor = @import("Executor.zig");
const Task = @import("Task.zig");
const WaitReason = @import("../wait_reason.zig").WaitReason;

pub const Error = error{
    /// The task's cancelation was requested and the operation stopped before completing.
    Canceled,
    /// `deadline_ns` passed before the operation completed.
    Timeout,
    /// No memory for the deadline's timer.
    SystemResources,
};

const Pending = struct {
    completion: Completion,
    task: *Task,
    /// The task's `home` before this wait bound it to the executor; restored after.
    home_before: ?*Executor,
    done: bool = false,

    fn callback(completion: *Completion) void {
        const pending: *Pending = @fieldParentPtr("completion", completion);
        assert(!pending.done);
        completion.state = .idle;
        pending.done = true;
        // Nothing of the operation is left on the ring: the main task may move again
        // (`Scheduler.displaceMain`) while its executor is held.
        pending.task.waits_for_io = false;
        pending.task.wake();
    }
};

const Interruption = enum { none, timeout, cancel };

/// `Loop.rescue`'s claim, on the watchdog's thread while the completion's executor is held by
/// another task: delivers the completion if its task waits for it and is bound only by the
/// operation, so the task continues on another executor. Winning the task's wake (its
/// `wait_state`, as any waker) makes this thread the only one to touch it until it is queued:
/// it may not have switched away yet, which the executor that resumes it waits for
/// (`Task.on_cpu`). Declines (the completion then waits for its executor's next poll) a task
/// that runs (it may be reading the completion's state), one already woken (by its timer or a
/// cancel request: it is queued on the held executor), and one bound for good (the main task,
/// pinned mode).
pub fn claimForRescue(completion: *Completion) bool {
    const pending: *Pending = @fieldParentPtr("completion", completion);
    const task = pending.task;
    if (pending.home_before != null) return false;
    const state = task.wait_state.load(.acquire);
    if (state != .waiting and state != .waiting_cancelable) return false;
    if (task.wait_state.cmpxchgStrong(state, .notified, .acq_rel, .monotonic) != null) {
        return false;
    }
    completion.state = .idle;
    pending.done = true;
    task.waits_for_io = false;
    task.home = pending.home_before;
    const scheduler = task.executor.scheduler;
    _ = scheduler.io_rescued.fetchAdd(1, .monotonic);
    // Not from an executor's thread: to the global queue, waking an idle executor.
    scheduler.makeReady(task);
    return true;
}

/// Performs `op` for the caller and returns its result: non-negative on success, `-errno` on
/// failure. Cancelation point (before and while waiting). `deadline_ns` is CLOCK_MONOTONIC.
pub fn perform(op: Completion.Op, deadline_ns: ?u64) Error!i32 {
    var current = op;
    const task = Executor.currentTask() orelse
        return nonblocking.performBlocking(&current, deadline_ns) orelse error.Timeout;
    try task.checkCancel();
    // The task continues where the completion ran it, its executor's CPU permitting: a
    // retired executor hands it on (see Scheduler.zig, "Retiring executors").
    defer Executor.leaveIfRetired(task);
    // Bounded: a kernel that hands EAGAIN back for a non-blocking socket (io_uring before it
    // learned to poll internally) gets one readiness wait per retry, and each retry either
    // completes or waits again; a spurious readiness costs one round.
    while (true) {
        const result = try performOnLoop(task, current, deadline_ns);
        if (result != -@as(i32, @intFromEnum(linux.E.AGAIN)) or !current.triesFirst()) {
            return result;
        }
        const events = nonblocking.interest(current);
        const readiness: Completion.Op = .{ .poll = .{ .fd = current.fd(), .events = events } };
        _ = try performOnLoop(task, readiness, deadline_ns);
    }
}

/// Before the caller closes `fd`: the operations of this thread's loop still waiting on it end
/// with `-ECANCELED`, and an epoll loop forgets the descriptor's registration, so that its
/// number, when reused, starts clean (`Loop.forget`). On a thread weft does not run, nothing.
/// Loops of other executors find out at their next use of the number (backend/epoll.zig).
pub fn closing(fd: linux.fd_t) void {
    const executor = Executor.ofThread() orelse return;
    executor.loop.forget(fd);
}

fn performOnLoop(task: *Task, op: Completion.Op, deadline_ns: ?u64) Error!i32 {
    const executor = task.executor;
    assert(executor.current == task);
    var pending: Pending = .{
        .completion = .{ .op = op, .callback = &Pending.callback },
        .task = task,
        .home_before = task.home,
    };
    task.timer_fired.store(false, .monotonic); // a flag left from an earlier sleep is not ours
    if (deadline_ns) |deadline| {
        Executor.startTimer(task, deadline) catch return error.SystemResources;
    }
    // The operation lives on this executor's ring, and only this thread may submit its
    // cancelation: the task stays here until the callback ran (a wake from elsewhere, a cancel
    // request, routes it back through this executor's injection queue).
    const home_before = pending.home_before;
    assert(home_before == null or home_before == executor);
    task.home = executor;
    task.waits_for_io = true;
    // For `waitid`, which has no descriptor, the process it waits for.
    const fd_or_pid = switch (op) {
        .waitid => |waitid| waitid.pid,
        else => op.fd(),
    };
    const reason: WaitReason = .io(@intFromEnum(std.meta.activeTag(op)), fd_or_pid);
    task.prepareWait(true, reason);
    executor.loop.submit(&pending.completion);
    const interruption = wait(task, &pending, reason);
    // Still here, unless a rescue delivered the completion elsewhere (`claimForRescue`).
    assert(task.executor == executor or task.home == null);
    assert(!task.waits_for_io);
    // Unbound meanwhile (a rescue's claim, or the main task displaced once its operation
    // completed): it stays unbound, wherever it runs now.
    if (task.home != null) task.home = home_before;
    Executor.stopTimer(task);
    assert(pending.done);
    assert(pending.completion.state == .idle);
    const result = pending.completion.result;
    if (result != -@as(i32, @intFromEnum(linux.E.CANCELED))) return result;
    switch (interruption) {
        // Canceled by someone else (another thread closing the loop's view of the fd).
        .none => return result,
        .timeout => return error.Timeout,
        .cancel => {
            try task.checkCancel();
            unreachable; // only this task acknowledges its own pending request
        },
    }
}

/// Parks until the operation's callback ran; cancels the operation first when the timer fires
/// or a cancel request arrives. Returns what interrupted it, if anything.
fn wait(task: *Task, pending: *Pending, reason: WaitReason) Interruption {
    const executor = task.executor;
    var interruption: Interruption = .none;
    while (true) {
        task.park();
        if (pending.done) return interruption;
        assert(task.executor == executor); // bound by `home` until done
        if (interruption == .none) {
            if (task.timerFired()) {
                interruption = .timeout;
            } else if (task.cancelPending()) {
                interruption = .cancel;
            }
            if (interruption != .none) executor.loop.cancel(&pending.completion);
        }
        // After a cancel the callback is near: wait for it uncancelably.
        task.prepareWait(interruption == .none, reason);
    }
}
