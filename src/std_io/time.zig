//! std.Io clock and sleep entries, and `deadlineNs`, which turns any `Io.Timeout` into a
//! CLOCK_MONOTONIC deadline for the entries that wait (futex, sleep, net, batch).
const std = @import("std");
const builtin = @import("builtin");
const Io = std.Io;
const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};
const os = @import("../os/linux.zig");
const Executor = @import("../sched/Executor.zig");
const WaitReason = @import("../wait_reason.zig").WaitReason;

/// Converts an `Io.Timeout` to a CLOCK_MONOTONIC deadline; null means no deadline.
/// The clock is read only when there is a deadline: untimed futex waits (every contended
/// Mutex and Condition) are a hot path.
pub fn deadlineNs(timeout: Io.Timeout) ?u64 {
    return switch (timeout) {
        .none => null,
        .duration => |d| addClamped(os.monotonicNs(), d.raw.nanoseconds),
        .deadline => |d| blk: {
            // A deadline on another clock becomes "the same distance from now" on ours.
            const clock_now: i96 = nowNs(d.clock);
            break :blk addClamped(os.monotonicNs(), d.raw.nanoseconds - clock_now);
        },
    };
}

fn addClamped(now_ns: u64, delta_ns: i96) u64 {
    if (delta_ns <= 0) return now_ns;
    return @intCast(@min(@as(i96, now_ns) + delta_ns, std.math.maxInt(u64)));
}

fn nowNs(clock: Io.Clock) i96 {
    return @intCast(os.clockNs(clockId(clock)) orelse 0);
}

fn clockId(clock: Io.Clock) linux.clockid_t {
    return switch (clock) {
        .real => .REALTIME,
        .awake => .MONOTONIC,
        .boot => .BOOTTIME,
        .cpu_process => .PROCESS_CPUTIME_ID,
        .cpu_thread => .THREAD_CPUTIME_ID,
    };
}

pub fn now(userdata: ?*anyopaque, clock: Io.Clock) Io.Timestamp {
    _ = userdata;
    return .{ .nanoseconds = nowNs(clock) };
}

pub fn clockResolution(
    userdata: ?*anyopaque,
    clock: Io.Clock,
) Io.Clock.ResolutionError!Io.Duration {
    _ = userdata;
    var ts: linux.timespec = undefined;
    return switch (os.errno(linux.clock_getres(clockId(clock), &ts))) {
        .SUCCESS => .fromNanoseconds(@as(i96, ts.sec) * std.time.ns_per_s + ts.nsec),
        .INVAL => error.ClockUnavailable,
        else => |e| os.unexpectedErrno(e),
    };
}

/// Cancelation point. `.none` returns at once (0.16 semantics), as do past deadlines.
pub fn sleep(userdata: ?*anyopaque, timeout: Io.Timeout) Io.Cancelable!void {
    _ = userdata;
    const deadline = deadlineNs(timeout) orelse return;
    const task = Executor.currentTask() orelse {
        const now_ns = os.monotonicNs();
        if (deadline > now_ns) os.sleepThread(deadline - now_ns);
        return;
    };
    try task.checkCancel();
    if (deadline <= os.monotonicNs()) return;
    const reason: WaitReason = .sleep(deadline);
    task.prepareWait(true, reason);
    Executor.startTimer(task, deadline) catch {
        // No memory for the timer: sleep on the thread rather than fail the sleep.
        task.abandonWait();
        os.sleepThread(deadline -| os.monotonicNs());
        return;
    };
    while (true) {
        task.park();
        if (task.timerFired()) {
            Executor.stopTimer(task); // only forgets which executor held it
            return;
        }
        if (task.cancelPending()) {
            Executor.stopTimer(task);
            return task.checkCancel();
        }
        task.prepareWait(true, reason); // a stale wake: keep sleeping
    }
}
