//! std.Io tasks: `async`, `concurrent`, `await`, `cancel`, the group entries, and the
//! cancelation entries. Each VTable function is named like its field and stays thin.
const std = @import("std");
const assert = std.debug.assert;
const Io = std.Io;
const Alignment = std.mem.Alignment;
const Executor = @import("../sched/Executor.zig");
const Task = @import("../sched/Task.zig");
const waiter_mod = @import("../sched/Waiter.zig");
const Waiter = waiter_mod.Waiter;
const ThreadWaiter = waiter_mod.ThreadWaiter;
const Mutex = @import("../os/Mutex.zig");
const WaitReason = @import("../wait_reason.zig").WaitReason;

const State = @import("State.zig");

fn stateOf(userdata: ?*anyopaque) *State {
    return @ptrCast(@alignCast(userdata.?));
}

pub fn async(
    userdata: ?*anyopaque,
    result: []u8,
    result_alignment: Alignment,
    context: []const u8,
    context_alignment: Alignment,
    start: *const fn (context: *const anyopaque, result: *anyopaque) void,
) ?*Io.AnyFuture {
    const state = stateOf(userdata);
    const task = state.createTask(
        .future,
        context,
        context_alignment,
        result.len,
        result_alignment,
    ) catch {
        // No unit of concurrency to give: run it now, which the contract allows.
        start(context.ptr, result.ptr);
        return null;
    };
    task.start = .{ .future = start };
    state.start(task, .child_first);
    return @ptrCast(task);
}

pub fn concurrent(
    userdata: ?*anyopaque,
    result_len: usize,
    result_alignment: Alignment,
    context: []const u8,
    context_alignment: Alignment,
    start: *const fn (context: *const anyopaque, result: *anyopaque) void,
) Io.ConcurrentError!*Io.AnyFuture {
    const state = stateOf(userdata);
    const task = try state.createTaskConcurrent(
        .future,
        context,
        context_alignment,
        result_len,
        result_alignment,
    );
    task.start = .{ .future = start };
    state.start(task, .spread);
    return @ptrCast(task);
}

pub fn await(userdata: ?*anyopaque, any_future: *Io.AnyFuture, result: []u8, _: Alignment) void {
    awaitFuture(stateOf(userdata), taskOf(any_future), result, false);
}

pub fn cancel(userdata: ?*anyopaque, any_future: *Io.AnyFuture, result: []u8, _: Alignment) void {
    awaitFuture(stateOf(userdata), taskOf(any_future), result, true);
}

/// The task behind a future that `async` or `concurrent` handed out: the future is the task.
pub fn taskOf(any_future: *Io.AnyFuture) *Task {
    return @ptrCast(@alignCast(any_future));
}

fn awaitFuture(state: *State, child: *Task, result: []u8, cancel_first: bool) void {
    assert(child.kind == .future);
    if (cancel_first) child.requestCancel();
    if (Executor.currentTask()) |me| {
        awaitFromTask(me, child);
    } else {
        var thread: ThreadWaiter = .{};
        const waiter = Waiter.encode(.{ .thread = &thread });
        if (child.awaiter.cmpxchgStrong(0, waiter, .acq_rel, .acquire)) |previous| {
            assert(previous == Task.awaiter_finished);
        } else {
            _ = thread.wait(null);
            assert(child.awaiter.load(.acquire) == Task.awaiter_finished);
        }
    }
    @memcpy(result, child.resultBytes());
    state.destroyTask(child);
}

/// Waits for `child` to finish. A cancel request on the awaiter is forwarded to the child
/// (as std.Io.Threaded does); if the child does not acknowledge it, it is re-armed on us.
fn awaitFromTask(me: *Task, child: *Task) void {
    var forwarded = false;
    const reason: WaitReason = .at(.await, @intFromPtr(child));
    me.prepareWait(true, reason);
    const waiter = Waiter.encode(.{ .task = me });
    if (child.awaiter.cmpxchgStrong(0, waiter, .acq_rel, .acquire)) |previous| {
        assert(previous == Task.awaiter_finished);
        me.abandonWait();
        return;
    }
    while (true) {
        me.park();
        if (child.awaiter.load(.acquire) == Task.awaiter_finished) break;
        if (!forwarded and me.cancelPending()) {
            me.checkCancel() catch {};
            forwarded = true;
            child.requestCancel();
        }
        me.prepareWait(!forwarded, reason);
        if (child.awaiter.load(.acquire) == Task.awaiter_finished) {
            me.abandonWait();
            break;
        }
    }
    if (forwarded and child.cancel_state.load(.acquire) != .acknowledged) me.recancel();
}

/// Ends a future task: publishes its result and wakes whoever awaits it.
pub fn finishFuture(task: *Task) void {
    // acq_rel: releases the result to the awaiter; this swap is our last touch of `task`.
    const previous = task.awaiter.swap(Task.awaiter_finished, .acq_rel);
    if (previous != 0) Waiter.decode(previous).wake();
}

// ---------------------------------------------------------------------------------------------
// Groups. `Group.token` points at a `GroupState`, created by the first member and freed by
// `groupAwait`/`groupCancel` once the group is empty (they must leave the token null).

pub const GroupState = struct {
    mutex: Mutex = .{},
    members: ?*Task = null,
    running: usize = 0,
    canceled: bool = false,
    awaiter: ?Waiter = null,
};

fn groupState(state: *State, group: *Io.Group) error{OutOfMemory}!*GroupState {
    if (group.token.load(.acquire)) |token| return @ptrCast(@alignCast(token));
    const fresh = try state.gpa.create(GroupState);
    fresh.* = .{};
    if (group.token.cmpxchgStrong(null, fresh, .acq_rel, .acquire)) |existing| {
        state.gpa.destroy(fresh);
        return @ptrCast(@alignCast(existing.?));
    }
    return fresh;
}

fn addMember(group_state: *GroupState, task: *Task) void {
    group_state.mutex.lock();
    defer group_state.mutex.unlock();
    task.group = group_state;
    task.group_next = group_state.members;
    if (group_state.members) |head| head.group_prev = task;
    group_state.members = task;
    group_state.running += 1;
    // Members spawned while the group is being canceled start canceled.
    if (group_state.canceled) task.cancel_state.store(.requested, .release);
}

pub fn groupAsync(
    userdata: ?*anyopaque,
    group: *Io.Group,
    context: []const u8,
    context_alignment: Alignment,
    start: *const fn (context: *const anyopaque) void,
) void {
    const state = stateOf(userdata);
    const task = state.createTask(.group_member, context, context_alignment, 0, .@"1") catch
        return start(context.ptr);
    const group_state = groupState(state, group) catch {
        state.destroyTask(task);
        return start(context.ptr);
    };
    task.start = .{ .group = start };
    addMember(group_state, task);
    state.start(task, .child_first);
}

pub fn groupConcurrent(
    userdata: ?*anyopaque,
    group: *Io.Group,
    context: []const u8,
    context_alignment: Alignment,
    start: *const fn (context: *const anyopaque) void,
) Io.ConcurrentError!void {
    const state = stateOf(userdata);
    const task =
        try state.createTaskConcurrent(.group_member, context, context_alignment, 0, .@"1");
    const group_state = groupState(state, group) catch {
        state.destroyUnstarted(task);
        return error.ConcurrencyUnavailable;
    };
    task.start = .{ .group = start };
    addMember(group_state, task);
    state.start(task, .spread);
}

/// Ends a group member: leaves the member list and wakes the awaiter of an emptied group.
pub fn finishGroupMember(task: *Task) void {
    const group_state: *GroupState = @ptrCast(@alignCast(task.group.?));
    group_state.mutex.lock();
    defer group_state.mutex.unlock();
    if (task.group_prev) |prev| {
        prev.group_next = task.group_next;
    } else {
        group_state.members = task.group_next;
    }
    if (task.group_next) |next| next.group_prev = task.group_prev;
    assert(group_state.running > 0);
    group_state.running -= 1;
    // Woken under the lock: the awaiter frees the group state only after taking the lock.
    if (group_state.running == 0) if (group_state.awaiter) |waiter| waiter.wake();
}

pub fn groupAwait(userdata: ?*anyopaque, group: *Io.Group, token: *anyopaque) Io.Cancelable!void {
    _ = token;
    return waitGroup(stateOf(userdata), group, false);
}

pub fn groupCancel(userdata: ?*anyopaque, group: *Io.Group, token: *anyopaque) void {
    _ = token;
    waitGroup(stateOf(userdata), group, true) catch unreachable; // cancel waits uncancelably
}

fn cancelMembers(group_state: *GroupState) void {
    group_state.canceled = true;
    var cursor = group_state.members;
    while (cursor) |member| : (cursor = member.group_next) member.requestCancel();
}

fn waitGroup(state: *State, group: *Io.Group, cancel_members: bool) Io.Cancelable!void {
    const group_state: *GroupState = @ptrCast(@alignCast(group.token.load(.acquire).?));
    var canceled_awaiter = false;
    const me = Executor.currentTask();
    var thread: ThreadWaiter = .{};
    group_state.mutex.lock();
    if (cancel_members) cancelMembers(group_state);
    while (group_state.running > 0) {
        if (me) |task| {
            group_state.awaiter = .{ .task = task };
            const reason: WaitReason = .at(.group, @intFromPtr(group_state));
            task.prepareWait(!cancel_members and !canceled_awaiter, reason);
            group_state.mutex.unlock();
            task.park();
            group_state.mutex.lock();
            const members_to_cancel = group_state.running > 0 and !canceled_awaiter and
                !cancel_members;
            if (members_to_cancel and task.cancelPending()) {
                // Canceled while awaiting: cancel every member, wait for all, report Canceled.
                task.checkCancel() catch {};
                canceled_awaiter = true;
                cancelMembers(group_state);
            }
        } else {
            thread = .{};
            group_state.awaiter = .{ .thread = &thread };
            group_state.mutex.unlock();
            _ = thread.wait(null);
            group_state.mutex.lock();
        }
    }
    group_state.mutex.unlock();
    assert(group_state.members == null);
    group.token.store(null, .release);
    state.gpa.destroy(group_state);
    if (canceled_awaiter) return error.Canceled;
}

// ---------------------------------------------------------------------------------------------
// Cancelation entries. On threads weft does not run there is no task to cancel: like
// std.Io.Threaded's non-pool threads, they are never canceled.

pub fn recancel(userdata: ?*anyopaque) void {
    _ = userdata;
    const task = Executor.currentTask() orelse unreachable; // recancel outside a canceled task
    task.recancel();
}

pub fn swapCancelProtection(userdata: ?*anyopaque, new: Io.CancelProtection) Io.CancelProtection {
    _ = userdata;
    const task = Executor.currentTask() orelse return .unblocked;
    const old = task.cancel_protection;
    task.cancel_protection = new;
    return old;
}

/// A cancelation point that also yields now and then, so a CPU loop that checks for
/// cancelation does not starve the other tasks of its executor.
pub fn checkCancel(userdata: ?*anyopaque) Io.Cancelable!void {
    _ = userdata;
    const task = Executor.currentTask() orelse return;
    try task.checkCancel();
    if (Executor.cooperate(task)) try task.checkCancel();
}

pub fn crashHandler(userdata: ?*anyopaque) void {
    _ = userdata;
    // The panic printer may call the Io: nothing it calls may report Canceled.
    const task = Executor.currentTask() orelse return;
    task.cancel_protection = .blocked;
}
