//! std.Io futex entries: the futex table of sched/futex.zig, which serves tasks and plain OS
//! threads alike. std's Mutex, Condition, RwLock, Semaphore, Event and Queue build on them.
const std = @import("std");
const Io = std.Io;
const futex = @import("../sched/futex.zig");
const deadlineNs = @import("time.zig").deadlineNs;

pub fn futexWait(
    userdata: ?*anyopaque,
    ptr: *const u32,
    expected: u32,
    timeout: Io.Timeout,
) Io.Cancelable!void {
    _ = userdata;
    return futex.wait(ptr, expected, deadlineNs(timeout), true);
}

pub fn futexWaitUncancelable(userdata: ?*anyopaque, ptr: *const u32, expected: u32) void {
    _ = userdata;
    futex.wait(ptr, expected, null, false) catch unreachable; // uncancelable
}

pub fn futexWake(userdata: ?*anyopaque, ptr: *const u32, max_waiters: u32) void {
    _ = userdata;
    futex.wake(ptr, max_waiters);
}
