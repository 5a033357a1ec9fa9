//! Test helpers: wait until a task is parked in its blocking operation (a state, not a time).
//!
//! A test that cancels a task "once it has blocked" must not sleep a fixed time first: if the
//! task has not reached its wait by then (a loaded machine, TSan, more executors than cores),
//! the request is delivered at the first cancelation point on its way, `error.Canceled` comes
//! back all the same, and the test passes without canceling a blocked operation. These
//! helpers poll the task's own wait state instead (see "Wait state" in sched/Task.zig), with a
//! deadline: a task that never parks as expected fails the test by name instead of hanging it.
//!
//! They panic at the deadline rather than return an error: the task is then stuck where the
//! test cannot reclaim it (a cancel might never return), and `Runtime.deinit` would either
//! panic on the live task or wait for it, burying the reason under a second failure.
const std = @import("std");
const Io = std.Io;
const Task = @import("../sched/Task.zig");
const task_io = @import("../std_io/task.zig");
const os = @import("../os/linux.zig");

/// How the task is expected to wait: `cancelable` where a cancel request wakes it (a blocking
/// operation that is a cancelation point), `uncancelable` where none does (cancelation
/// blocked, or an uncancelable wait), `either` where the operation may be in both (a file
/// call on the blocking lane: cancelable until a worker takes it, then not).
pub const Wait = enum { cancelable, uncancelable, either };

/// Generous: a task that is merely slow to start (a loaded machine, TSan) parks well within it.
const deadline_ns = 10 * std.time.ns_per_s;
const poll_ns = 20 * std.time.ns_per_us;

/// Waits until the task of `future` (a `*Io.Future(T)` from `concurrent`, not yet awaited) is
/// parked as `wait` says; panics if it is not within 10 s.
pub fn waitParked(io: Io, future: anytype, wait: Wait) Io.Cancelable!void {
    return waitTaskParked(io, task_io.taskOf(future.any_future.?), wait);
}

/// What `waitParkedOrFinished` found.
pub const Outcome = enum { parked, finished };

/// `waitParked` for an operation the kernel may complete before the test looks (a read that
/// took the async path can be answered at once, and a loaded machine delays the look):
/// `.finished` if the task ended instead of parking, so that the test takes that branch (a
/// cancel then returns the result) rather than panic after 10 s.
pub fn waitParkedOrFinished(io: Io, future: anytype, wait: Wait) Io.Cancelable!Outcome {
    const task = task_io.taskOf(future.any_future.?);
    const start_ns = os.monotonicNs();
    while (!parked(task, wait)) {
        if (task.awaiter.load(.acquire) == Task.awaiter_finished) return .finished;
        if (os.monotonicNs() - start_ns > deadline_ns) {
            std.debug.panic("task neither parked {t} nor finished within 10 s: wait state " ++
                "{t}, on a CPU: {}", .{
                wait,
                task.wait_state.load(.acquire),
                task.on_cpu.load(.acquire),
            });
        }
        try io.sleep(.fromNanoseconds(poll_ns), .awake);
    }
    return .parked;
}

/// `waitParked` for a task known otherwise (the main task, from a foreign thread: there `io`
/// sleeps the thread and is never canceled).
pub fn waitTaskParked(io: Io, task: *const Task, wait: Wait) Io.Cancelable!void {
    const start_ns = os.monotonicNs();
    while (!parked(task, wait)) {
        if (os.monotonicNs() - start_ns > deadline_ns) {
            std.debug.panic("task never parked {t} within 10 s: wait state {t}, on a CPU: {}", .{
                wait,
                task.wait_state.load(.acquire),
                task.on_cpu.load(.acquire),
            });
        }
        try io.sleep(.fromNanoseconds(poll_ns), .awake);
    }
}

/// Whether the task of `future` (not yet awaited) is parked as `wait` says, now: for a test
/// that checks a task was left parked by something that would have woken it before
/// returning.
pub fn isParked(future: anytype, wait: Wait) bool {
    return parked(task_io.taskOf(future.any_future.?), wait);
}

/// Waits until `group` has exactly `count` members, each parked as `wait` says; panics if it
/// has not within 10 s.
pub fn waitMembersParked(io: Io, group: *Io.Group, count: usize, wait: Wait) Io.Cancelable!void {
    const start_ns = os.monotonicNs();
    while (true) {
        const seen = membersParked(group, wait);
        if (seen.listed == count and seen.parked == count) return;
        if (os.monotonicNs() - start_ns > deadline_ns) {
            std.debug.panic("group members never parked {t} within 10 s: " ++
                "{d} members listed, {d} parked, {d} expected", .{
                wait,
                seen.listed,
                seen.parked,
                count,
            });
        }
        try io.sleep(.fromNanoseconds(poll_ns), .awake);
    }
}

/// Parked: the task has published its waiting state (before registering in any wait queue; a
/// wake moves it on to `notified`) and its executor has left its stack. A task not yet run is
/// `running`, its initial state, so it does not count.
fn parked(task: *const Task, wait: Wait) bool {
    const state = task.wait_state.load(.acquire);
    const waiting = switch (wait) {
        .cancelable => state == .waiting_cancelable,
        .uncancelable => state == .waiting,
        .either => state == .waiting_cancelable or state == .waiting,
    };
    return waiting and !task.on_cpu.load(.acquire);
}

const Members = struct { listed: usize = 0, parked: usize = 0 };

fn membersParked(group: *Io.Group, wait: Wait) Members {
    var members: Members = .{};
    const token = group.token.load(.acquire) orelse return members;
    const group_state: *task_io.GroupState = @ptrCast(@alignCast(token));
    // The member list is guarded by the group's lock; a member leaves it as it finishes.
    group_state.mutex.lock();
    defer group_state.mutex.unlock();
    var cursor = group_state.members;
    while (cursor) |member| : (cursor = member.group_next) {
        members.listed += 1;
        if (parked(member, wait)) members.parked += 1;
    }
    return members;
}
