//! The child's side of spawning: what runs between `fork` and `execve`, and `execve` itself
//! with std.Io.Threaded's `PATH` search and errors.
//!
//! The child of a `fork` in a multi-threaded process has one thread and a copy of memory in
//! which other threads may have held locks (the allocator's, weft's run queues): it may only make
//! async-signal-safe calls. So everything here is a raw syscall on memory the parent prepared
//! before forking (argv, environment, paths, all NUL-terminated): no allocation, no lock, no
//! std.Io, no return. A failure is written as an error code to the report pipe and the child
//! exits with `exit_group(1)` (no atexit handlers, no stdio flush); `execve` success closes the
//! pipe (close-on-exec), which tells the parent the program runs.
//!
//! Every descriptor weft opens is close-on-exec, so the program inherits only stdin, stdout,
//! stderr and the progress descriptor, which are `dup2`ed into place (dup2 clears the flag).
const std = @import("std");
const builtin = @import("builtin");
const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};
const process = std.process;
const assert = std.debug.assert;
const os = @import("linux.zig");

pub const Error = process.SpawnError;

/// The descriptor the progress pipe gets in the child (named by `ZIG_PROGRESS`).
pub const progress_fileno = 3;

/// What to do with one of the child's standard descriptors.
pub const Stdio = union(enum) {
    inherit,
    close,
    /// `dup2` this descriptor into place.
    from: linux.fd_t,
};

/// Which program to run.
pub const Program = union(enum) {
    /// `argv[0]`: a path if it contains a slash, else searched in this `PATH` list.
    search: []const u8,
    /// `argv[0]` relative to a directory, always a path (`execveat`).
    at: linux.fd_t,
};

/// Everything the child does, prepared by the parent.
pub const Plan = struct {
    stdin: Stdio,
    stdout: Stdio,
    stderr: Stdio,
    cwd: union(enum) { inherit, fd: linux.fd_t, path: [*:0]const u8 },
    /// The progress pipe's write end, `dup2`ed to `progress_fileno`; -1 for none.
    progress_fd: linux.fd_t,
    gid: ?linux.gid_t,
    uid: ?linux.uid_t,
    pgid: ?linux.pid_t,
    start_suspended: bool,
    program: Program,
    expand_arg0: process.ArgExpansion,
    argv: [*:null]?[*:0]const u8,
    envp: [*:null]const ?[*:0]const u8,
    /// The write end of the report pipe.
    report_fd: linux.fd_t,
};

/// The error code that crosses the report pipe. `anyerror` codes are the same in parent and
/// child: one binary.
pub const ErrorCode = u64;

/// Runs in the child: sets it up as `plan` says and replaces the image. Never returns.
pub fn runChild(plan: *const Plan) noreturn {
    const failure = setUp(plan);
    report(plan.report_fd, failure);
}

fn setUp(plan: *const Plan) Error {
    // A directory descriptor among 0..3 would be overwritten by the dup2s below: move it up.
    var program = plan.program;
    if (program == .at and program.at >= 0 and program.at <= progress_fileno) {
        const rc = linux.fcntl(program.at, linux.F.DUPFD_CLOEXEC, progress_fileno + 1);
        if (os.errno(rc) != .SUCCESS) return error.ProcessFdQuotaExceeded;
        program = .{ .at = @intCast(rc) };
    }
    try setUpStdio(plan.stdin, linux.STDIN_FILENO);
    try setUpStdio(plan.stdout, linux.STDOUT_FILENO);
    try setUpStdio(plan.stderr, linux.STDERR_FILENO);
    switch (plan.cwd) {
        .inherit => {},
        .fd => |fd| if (fd != linux.AT.FDCWD) switch (os.errno(linux.fchdir(fd))) {
            .SUCCESS => {},
            .ACCES => return error.AccessDenied,
            .NOTDIR => return error.NotDir,
            .IO => return error.FileSystem,
            else => return error.Unexpected,
        },
        .path => |path| switch (os.errno(linux.chdir(path))) {
            .SUCCESS => {},
            .ACCES => return error.AccessDenied,
            .IO => return error.FileSystem,
            .LOOP => return error.SymLinkLoop,
            .NAMETOOLONG => return error.NameTooLong,
            .NOENT => return error.FileNotFound,
            .NOMEM => return error.SystemResources,
            .NOTDIR => return error.NotDir,
            .ILSEQ => return error.BadPathName,
            else => return error.Unexpected,
        },
    }
    // After the chdir: the cwd descriptor may have been `progress_fileno`.
    if (plan.progress_fd != -1) try dup2(plan.progress_fd, progress_fileno);
    if (plan.gid) |gid| switch (os.errno(linux.setregid(gid, gid))) {
        .SUCCESS => {},
        .AGAIN => return error.ResourceLimitReached,
        .INVAL => return error.InvalidUserId,
        .PERM => return error.PermissionDenied,
        else => return error.Unexpected,
    };
    if (plan.uid) |uid| switch (os.errno(linux.setreuid(uid, uid))) {
        .SUCCESS => {},
        .AGAIN => return error.ResourceLimitReached,
        .INVAL => return error.InvalidUserId,
        .PERM => return error.PermissionDenied,
        else => return error.Unexpected,
    };
    if (plan.pgid) |pgid| switch (os.errno(linux.setpgid(0, pgid))) {
        .SUCCESS => {},
        .ACCES => return error.ProcessAlreadyExec,
        .INVAL => return error.InvalidProcessGroupId,
        .PERM => return error.PermissionDenied,
        else => return error.Unexpected,
    };
    if (plan.start_suspended) switch (os.errno(linux.kill(0, .STOP))) {
        .SUCCESS => {},
        .PERM => return error.PermissionDenied,
        else => return error.Unexpected,
    };
    return switch (program) {
        .search => |path_list| {
            const file = plan.argv[0].?;
            return exec(plan.expand_arg0, file, plan.argv, plan.envp, path_list);
        },
        .at => |dir_fd| execAt(dir_fd, plan.argv, plan.envp),
    };
}

fn setUpStdio(stdio: Stdio, fileno: linux.fd_t) Error!void {
    switch (stdio) {
        .inherit => {},
        .close => os.closeFd(fileno),
        .from => |fd| try dup2(fd, fileno),
    }
}

fn dup2(old: linux.fd_t, new: linux.fd_t) Error!void {
    // Bounded by the signals delivered meanwhile (EINTR), and EBUSY is a brief race with open.
    while (true) switch (os.errno(linux.dup2(old, new))) {
        .SUCCESS => return,
        .BUSY, .INTR => continue,
        .MFILE => return error.ProcessFdQuotaExceeded,
        .NOMEM => return error.SystemResources,
        else => return error.Unexpected,
    };
}

/// Writes the error code and exits. The parent reads a whole code or none.
fn report(fd: linux.fd_t, failure: Error) noreturn {
    var bytes: [8]u8 = undefined;
    std.mem.writeInt(ErrorCode, &bytes, @intFromError(failure), .little);
    var written: usize = 0;
    // Bounded: each round writes at least one byte or gives up.
    while (written < bytes.len) {
        const rc = linux.write(fd, bytes[written..].ptr, bytes.len - written);
        switch (os.errno(rc)) {
            .SUCCESS => written += rc,
            .INTR => continue,
            else => break,
        }
    }
    linux.exit_group(1);
}

/// `execve` of `file`, searched in `path_list` (`PATH`) unless it contains a slash, with
/// std.Io.Threaded's rules: a candidate that is missing or not under a directory moves on,
/// any other error ends the search, and if none ran, `AccessDenied` if some candidate was not
/// executable, else the last error. With `.expand`, `argv[0]` is each candidate's full path
/// (restored on failure). Returns only on failure. Async-signal-safe.
pub fn exec(
    expand_arg0: process.ArgExpansion,
    file: [*:0]const u8,
    argv: [*:null]?[*:0]const u8,
    envp: [*:null]const ?[*:0]const u8,
    path_list: []const u8,
) process.ReplaceError {
    const name = std.mem.sliceTo(file, 0);
    if (std.mem.findScalar(u8, name, '/') != null) return execPath(file, argv, envp);
    var path_buffer: [linux.PATH_MAX]u8 = undefined;
    var directories = std.mem.tokenizeScalar(u8, path_list, ':');
    var seen_access_denied = false;
    var last: process.ReplaceError = error.FileNotFound;
    const arg0 = argv[0];
    defer if (expand_arg0 == .expand) {
        argv[0] = arg0;
    };
    while (directories.next()) |directory| {
        const len = directory.len + 1 + name.len;
        if (len + 1 > path_buffer.len) return error.NameTooLong;
        @memcpy(path_buffer[0..directory.len], directory);
        path_buffer[directory.len] = '/';
        @memcpy(path_buffer[directory.len + 1 ..][0..name.len], name);
        path_buffer[len] = 0;
        const candidate = path_buffer[0..len :0];
        if (expand_arg0 == .expand) argv[0] = candidate.ptr;
        last = execPath(candidate.ptr, argv, envp);
        switch (last) {
            error.AccessDenied => seen_access_denied = true,
            error.FileNotFound, error.NotDir => {},
            else => |e| return e,
        }
    }
    if (seen_access_denied) return error.AccessDenied;
    return last;
}

/// `execve` of a path (no search).
pub fn execPath(
    path: [*:0]const u8,
    argv: [*:null]const ?[*:0]const u8,
    envp: [*:null]const ?[*:0]const u8,
) process.ReplaceError {
    return execError(os.errno(linux.execve(path, argv, envp)));
}

/// `execveat` of `argv[0]` relative to `dir_fd`, always as a path.
pub fn execAt(
    dir_fd: linux.fd_t,
    argv: [*:null]const ?[*:0]const u8,
    envp: [*:null]const ?[*:0]const u8,
) process.ReplaceError {
    const flags: linux.EXECVEAT = .{ .SYMLINK_NOFOLLOW = false, .EMPTY_PATH = false };
    return execError(os.errno(linux.execveat(dir_fd, argv[0].?, argv, envp, flags)));
}

/// `execve`'s errors as std.Io.Threaded maps them on Linux, except that nothing is printed or
/// panics (Threaded's `errnoBug` and `unexpectedErrno` may): this runs in forked children.
fn execError(e: linux.E) process.ReplaceError {
    return switch (e) {
        .@"2BIG", .NOMEM => error.SystemResources,
        .MFILE => error.ProcessFdQuotaExceeded,
        .NAMETOOLONG => error.NameTooLong,
        .NFILE => error.SystemFdQuotaExceeded,
        .ACCES => error.AccessDenied,
        .PERM => error.PermissionDenied,
        .INVAL, .NOEXEC, .LIBBAD => error.InvalidExe,
        .IO, .LOOP => error.FileSystem,
        .ISDIR => error.IsDir,
        .NOENT => error.FileNotFound,
        .NOTDIR => error.NotDir,
        .TXTBSY => error.FileBusy,
        else => error.Unexpected, // EFAULT would be a bad pointer of ours
    };
}
