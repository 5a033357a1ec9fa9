//! std.Io child-process entries: waiting for and killing a child, natively.
//!
//! `childWait` is a cancelation point that cancels the wait in the kernel:
//! - io_uring 6.7+: one `IORING_OP_WAITID`;
//! - elsewhere (epoll, older kernels, or when resource usage is requested, which waitid
//!   cannot report): a pidfd (Linux 5.3+) becomes readable when the child exits; the task
//!   waits for that as for any readiness, then reaps the child with `wait4(WNOHANG)`;
//! - without pidfds: `wait4` on the blocking lane (cancelable only until a lane thread takes
//!   it).
//!
//! Spawning still runs std.Io.Threaded's code (see delegated.zig); the child it returns is an
//! ordinary process, which these entries wait for and kill.
const std = @import("std");
const Io = std.Io;
const process = std.process;
const Child = process.Child;
const linux = std.os.linux;
const posix = std.posix;
const assert = std.debug.assert;
const Threaded = Io.Threaded;
const errnoBug = Threaded.errnoBug;
const os = @import("../os/linux.zig");
const Executor = @import("../sched/Executor.zig");
const syscall = @import("../fs/syscall.zig");
const Op = @import("../loop/Completion.zig").Op;
const file_io = @import("file.zig");

const blockingOf = file_io.blockingOf;
const errnoOf = file_io.errnoOf;

/// Waits for the child to exit, reaps it and closes its pipes (even when the wait fails or is
/// canceled, as std.Io.Threaded does). Cancelation point.
pub fn childWait(userdata: ?*anyopaque, child: *Child) Child.WaitError!Child.Term {
    defer cleanup(child);
    return waitFor(userdata, child);
}

/// Sends SIGTERM, waits for the child to exit (uncancelably) and cleans up. Never fails: a
/// child that is already gone or cannot be signaled is only cleaned up.
pub fn childKill(userdata: ?*anyopaque, child: *Child) void {
    defer cleanup(child);
    const pid = child.id.?;
    const signaled = while (true) switch (os.errno(linux.kill(pid, .TERM))) {
        .SUCCESS => break true,
        .INTR => continue,
        .PERM => break false,
        .INVAL, .SRCH => |e| {
            errnoBug(e) catch {}; // a bad signal, or a child already reaped: the caller's bug
            break false;
        },
        else => |e| {
            os.unexpectedErrno(e) catch {};
            break false;
        },
    };
    if (!signaled) return;
    const io = file_io.stateOf(userdata).io();
    const protection = io.swapCancelProtection(.blocked);
    defer _ = io.swapCancelProtection(protection);
    _ = waitFor(userdata, child) catch {};
}

fn cleanup(child: *Child) void {
    inline for (.{ "stdin", "stdout", "stderr" }) |name| {
        if (@field(child, name)) |file| os.closeFd(file.handle);
        @field(child, name) = null;
    }
    child.id = null;
}

fn waitFor(userdata: ?*anyopaque, child: *Child) Child.WaitError!Child.Term {
    const pid = child.id.?;
    const rusage_wanted = child.request_resource_usage_statistics;
    if (!rusage_wanted) {
        if (Executor.currentTask()) |task| {
            if (task.executor.loop.supports(.waitid)) return waitId(userdata, pid);
        }
    }
    var usage: linux.rusage = undefined;
    const term = try waitPidFd(userdata, pid, if (rusage_wanted) &usage else null);
    if (rusage_wanted) child.resource_usage_statistics.rusage = usage;
    return term;
}

/// One `IORING_OP_WAITID` on the loop.
fn waitId(userdata: ?*anyopaque, pid: linux.pid_t) Child.WaitError!Child.Term {
    var info: linux.siginfo_t = undefined;
    const blocking, const io = blockingOf(userdata);
    const waitid: Op = .{ .waitid = .{ .pid = pid, .info = &info, .options = linux.W.EXITED } };
    const result = try blocking.perform(io, waitid);
    if (result < 0) return waitError(errnoOf(result));
    const status: u32 = @bitCast(info.fields.common.second.sigchld.status);
    const code: linux.CLD = @enumFromInt(info.code);
    return switch (code) {
        .EXITED => .{ .exited = @truncate(status) },
        .KILLED, .DUMPED => .{ .signal = @enumFromInt(status) },
        .TRAPPED, .STOPPED => .{ .stopped = @enumFromInt(status) },
        _, .CONTINUED => .{ .unknown = status },
    };
}

/// Waits for the child's pidfd to become readable, then reaps it with `wait4`.
fn waitPidFd(
    userdata: ?*anyopaque,
    pid: linux.pid_t,
    usage: ?*linux.rusage,
) Child.WaitError!Child.Term {
    const blocking, const io = blockingOf(userdata);
    const pidfd: ?os.fd_t = while (true) {
        const rc = linux.pidfd_open(pid, 0);
        switch (os.errno(rc)) {
            .SUCCESS => break @intCast(rc),
            .INTR => continue,
            // No pidfds (before 5.3) or none left: wait4 blocks on the lane instead.
            .NOSYS, .MFILE, .NFILE, .NODEV, .NOMEM => break null,
            .SRCH, .INVAL => |e| return errnoBug(e), // not our child, or bad flags
            else => |e| return os.unexpectedErrno(e),
        }
    };
    var status: u32 = 0;
    if (pidfd) |fd| {
        defer os.closeFd(fd);
        const ready = try blocking.perform(io, .{ .poll = .{ .fd = fd, .events = linux.POLL.IN } });
        if (ready < 0) return os.unexpectedErrno(errnoOf(ready));
        const result = syscall.retry(linux.wait4, .{ pid, &status, linux.W.NOHANG, usage });
        if (result < 0) return waitError(errnoOf(result));
        assert(result == pid); // the pidfd said the child exited
    } else {
        const result = try blocking.syscall(io, linux.wait4, .{ pid, &status, 0, usage });
        if (result < 0) return waitError(errnoOf(result));
    }
    return Threaded.statusToTerm(status);
}

fn waitError(e: os.E) Child.WaitError {
    return switch (e) {
        .CHILD => errnoBug(e), // already waited for
        else => os.unexpectedErrno(e),
    };
}
