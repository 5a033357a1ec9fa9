//! File operations: stat, positional and streaming reads and writes, sync, truncation, seeks,
//! `flock` locks, permissions, owner, timestamps, the path of an open file. std.Io's file
//! entries (`std_io/file.zig`) are these, behind the VTable's signatures; the syscalls and
//! their errno triage live here, below the VTable, as the socket calls live in `net/`, so that
//! std_io/ only adapts.
//!
//! Reads, writes, stat, sync and truncation are loop operations (`BlockingLane.zig` picks the
//! loop or the blocking lane); a positional read first tries to take cached data at once
//! (`nowait.zig`), as does a stat where the file's mount answers from memory. They are
//! cancelation points that cancel the kernel operation, so a read blocked on a pipe ends at
//! once when its task is canceled. A `read` or `write` on a pipe, terminal or
//! socket waits for readiness on either backend, even on a descriptor opened `O_NONBLOCK`
//! (std.Io.Threaded reports `error.WouldBlock` there), and on a blocking pipe or socket it
//! never blocks the executor (epoll reads and writes with `RWF_NOWAIT`; a terminal refuses
//! the flag: backend/epoll.zig). Calls that cannot block (seek,
//! non-blocking flock, the tty ioctl) are direct syscalls; `fchmod` and `fchown`, which may
//! wait for the file system, run on the blocking lane.
//!
//! Errors are mapped from errno exactly as std.Io.Threaded maps them, under weft's errno
//! policy (`os/linux.zig`): an errno only a bug can cause goes to `errnoBug` (a panic in Debug
//! builds, where Threaded panics too), one a correct program may meet without a name in the
//! error set to `unexpectedErrno`. The maps several operations share are in `errno.zig`.
const std = @import("std");
const builtin = @import("builtin");
const Io = std.Io;
const File = Io.File;
const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};
const posix = std.posix;
const assert = std.debug.assert;
const Threaded = Io.Threaded;
const errnoBug = os.errnoBug;
const os = @import("../os/linux.zig");
const Executor = @import("../sched/Executor.zig");
const Op = @import("../loop/Completion.zig").Op;
const BlockingLane = @import("BlockingLane.zig");
const nowait = @import("nowait.zig");
const fs_errno = @import("errno.zig");

const errnoOf = fs_errno.errnoOf;

/// First and last pause between two attempts of a contended `lock` (see `lock`).
const lock_retry_ns_min = 50 * std.time.ns_per_us;
const lock_retry_ns_max = 20 * std.time.ns_per_ms;

/// The cancelation point of a call that does not wait: on a task, `error.Canceled` if a
/// cancel is pending; on a thread weft does not run, nothing.
pub fn checkCancel() Io.Cancelable!void {
    if (Executor.currentTask()) |task| try task.checkCancel();
}

pub fn stat(blocking: *BlockingLane, io: Io, file: File) File.StatError!File.Stat {
    var statx: linux.Statx = undefined;
    const mask = Threaded.linux_statx_request;
    const result = try statFd(blocking, io, file.handle, mask, &statx);
    if (result >= 0) return Threaded.statFromLinux(&statx);
    return fs_errno.statFdError(errnoOf(result));
}

pub fn length(blocking: *BlockingLane, io: Io, file: File) File.LengthError!u64 {
    var statx: linux.Statx = undefined;
    const result = try statFd(blocking, io, file.handle, .{ .SIZE = true }, &statx);
    if (result >= 0) {
        if (!statx.mask.SIZE) return error.Unexpected;
        return statx.size;
    }
    return fs_errno.statFdError(errnoOf(result));
}

/// `statx` of an open descriptor (`AT_EMPTY_PATH`): at once where the file's mount answers
/// from memory (`nowait.zig`), else on the loop or the blocking lane. Cancelation point.
fn statFd(
    blocking: *BlockingLane,
    io: Io,
    fd: posix.fd_t,
    mask: linux.STATX,
    statx: *linux.Statx,
) Io.Cancelable!i32 {
    try checkCancel();
    if (Executor.currentTask()) |task| {
        if (nowait.statFd(fd, mask, statx)) |result| {
            _ = Executor.cooperate(task);
            return result;
        }
    }
    statx.* = std.mem.zeroes(linux.Statx);
    return blocking.perform(io, .{ .statx = .{
        .fd = fd,
        .path = "",
        .flags = linux.AT.EMPTY_PATH,
        .mask = mask,
        .buffer = statx,
    } });
}

/// Reads at `offset` into `iovecs` (at least one, none empty); 0 at end of file. Cancelation
/// point.
pub fn readPositional(
    blocking: *BlockingLane,
    io: Io,
    file: File,
    iovecs: []const posix.iovec,
    offset: u64,
) File.ReadPositionalError!usize {
    assert(iovecs.len > 0);
    try checkCancel();
    // On a task, data the kernel has cached is read right here (see `nowait.zig`); a thread
    // weft does not run makes the blocking call below anyway.
    if (Executor.currentTask()) |task| {
        if (nowait.read(file.handle, iovecs, offset)) |result| {
            _ = Executor.cooperate(task);
            return readPositionalResult(result);
        }
    }
    if (!seekable(file.handle)) return error.Unseekable;
    const op_read: Op.Read = .{ .fd = file.handle, .iovecs = iovecs, .offset = offset };
    return readPositionalResult(try blocking.perform(io, .{ .read = op_read }));
}

/// A positional read's result (a count or `-errno`) as `readPositional` reports it.
fn readPositionalResult(result: i32) File.ReadPositionalError!usize {
    if (result >= 0) return @intCast(result);
    return switch (errnoOf(result)) {
        .NXIO, .SPIPE, .OVERFLOW => error.Unseekable,
        .NOTCONN, .CONNRESET => |e| errnoBug(e), // not a socket
        else => |e| fs_errno.readError(e),
    };
}

/// Whether a positional read or write on `fd` makes sense, as `pread`/`pwrite` would judge:
/// false for a pipe, FIFO, socket or terminal (`ESPIPE`). Asked before every positional
/// operation because io_uring does not ask: it reads a pipe "at" any offset as a stream, and
/// std's `File.Reader` relies on `error.Unseekable` to leave positional mode (a positional
/// `seekBy` on a pipe would otherwise skip nothing). On epoll the question also keeps a
/// positional read of an empty pipe from waiting for data it must refuse. One `lseek`, which
/// never waits; any other failure is left for the operation itself to report.
fn seekable(fd: posix.fd_t) bool {
    while (true) switch (os.errno(linux.lseek(fd, 0, linux.SEEK.CUR))) {
        .SPIPE => return false,
        .INTR => continue,
        else => return true,
    };
}

/// Writes `iovecs` (at least one, none empty) at `offset`. Returns the bytes written.
/// Cancelation point.
pub fn writePositional(
    blocking: *BlockingLane,
    io: Io,
    file: File,
    iovecs: []const posix.iovec_const,
    offset: u64,
) File.WritePositionalError!usize {
    assert(iovecs.len > 0);
    try checkCancel();
    if (!seekable(file.handle)) return error.Unseekable;
    const op_write: Op.Write = .{ .fd = file.handle, .iovecs = iovecs, .offset = offset };
    const result = try blocking.perform(io, .{ .write = op_write });
    if (result >= 0) return @intCast(result);
    return switch (errnoOf(result)) {
        .TXTBSY => error.FileBusy,
        .NXIO, .SPIPE, .OVERFLOW => error.Unseekable,
        else => |e| fs_errno.writeError(e),
    };
}

/// Reads at the file position into `iovecs` (at least one, none empty); `error.EndOfStream`
/// at its end. Cancelation point (a read blocked on a pipe is canceled in the kernel).
pub fn readStreaming(
    blocking: *BlockingLane,
    io: Io,
    file: File,
    iovecs: []const posix.iovec,
) (Io.Cancelable || Io.Operation.FileReadStreaming.Error)!usize {
    assert(iovecs.len > 0);
    const op_read: Op.Read = .{ .fd = file.handle, .iovecs = iovecs, .offset = null };
    const result = try blocking.perform(io, .{ .read = op_read });
    if (result > 0) return @intCast(result);
    if (result == 0) return error.EndOfStream;
    return switch (errnoOf(result)) {
        .NOTCONN => error.SocketUnconnected,
        .CONNRESET => error.ConnectionResetByPeer,
        else => |e| fs_errno.readError(e),
    };
}

/// Writes `iovecs` (at least one, none empty) at the file position. Cancelation point.
pub fn writeStreaming(
    blocking: *BlockingLane,
    io: Io,
    file: File,
    iovecs: []const posix.iovec_const,
) (Io.Cancelable || Io.Operation.FileWriteStreaming.Error)!usize {
    assert(iovecs.len > 0);
    const op_write: Op.Write = .{ .fd = file.handle, .iovecs = iovecs, .offset = null };
    const result = try blocking.perform(io, .{ .write = op_write });
    if (result >= 0) return @intCast(result);
    return fs_errno.writeError(errnoOf(result));
}

/// `ioctl` on the blocking lane (what a device does in an ioctl is up to its driver, and may
/// take long). Returns the result or `-errno`.
pub fn deviceIoControl(
    blocking: *BlockingLane,
    io: Io,
    o: Io.Operation.DeviceIoControl,
) Io.Cancelable!Io.Operation.DeviceIoControl.Result {
    const fd: usize = @bitCast(@as(isize, o.file.handle));
    const Job = struct {
        fn run(handle: usize, code: u32, arg: usize) usize {
            return linux.syscall3(.ioctl, handle, code, arg);
        }
    };
    return blocking.syscall(io, Job.run, .{ fd, @bitCast(o.code), @intFromPtr(o.arg) });
}

pub fn seekBy(file: File, offset: i64) File.SeekError!void {
    return seek(file.handle, offset, linux.SEEK.CUR);
}

pub fn seekTo(file: File, offset: u64) File.SeekError!void {
    return seek(file.handle, @bitCast(offset), linux.SEEK.SET);
}

/// `lseek` moves a number in the open file description: it never waits for a device.
fn seek(fd: posix.fd_t, offset: i64, whence: usize) File.SeekError!void {
    try checkCancel();
    while (true) switch (os.errno(linux.lseek(fd, offset, whence))) {
        .SUCCESS => return,
        .INTR => continue,
        .INVAL, .OVERFLOW, .SPIPE, .NXIO => return error.Unseekable,
        .BADF => |e| return errnoBug(e), // descriptor used after close
        else => |e| return os.unexpectedErrno(e),
    };
}

pub fn sync(blocking: *BlockingLane, io: Io, file: File) File.SyncError!void {
    const op_sync: Op = .{ .fsync = .{ .fd = file.handle, .datasync = false } };
    const result = try blocking.perform(io, op_sync);
    if (result >= 0) return;
    return switch (errnoOf(result)) {
        .IO => error.InputOutput,
        .NOSPC => error.NoSpaceLeft,
        .DQUOT => error.DiskQuota,
        // Used after close; a special file (a pipe, a socket) that cannot be synced, which
        // some file systems report as ROFS.
        .BADF, .INVAL, .ROFS => |e| errnoBug(e),
        else => |e| os.unexpectedErrno(e),
    };
}

/// `ftruncate`: a loop operation on Linux 6.9+ io_uring, else on the blocking lane.
pub fn setLength(
    blocking: *BlockingLane,
    io: Io,
    file: File,
    length_bytes: u64,
) File.SetLengthError!void {
    const signed_length: i64 = @bitCast(length_bytes);
    if (signed_length < 0) return error.FileTooBig; // an EINVAL that would be ambiguous
    const op_truncate: Op.Ftruncate = .{ .fd = file.handle, .length = length_bytes };
    const result = try blocking.perform(io, .{ .ftruncate = op_truncate });
    if (result >= 0) return;
    return switch (errnoOf(result)) {
        .FBIG => error.FileTooBig,
        .IO => error.InputOutput,
        .PERM => error.PermissionDenied,
        .TXTBSY => error.FileBusy,
        .INVAL => error.NonResizable, // /dev/null, for one
        .BADF => |e| errnoBug(e), // not open for writing
        else => |e| os.unexpectedErrno(e),
    };
}

/// `fchmod` on the blocking lane.
pub fn setPermissions(
    blocking: *BlockingLane,
    io: Io,
    file: File,
    permissions: File.Permissions,
) File.SetPermissionsError!void {
    const result = try blocking.syscall(io, linux.fchmod, .{ file.handle, permissions.toMode() });
    if (result >= 0) return;
    return fs_errno.ownerOrModeError(errnoOf(result));
}

/// `fchown` on the blocking lane; a null owner or group is left as it is.
pub fn setOwner(
    blocking: *BlockingLane,
    io: Io,
    file: File,
    owner: ?File.Uid,
    group: ?File.Gid,
) File.SetOwnerError!void {
    const uid = owner orelse ~@as(linux.uid_t, 0);
    const gid = group orelse ~@as(linux.gid_t, 0);
    const result = try blocking.syscall(io, linux.fchown, .{ file.handle, uid, gid });
    if (result >= 0) return;
    return fs_errno.ownerOrModeError(errnoOf(result));
}

/// Whether the descriptor is a terminal (the `TIOCGWINSZ` ioctl, which never waits).
pub fn isTty(file: File) Io.Cancelable!bool {
    try checkCancel();
    var size: posix.winsize = undefined;
    const fd: usize = @bitCast(@as(isize, file.handle));
    const request = linux.T.IOCGWINSZ;
    while (true) switch (os.errno(linux.syscall3(.ioctl, fd, request, @intFromPtr(&size)))) {
        .SUCCESS => return true,
        .INTR => continue,
        else => return false,
    };
}

/// Takes a `flock` lock, waiting while another holder has it. Cancelation point while
/// waiting.
///
/// flock has no asynchronous form and no readiness to wait for, so a contended lock is
/// retried with `LOCK_NB` after a pause that doubles from 50 us to 20 ms. (Rejected: a
/// blocking flock on the blocking lane, which would hold one of its few threads for as long as
/// another process keeps the lock, could not be canceled, and with a few such waiters would
/// stall every file call of the runtime.) The price is up to one pause of latency after the
/// lock is released, and no FIFO order among waiters, which flock does not promise either.
pub fn lock(io: Io, file: File, kind: File.Lock) File.LockError!void {
    const operation = flockOperation(kind);
    var pause_ns: u64 = lock_retry_ns_min;
    // Bounded by the other holders: each round either takes the lock or sleeps (a
    // cancelation point) while somebody else holds it.
    while (true) {
        if (try flockNonblocking(file.handle, operation)) return;
        if (Executor.currentTask() == null) {
            // A thread weft does not run may simply block, as on std.Io.Threaded.
            return flockBlocking(file.handle, operation);
        }
        try io.sleep(.fromNanoseconds(@intCast(pause_ns)), .awake);
        pause_ns = @min(pause_ns * 2, lock_retry_ns_max);
    }
}

/// Takes a `flock` lock if nobody else holds one that conflicts; false otherwise.
pub fn tryLock(file: File, kind: File.Lock) File.LockError!bool {
    return flockNonblocking(file.handle, flockOperation(kind));
}

fn flockOperation(kind: File.Lock) i32 {
    return switch (kind) {
        .none => posix.LOCK.UN,
        .shared => posix.LOCK.SH,
        .exclusive => posix.LOCK.EX,
    };
}

/// One `flock(operation | LOCK_NB)`: true if done, false if another holder has the lock.
fn flockNonblocking(fd: posix.fd_t, operation: i32) File.LockError!bool {
    try checkCancel();
    while (true) switch (os.errno(linux.flock(fd, operation | posix.LOCK.NB))) {
        .SUCCESS => return true,
        .INTR => continue,
        .AGAIN => return false,
        else => |e| return flockError(e),
    };
}

fn flockBlocking(fd: posix.fd_t, operation: i32) File.LockError!void {
    while (true) switch (os.errno(linux.flock(fd, operation))) {
        .SUCCESS => return,
        .INTR => continue,
        .AGAIN => |e| return errnoBug(e), // only answers LOCK_NB, not passed here
        else => |e| return flockError(e),
    };
}

/// The errors of taking a lock, waiting or not.
fn flockError(e: os.E) error{ SystemResources, FileLocksUnsupported, Unexpected } {
    return switch (e) {
        .NOLCK => error.SystemResources,
        .OPNOTSUPP => error.FileLocksUnsupported,
        .BADF, .INVAL => errnoBug(e), // used after close; a bad operation
        else => os.unexpectedErrno(e),
    };
}

/// Releases the lock. Never fails: unlocking cannot block, and a failure is the caller's bug
/// (a panic in Debug builds, ignored in release ones, as on std.Io.Threaded).
pub fn unlock(file: File) void {
    while (true) switch (os.errno(linux.flock(file.handle, posix.LOCK.UN))) {
        .SUCCESS => return,
        .INTR => continue,
        // Used after close, or bad arguments: releasing a lock has no error to report.
        else => |e| {
            errnoBug(e) catch {};
            return;
        },
    };
}

/// Turns an exclusive lock into a shared one without releasing it.
pub fn downgradeLock(file: File) File.DowngradeLockError!void {
    try checkCancel();
    const operation = posix.LOCK.SH | posix.LOCK.NB;
    while (true) switch (os.errno(linux.flock(file.handle, operation))) {
        .SUCCESS => return,
        .INTR => continue,
        // The file was not locked exclusively, or bad arguments: the caller's bug.
        .AGAIN, .BADF, .INVAL, .NOLCK, .OPNOTSUPP => |e| return errnoBug(e),
        else => |e| return os.unexpectedErrno(e),
    };
}

/// The path of an open file, read from `/proc/self/fd/<fd>` (procfs builds it from the
/// kernel's dentry cache: the call never waits for a device, so it runs directly).
/// Cancelation point.
pub fn realPath(file: File, out_buffer: []u8) File.RealPathError!usize {
    try checkCancel();
    return realPathOfFd(file.handle, out_buffer);
}

/// `realPath` without the cancelation point. `fd` may be `AT.FDCWD` (`Dir.cwd()`), which has
/// no `/proc/self/fd` entry: the working directory's path is `/proc/self/cwd`'s.
pub fn realPathOfFd(fd: posix.fd_t, out_buffer: []u8) File.RealPathError!usize {
    var proc_buffer: ["/proc/self/fd/-2147483648\x00".len]u8 = undefined;
    const proc_path = if (fd == linux.AT.FDCWD)
        "/proc/self/cwd"
    else
        std.fmt.bufPrintZ(&proc_buffer, "/proc/self/fd/{d}", .{fd}) catch
            unreachable; // sized for any descriptor
    const cwd = linux.AT.FDCWD;
    while (true) {
        const rc = linux.readlinkat(cwd, proc_path, out_buffer.ptr, out_buffer.len);
        switch (os.errno(rc)) {
            // readlink cuts a path that does not fit without saying so: a full buffer may
            // hold a cut one.
            .SUCCESS => return if (rc < out_buffer.len) rc else error.NameTooLong,
            .INTR => continue,
            .ACCES => return error.AccessDenied,
            .IO => return error.FileSystem,
            .LOOP => return error.SymLinkLoop,
            .NAMETOOLONG => return error.NameTooLong,
            .NOENT => return error.FileNotFound,
            .NOMEM => return error.SystemResources,
            .NOTDIR => return error.NotDir,
            .FAULT, .ILSEQ => |e| return errnoBug(e), // weft's own buffers and procfs path
            else => |e| return os.unexpectedErrno(e),
        }
    }
}

/// `futimens` on the blocking lane.
pub fn setTimestamps(
    blocking: *BlockingLane,
    io: Io,
    file: File,
    options: File.SetTimestampsOptions,
) File.SetTimestampsError!void {
    var times = timestamps(options.access_timestamp, options.modify_timestamp);
    const args = .{ file.handle, null, times.pointer(), 0 };
    const result = try blocking.syscall(io, linux.utimensat, args);
    if (result >= 0) return;
    return fs_errno.timestampsError(errnoOf(result));
}

/// The two `utimensat` times; no array at all when both are "now", as the kernel prefers.
pub const Timestamps = struct {
    times: [2]linux.timespec,
    both_now: bool,

    pub fn pointer(t: *const Timestamps) ?*const [2]linux.timespec {
        return if (t.both_now) null else &t.times;
    }
};

pub fn timestamps(access: File.SetTimestamp, modify: File.SetTimestamp) Timestamps {
    return .{
        .times = .{ Threaded.setTimestampToPosix(access), Threaded.setTimestampToPosix(modify) },
        .both_now = access == .now and modify == .now,
    };
}
