//! std.Io futex, time and randomness entries.
const std = @import("std");
const Io = std.Io;
const linux = std.os.linux;
const os = @import("../os/linux.zig");
const futex = @import("../sched/futex.zig");
const Executor = @import("../sched/Executor.zig");

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

pub fn futexWait(userdata: ?*anyopaque, ptr: *const u32, expected: u32, timeout: Io.Timeout) Io.Cancelable!void {
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

pub fn now(userdata: ?*anyopaque, clock: Io.Clock) Io.Timestamp {
    _ = userdata;
    return .{ .nanoseconds = nowNs(clock) };
}

pub fn clockResolution(userdata: ?*anyopaque, clock: Io.Clock) Io.Clock.ResolutionError!Io.Duration {
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
    task.prepareWait(true);
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
        task.prepareWait(true); // a stale wake: keep sleeping
    }
}

const Csprng = std.Random.DefaultCsprng;
threadlocal var csprng: ?Csprng = null;

/// A per-thread CSPRNG seeded from the kernel (time and address as a last resort).
pub fn random(userdata: ?*anyopaque, buffer: []u8) void {
    if (csprng == null) {
        @branchHint(.unlikely);
        var seed: [Csprng.secret_seed_length]u8 = undefined;
        os.getRandom(&seed) catch {
            @memset(&seed, 0);
            std.mem.writeInt(u64, seed[0..8], os.monotonicNs(), .native);
            std.mem.writeInt(usize, seed[8..][0..@sizeOf(usize)], @intFromPtr(userdata), .native);
        };
        csprng = .init(seed);
    }
    csprng.?.fill(buffer);
}

pub fn randomSecure(userdata: ?*anyopaque, buffer: []u8) Io.RandomSecureError!void {
    _ = userdata;
    if (Executor.currentTask()) |task| try task.checkCancel();
    os.getRandom(buffer) catch return error.EntropyUnavailable;
}
