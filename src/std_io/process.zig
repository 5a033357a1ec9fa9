//! std.Io process entries: waiting for and killing a child, the working directory, the
//! executable's path, the progress pipe, and the stderr lock. (Spawning and replacing the
//! process image: spawn.zig.)
//!
//! `childWait` is a cancelation point that cancels the wait in the kernel:
//! - io_uring 6.7+: one `IORING_OP_WAITID`;
//! - elsewhere (epoll, older kernels, or when resource usage is requested, which waitid
//!   cannot report): a pidfd (Linux 5.3+) becomes readable when the child exits; the task
//!   waits for that as for any readiness, then reaps the child with `wait4(WNOHANG)`;
//! - without pidfds: `wait4` on the blocking lane (cancelable only until a lane thread takes
//!   it).
//!
//! The working directory and the executable's path are direct syscalls (`getcwd`, `fchdir`,
//! `readlinkat` of `/proc/self/exe`: none waits for a device), except `chdir` by path, which
//! resolves a path and so runs on the blocking lane (the lane's threads share the process's
//! working directory). Errors are std.Io.Threaded's, errno for errno.
//!
//! `lockStderr` is a fiber-aware lock (`ProcessState.Stderr`): a task may hold it across a
//! park and resume on another executor thread. Like Threaded's it is re-entrant for its holder
//! (the task, or a thread weft does not run) and not a cancelation point.
const std = @import("std");
const builtin = @import("builtin");
const Io = std.Io;
const process = std.process;
const Child = process.Child;
const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};
const posix = std.posix;
const assert = std.debug.assert;
const Threaded = Io.Threaded;
const errnoBug = os.errnoBug;
const os = @import("../os/linux.zig");
const Executor = @import("../sched/Executor.zig");
const syscall = @import("../fs/syscall.zig");
const Op = @import("../loop/Completion.zig").Op;
const file_io = @import("file.zig");
const fs_file = @import("../fs/file.zig");

const dir_io = @import("dir.zig");
const fs_errno = @import("../fs/errno.zig");
const ProcessState = @import("ProcessState.zig");
const Task = @import("../sched/Task.zig");

const blockingOf = file_io.blockingOf;
const Dir = Io.Dir;
const File = Io.File;
const errnoOf = fs_errno.errnoOf;

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

/// Reaps a child that exits on its own (one whose spawn failed after the fork), uncancelably.
pub fn reapExited(userdata: ?*anyopaque, pid: linux.pid_t) void {
    const io = file_io.stateOf(userdata).io();
    const protection = io.swapCancelProtection(.blocked);
    defer _ = io.swapCancelProtection(protection);
    var child: Child = .{
        .id = pid,
        .thread_handle = {},
        .stdin = null,
        .stdout = null,
        .stderr = null,
        .request_resource_usage_statistics = false,
    };
    _ = waitFor(userdata, &child) catch {};
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

fn processOf(userdata: ?*anyopaque) *ProcessState {
    return &file_io.stateOf(userdata).process;
}

/// `getcwd`: the kernel copies a path it already holds. Cancelation point.
pub fn processCurrentPath(userdata: ?*anyopaque, buffer: []u8) process.CurrentPathError!usize {
    _ = userdata;
    try fs_file.checkCancel();
    return switch (os.errno(linux.getcwd(buffer.ptr, buffer.len))) {
        .SUCCESS => std.mem.findScalar(u8, buffer, 0).?,
        .NOENT => error.CurrentDirUnlinked,
        .RANGE => error.NameTooLong,
        .FAULT, .INVAL => |e| errnoBug(e),
        else => |e| os.unexpectedErrno(e),
    };
}

/// `fchdir` (no path to resolve). Cancelation point.
pub fn processSetCurrentDir(userdata: ?*anyopaque, dir: Dir) process.SetCurrentDirError!void {
    _ = userdata;
    try fs_file.checkCancel();
    return fchdir(dir.handle);
}

/// `fchdir` with std.Io.Threaded's errors; `AT_FDCWD` changes nothing. Also used by spawn.zig.
pub fn fchdir(fd: posix.fd_t) Threaded.FchdirError!void {
    if (fd == linux.AT.FDCWD) return;
    while (true) switch (os.errno(linux.fchdir(fd))) {
        .SUCCESS => return,
        .INTR => continue,
        .ACCES => return error.AccessDenied,
        .NOTDIR => return error.NotDir,
        .IO => return error.FileSystem,
        .BADF => |e| return errnoBug(e),
        else => |e| return os.unexpectedErrno(e),
    };
}

/// `chdir` on the blocking lane: resolving the path may wait for the file system.
pub fn processSetCurrentPath(
    userdata: ?*anyopaque,
    path: []const u8,
) process.SetCurrentPathError!void {
    var path_buffer: [posix.PATH_MAX]u8 = undefined;
    const path_z = try Threaded.pathToPosix(path, &path_buffer);
    const blocking, const io = blockingOf(userdata);
    const result = try blocking.syscall(io, linux.chdir, .{path_z.ptr});
    if (result >= 0) return;
    return chdirError(errnoOf(result));
}

pub fn chdirError(e: os.E) Threaded.ChdirError {
    return switch (e) {
        .ACCES => error.AccessDenied,
        .IO => error.FileSystem,
        .LOOP => error.SymLinkLoop,
        .NAMETOOLONG => error.NameTooLong,
        .NOENT => error.FileNotFound,
        .NOMEM => error.SystemResources,
        .NOTDIR => error.NotDir,
        .ILSEQ => error.BadPathName,
        .FAULT => errnoBug(e),
        else => os.unexpectedErrno(e),
    };
}

/// The target of `/proc/self/exe` (procfs answers from memory: a direct call).
pub fn processExecutablePath(
    userdata: ?*anyopaque,
    out_buffer: []u8,
) process.ExecutablePathError!usize {
    _ = userdata;
    try fs_file.checkCancel();
    const cwd = linux.AT.FDCWD;
    while (true) {
        const rc = linux.readlinkat(cwd, "/proc/self/exe", out_buffer.ptr, out_buffer.len);
        switch (os.errno(rc)) {
            .SUCCESS => return rc,
            .INTR => continue,
            else => |e| return switch (fs_errno.readLinkError(e)) {
                error.UnsupportedReparsePointType, error.NetworkNotFound => unreachable, // Windows
                error.FileBusy => unreachable, // Windows-only
                else => |err| err,
            },
        }
    }
}

/// Opens `/proc/self/exe` as std.Io.Threaded does on Linux.
pub fn processExecutableOpen(
    userdata: ?*anyopaque,
    options: Dir.OpenFileOptions,
) process.OpenExecutableError!File {
    return dir_io.dirOpenFile(userdata, .cwd(), "/proc/self/exe", options);
}

/// The pipe named by `ZIG_PROGRESS` in the runtime's environment (see ProcessState).
pub fn progressParentFile(userdata: ?*anyopaque) std.Progress.ParentFileError!File {
    return processOf(userdata).environ.zig_progress_file;
}

/// Takes the stderr lock (waiting, uncancelably, as std.Io.Threaded does) unless the caller
/// holds it already, and hands out the shared writer. Only the first lock of a runtime may
/// fail with `error.Canceled`, from detecting the terminal's mode.
pub fn lockStderr(
    userdata: ?*anyopaque,
    terminal_mode: ?Io.Terminal.Mode,
) Io.Cancelable!Io.LockedStderr {
    const stderr = &processOf(userdata).stderr;
    const io = file_io.stateOf(userdata).io();
    const me = Executor.callerId();
    if (stderr.owner.load(.monotonic) != me) {
        stderr.mutex.lockUncancelable(io);
        assert(stderr.depth == 0);
        stderr.owner.store(me, .monotonic);
    }
    stderr.depth += 1;
    return lockedStderr(userdata, terminal_mode);
}

/// `lockStderr` without waiting: null when another task or thread holds the lock.
pub fn tryLockStderr(
    userdata: ?*anyopaque,
    terminal_mode: ?Io.Terminal.Mode,
) Io.Cancelable!?Io.LockedStderr {
    const stderr = &processOf(userdata).stderr;
    const me = Executor.callerId();
    if (stderr.owner.load(.monotonic) != me) {
        if (!stderr.mutex.tryLock()) return null;
        assert(stderr.depth == 0);
        stderr.owner.store(me, .monotonic);
    }
    stderr.depth += 1;
    return try lockedStderr(userdata, terminal_mode);
}

fn lockedStderr(
    userdata: ?*anyopaque,
    terminal_mode: ?Io.Terminal.Mode,
) Io.Cancelable!Io.LockedStderr {
    const process_state = processOf(userdata);
    const stderr = &process_state.stderr;
    assert(stderr.depth > 0);
    if (!stderr.initialized) {
        const io = file_io.stateOf(userdata).io();
        stderr.writer.io = io;
        stderr.initialized = true;
        const exist = process_state.environ.exist;
        stderr.mode = terminal_mode orelse
            try .detect(io, stderr.writer.file, exist.NO_COLOR, exist.CLICOLOR_FORCE);
    }
    return .{ .file_writer = &stderr.writer, .terminal_mode = terminal_mode orelse stderr.mode };
}

/// Flushes what the holder wrote, re-arms a cancelation that interrupted a write, and releases
/// one level of the lock.
pub fn unlockStderr(userdata: ?*anyopaque) void {
    const stderr = &processOf(userdata).stderr;
    // Unlocked by a caller that holds it.
    assert(stderr.owner.load(.monotonic) == Executor.callerId());
    assert(stderr.depth > 0);
    const writer = &stderr.writer;
    if (writer.err == null) writer.interface.flush() catch {};
    if (writer.err) |err| {
        if (err == error.Canceled) {
            if (Executor.currentTask()) |task| task.recancel();
        }
        writer.err = null;
    }
    writer.interface.end = 0;
    writer.interface.buffer = &.{};
    stderr.depth -= 1;
    if (stderr.depth == 0) {
        stderr.owner.store(0, .monotonic);
        stderr.mutex.unlock(file_io.stateOf(userdata).io());
    }
}
