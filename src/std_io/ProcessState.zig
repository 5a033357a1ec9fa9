//! The process-wide part of weft's `std.Io`, one per runtime: the environment that spawning and
//! stderr read, the stderr lock and its writer, the `/dev/null` descriptor that children get for
//! `.ignore`, and the SIGPIPE handler.
//!
//! ```
//! var process: ProcessState = .init(environ); // in Runtime.init
//! defer process.deinit();
//! ```
//!
//! Environment: `Runtime.Options.environ`, or when it is null the block `start.zig` recorded
//! for `std.debug` (the process's own environment in any program with a Zig `main`), scanned
//! once at init by std.Io.Threaded's own scanner (`PATH`, `NO_COLOR`, `CLICOLOR_FORCE`,
//! `ZIG_PROGRESS`): on Linux the scan reads the block in place and allocates nothing.
//!
//! SIGPIPE: like std.Io.Threaded, a runtime installs a handler that does nothing, so a write to
//! a pipe whose reader is gone fails with `error.BrokenPipe` instead of killing the process
//! (sockets use `MSG_NOSIGNAL` anyway). A handler, not `SIG_IGN`: children reset handlers at
//! `execve` but would inherit the ignored disposition. Counted process-wide: the first runtime
//! installs it, the last to go restores what was there (Threaded restores at each `deinit`,
//! which with two runtimes alive would leave the second exposed).
const ProcessState = @This();

const std = @import("std");
const builtin = @import("builtin");
const Io = std.Io;
const File = Io.File;
const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};
const assert = std.debug.assert;
const os = @import("../os/linux.zig");
const Lock = @import("../os/Mutex.zig");

/// Memoized facts of the environment (std.Io.Threaded's own type and scanner).
environ: Io.Threaded.Environ,
stderr: Stderr = .{},
/// `/dev/null`, opened on first use (close-on-exec; children get it by `dup2`). -1 until then.
null_fd: std.atomic.Value(i32) = .init(-1),

/// stderr as `Io.lockStderr` hands it out: one writer, one lock.
pub const Stderr = struct {
    /// Fiber-aware: a task holding it may park (a write that waits) and resume on another
    /// executor thread, so a thread mutex would be wrong. `Io.Mutex` parks a task and blocks a
    /// thread that weft does not run.
    mutex: Io.Mutex = .init,
    /// Who holds `mutex` (see `ownerId`), 0 when free. Written only by the holder, read by
    /// anyone: relaxed atomics suffice, since only the holder can find its own id there.
    owner: std.atomic.Value(usize) = .init(0),
    /// Nested `lockStderr` calls of the holder (std.Io.Threaded's lock is re-entrant per
    /// thread, so that a holder that panics can still print). Holder only.
    depth: usize = 0,
    writer: File.Writer = .{
        .io = undefined,
        .interface = File.Writer.initInterface(&.{}),
        .file = .stderr(),
        .mode = .streaming,
    },
    /// Detected at the first lock (holder only, under `mutex`).
    mode: Io.Terminal.Mode = .no_color,
    initialized: bool = false,
};

/// Handlers installed by weft runtimes; the old disposition is restored when it drops to 0.
var sigpipe_lock: Lock = .{};
var sigpipe_users: usize = 0;
var sigpipe_old: linux.Sigaction = undefined;

pub fn init(environ: ?std.process.Environ) ProcessState {
    const process_environ = environ orelse inherited: {
        const recorded = std.Options.debug_threaded_io orelse break :inherited .empty;
        break :inherited recorded.environ.process_environ;
    };
    var state: ProcessState = .{ .environ = .{ .process_environ = process_environ } };
    // Linux: the scan walks the block in place and never allocates.
    state.environ.scan(std.mem.Allocator.failing);
    installSigpipe();
    return state;
}

pub fn deinit(state: *ProcessState) void {
    const fd = state.null_fd.load(.acquire);
    if (fd != -1) os.closeFd(fd);
    restoreSigpipe();
    state.* = undefined;
}

/// The search path for programs named without a slash (std.Io.Threaded's default when unset).
pub fn path(state: *const ProcessState) []const u8 {
    return state.environ.string.PATH orelse default_path;
}

/// std.Io.Threaded's `PATH` when the environment has none.
pub const default_path = "/usr/local/bin:/bin/:/usr/bin";

/// `/dev/null` opened read-write and close-on-exec, once per runtime (a race opens it twice and
/// closes the loser).
pub fn nullFd(state: *ProcessState) File.OpenError!i32 {
    const current = state.null_fd.load(.acquire);
    if (current != -1) return current;
    const flags: linux.O = .{ .ACCMODE = .RDWR, .CLOEXEC = true };
    const fd: i32 = while (true) {
        const rc = linux.openat(linux.AT.FDCWD, "/dev/null", flags, 0);
        switch (os.errno(rc)) {
            .SUCCESS => break @intCast(rc),
            .INTR => continue,
            .ACCES => return error.AccessDenied,
            .MFILE => return error.ProcessFdQuotaExceeded,
            .NFILE => return error.SystemFdQuotaExceeded,
            .NODEV => return error.NoDevice,
            .NOENT => return error.FileNotFound,
            .NOMEM => return error.SystemResources,
            .PERM => return error.PermissionDenied,
            else => |e| return os.unexpectedErrno(e),
        }
    };
    // Acq_rel: publishes the descriptor; on failure, sees the winner's.
    if (state.null_fd.cmpxchgStrong(-1, fd, .acq_rel, .acquire)) |winner| {
        os.closeFd(fd);
        return winner;
    }
    return fd;
}

fn ignoreSignal(_: linux.SIG) callconv(.c) void {}

fn installSigpipe() void {
    sigpipe_lock.lock();
    defer sigpipe_lock.unlock();
    sigpipe_users += 1;
    if (sigpipe_users > 1) return;
    const action: linux.Sigaction = .{
        .handler = .{ .handler = ignoreSignal },
        .mask = linux.sigemptyset(),
        .flags = 0,
    };
    _ = linux.sigaction(.PIPE, &action, &sigpipe_old);
}

fn restoreSigpipe() void {
    sigpipe_lock.lock();
    defer sigpipe_lock.unlock();
    assert(sigpipe_users > 0);
    sigpipe_users -= 1;
    if (sigpipe_users == 0) _ = linux.sigaction(.PIPE, &sigpipe_old, null);
}
