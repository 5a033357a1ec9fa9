//! std.Io entries that start programs: `processSpawn`, `processSpawnPath`, `processReplace`,
//! `processReplacePath`.
//!
//! Spawning is std.Io.Threaded's recipe, with the waiting moved onto the loop:
//! 1. in the parent, before forking, everything the child needs is prepared: pipes
//!    (close-on-exec, so a concurrent spawn on another executor cannot inherit them), argv
//!    and the environment NUL-terminated in an arena, the working directory's path;
//! 2. `fork`; the child runs `os/spawn.zig` (async-signal-safe syscalls only, no allocation)
//!    and reports a failure as an error code on a close-on-exec pipe;
//! 3. the parent waits for that pipe through the loop (`read` on io_uring, readiness on
//!    epoll), so the executor keeps running other tasks while the child starts: end of file
//!    means `execve` succeeded, eight bytes are the child's error.
//!
//! Rejected: `vfork`/`CLONE_VM`, which would save copying the page tables. The child would run
//! on the parent's fiber stack, in its memory, while the parent thread (an executor) is held
//! until `execve`; Zig code there cannot be kept from writing to that shared memory.
//!
//! Where weft differs from Threaded (on purpose): a child whose setup or `execve` failed is
//! reaped and its pipes closed before the error returns (Threaded leaves a zombie and the
//! pipes open); `/dev/null` is opened close-on-exec; `processSpawnPath` and
//! `processReplacePath` work (`execveat` of `argv[0]` relative to the directory), where
//! Threaded 0.16 panics with "TODO". Errors are otherwise Threaded's.
//!
//! Cancelation: a cancelation point until the fork; after it, the spawn completes (the child
//! exists) and a request is left for the caller's next cancelation point.
const std = @import("std");
const builtin = @import("builtin");
const Io = std.Io;
const File = Io.File;
const Dir = Io.Dir;
const process = std.process;
const Child = process.Child;
const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};
const posix = std.posix;
const assert = std.debug.assert;
const Threaded = Io.Threaded;
const os = @import("../os/linux.zig");
const os_spawn = @import("../os/spawn.zig");
const file_io = @import("file.zig");
const fs_file = @import("../fs/file.zig");
const process_io = @import("process.zig");
const coverage = @import("coverage.zig");

/// Starts `argv[0]`, searched in the runtime environment's `PATH` unless it has a slash.
pub fn processSpawn(userdata: ?*anyopaque, options: process.SpawnOptions) process.SpawnError!Child {
    const path_list = file_io.stateOf(userdata).process.path();
    return spawn(userdata, options, .{ .search = path_list });
}

/// Starts `argv[0]` taken as a path relative to `dir` (never searched).
pub fn processSpawnPath(
    userdata: ?*anyopaque,
    dir: Dir,
    options: process.SpawnOptions,
) process.SpawnError!Child {
    return spawn(userdata, options, .{ .at = dir.handle });
}

/// Replaces the process image with `argv[0]`, searched in `PATH` unless it has a slash.
/// Returns only on failure.
pub fn processReplace(userdata: ?*anyopaque, options: process.ReplaceOptions) process.ReplaceError {
    return replace(userdata, options, .{ .search = file_io.stateOf(userdata).process.path() });
}

/// Replaces the process image with `argv[0]` relative to `dir`. Returns only on failure.
pub fn processReplacePath(
    userdata: ?*anyopaque,
    dir: Dir,
    options: process.ReplaceOptions,
) process.ReplaceError {
    return replace(userdata, options, .{ .at = dir.handle });
}

fn replace(
    userdata: ?*anyopaque,
    options: process.ReplaceOptions,
    program: os_spawn.Program,
) process.ReplaceError {
    assert(options.argv.len > 0); // a program to run
    try fs_file.checkCancel();
    const state = file_io.stateOf(userdata);
    var arena_state: std.heap.ArenaAllocator = .init(state.gpa);
    defer arena_state.deinit();
    const arena = arena_state.allocator();
    const argv = try argvZ(arena, options.argv);
    const block_options: process.Environ.CreatePosixBlockOptions = .{ .zig_progress_fd = -1 };
    const environ = if (options.environ_map) |map|
        try map.createPosixBlock(arena, block_options)
    else
        try state.process.environ.process_environ.createPosixBlock(arena, block_options);
    const envp = environ.slice.ptr;
    // A replaced process never reaches Runtime.deinit, where the counts are written.
    coverage.flush();
    return switch (program) {
        .search => |path_list| os_spawn.exec(options.expand_arg0, argv[0].?, argv, envp, path_list),
        .at => |dir_fd| os_spawn.execAt(dir_fd, argv, envp),
    };
}

fn argvZ(arena: std.mem.Allocator, argv: []const []const u8) ![:null]?[*:0]const u8 {
    const result = try arena.allocSentinel(?[*:0]const u8, argv.len, null);
    for (argv, result) |arg, *slot| slot.* = (try arena.dupeZ(u8, arg)).ptr;
    return result;
}

/// A pipe, or the absence of one (-1 at both ends).
const Pipe = [2]posix.fd_t;
const no_pipe: Pipe = .{ -1, -1 };

fn makePipe(flags: linux.O) process.SpawnError!Pipe {
    var fds: Pipe = undefined;
    while (true) switch (os.errno(linux.pipe2(&fds, flags))) {
        .SUCCESS => return fds,
        .INTR => continue,
        .MFILE => return error.ProcessFdQuotaExceeded,
        .NFILE => return error.SystemFdQuotaExceeded,
        .INVAL, .FAULT => |e| return os.errnoBug(e),
        else => |e| return os.unexpectedErrno(e),
    };
}

fn closePipe(pipe: Pipe) void {
    for (pipe) |fd| if (fd != -1) os.closeFd(fd);
}

/// The descriptors of one spawn: [0] the parent's end, [1] the child's, per stream.
const Pipes = struct {
    stdin: Pipe = no_pipe,
    stdout: Pipe = no_pipe,
    stderr: Pipe = no_pipe,
    progress: Pipe = no_pipe,
    report: Pipe = no_pipe,

    fn close(pipes: *const Pipes) void {
        inline for (.{ "stdin", "stdout", "stderr", "progress", "report" }) |name| {
            closePipe(@field(pipes, name));
        }
    }
};

fn spawn(
    userdata: ?*anyopaque,
    options: process.SpawnOptions,
    program: os_spawn.Program,
) process.SpawnError!Child {
    assert(options.argv.len > 0); // a program to run
    try fs_file.checkCancel();
    const state = file_io.stateOf(userdata);
    var pipes: Pipes = .{};
    errdefer pipes.close();
    const cloexec: linux.O = .{ .CLOEXEC = true };
    // [0] is the parent's end and [1] the child's, so stdin's pipe is swapped.
    if (options.stdin == .pipe) pipes.stdin = swap(try makePipe(cloexec));
    if (options.stdout == .pipe) pipes.stdout = try makePipe(cloexec);
    if (options.stderr == .pipe) pipes.stderr = try makePipe(cloexec);
    if (options.progress_node.index != .none) {
        pipes.progress = try makePipe(.{ .NONBLOCK = true, .CLOEXEC = true });
        const size: usize = std.Progress.max_packet_len * 2;
        _ = linux.fcntl(pipes.progress[0], linux.F.SETPIPE_SZ, size); // a hint; may be refused
    }
    const any_ignore = options.stdin == .ignore or options.stdout == .ignore or
        options.stderr == .ignore;
    const null_fd = if (any_ignore) try state.process.nullFd() else -1;

    var arena_state: std.heap.ArenaAllocator = .init(state.gpa);
    defer arena_state.deinit();
    const arena = arena_state.allocator();
    const argv = try argvZ(arena, options.argv);
    const progress_fd: i32 = if (pipes.progress[1] == -1) -1 else os_spawn.progress_fileno;
    const block_options: process.Environ.CreatePosixBlockOptions = .{
        .zig_progress_fd = progress_fd,
    };
    const environ = if (options.environ_map) |map|
        try map.createPosixBlock(arena, block_options)
    else
        try state.process.environ.process_environ.createPosixBlock(arena, block_options);
    var cwd_buffer: [posix.PATH_MAX]u8 = undefined;
    const cwd: @FieldType(os_spawn.Plan, "cwd") = switch (options.cwd) {
        .inherit => .inherit,
        .dir => |dir| .{ .fd = dir.handle },
        .path => |path| .{ .path = (try Threaded.pathToPosix(path, &cwd_buffer)).ptr },
    };
    pipes.report = try makePipe(cloexec);
    const plan: os_spawn.Plan = .{
        .stdin = stdio(options.stdin, pipes.stdin[1], null_fd),
        .stdout = stdio(options.stdout, pipes.stdout[1], null_fd),
        .stderr = stdio(options.stderr, pipes.stderr[1], null_fd),
        .cwd = cwd,
        .progress_fd = pipes.progress[1],
        .gid = options.gid,
        .uid = options.uid,
        .pgid = options.pgid,
        .start_suspended = options.start_suspended,
        .program = program,
        .expand_arg0 = options.expand_arg0,
        .argv = argv.ptr,
        .envp = environ.slice.ptr,
        .report_fd = pipes.report[1],
    };
    const pid = try fork();
    if (pid == 0) os_spawn.runChild(&plan);
    return started(userdata, options, &pipes, pid);
}

/// The parent's side after `fork`: keeps its ends, waits for the child's report.
fn started(
    userdata: ?*anyopaque,
    options: process.SpawnOptions,
    pipes: *Pipes,
    pid: linux.pid_t,
) process.SpawnError!Child {
    // Only the child holds the child's ends now (the report pipe's write end included, so its
    // end of file means exec).
    inline for (.{ "stdin", "stdout", "stderr", "progress", "report" }) |name| {
        const pipe = &@field(pipes, name);
        if (pipe[1] != -1) os.closeFd(pipe[1]);
        pipe[1] = -1;
    }
    const report_fd = pipes.report[0];
    pipes.report[0] = -1;
    defer os.closeFd(report_fd);
    if (readReport(userdata, report_fd)) |failure| {
        process_io.reapExited(userdata, pid);
        return failure; // the caller's errdefer closes the parent's ends
    }
    if (pipes.progress[0] != -1) {
        const progress: File = .{ .handle = pipes.progress[0], .flags = .{ .nonblocking = true } };
        options.progress_node.setIpcFile(userdata, progress);
    }
    return .{
        .id = pid,
        .thread_handle = {},
        .stdin = parentEnd(pipes.stdin[0]),
        .stdout = parentEnd(pipes.stdout[0]),
        .stderr = parentEnd(pipes.stderr[0]),
        .request_resource_usage_statistics = options.request_resource_usage_statistics,
    };
}

fn swap(pipe: Pipe) Pipe {
    return .{ pipe[1], pipe[0] };
}

fn parentEnd(fd: posix.fd_t) ?File {
    if (fd == -1) return null;
    return .{ .handle = fd, .flags = .{ .nonblocking = false } };
}

fn stdio(
    option: process.SpawnOptions.StdIo,
    pipe_fd: posix.fd_t,
    null_fd: posix.fd_t,
) os_spawn.Stdio {
    return switch (option) {
        .inherit => .inherit,
        .close => .close,
        .ignore => .{ .from = null_fd },
        .pipe => .{ .from = pipe_fd },
        .file => |file| .{ .from = file.handle },
    };
}

fn fork() process.SpawnError!linux.pid_t {
    const rc = linux.fork();
    return switch (os.errno(rc)) {
        .SUCCESS => @intCast(rc),
        .AGAIN, .NOMEM => error.SystemResources,
        .NOSYS => error.OperationUnsupported,
        else => |e| os.unexpectedErrno(e),
    };
}

/// Waits (through the loop, uncancelably: the child exists either way) for the child's report:
/// null once `execve` closed the pipe, or the error it sent. A read that fails is taken as
/// success, as Threaded takes it: the child may be running, and must not be lost.
fn readReport(userdata: ?*anyopaque, fd: posix.fd_t) ?process.SpawnError {
    const io = file_io.stateOf(userdata).io();
    const protection = io.swapCancelProtection(.blocked);
    defer _ = io.swapCancelProtection(protection);
    var bytes: [@sizeOf(os_spawn.ErrorCode)]u8 = undefined;
    var received: usize = 0;
    const file: File = .{ .handle = fd, .flags = .{ .nonblocking = false } };
    // Bounded: each round reads at least one byte or ends.
    while (received < bytes.len) {
        const data = [_][]u8{bytes[received..]};
        const read: Io.Operation.FileReadStreaming = .{ .file = file, .data = &data };
        received += file_io.readStreaming(userdata, read) catch return null;
    }
    const code = std.mem.readInt(os_spawn.ErrorCode, &bytes, .little);
    const ErrorInt = std.meta.Int(.unsigned, @bitSizeOf(anyerror));
    const failure: anyerror = @errorFromInt(@as(ErrorInt, @intCast(code)));
    return @errorCast(failure);
}
