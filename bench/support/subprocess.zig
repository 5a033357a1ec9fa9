//! Runs this very program again as a child process, bounded in time, and reports how the child
//! ended, what it wrote on stdout and its peak resident set size.
//!
//! Why a child per measurement: `ru_maxrss` is a high-water mark over a process's whole life, so
//! two scenarios measured in one process would report the larger peak twice. A child also
//! isolates a crash or a hang of the runtime under test from the other measurements.
//!
//! Why raw `fork` + `execve` + `wait4` rather than `std.process.spawn`: `std.process.Child.wait`
//! reaps the child without handing back its `rusage`, and a second raw `wait4` on a reaped pid
//! would fail. The child re-executes `/proc/self/exe`, so no path lookup is needed.
//!
//! Caveat of the number: across `execve` Linux keeps the larger of the pre-exec and post-exec
//! peaks, so a child's peak RSS is at least the parent's RSS at `fork` (a few MiB here).
const std = @import("std");
const linux = std.os.linux;
const assert = std.debug.assert;

pub const Error = error{
    /// pipe2, fork or pidfd_open failed for lack of a resource (fds, processes, memory).
    SystemResources,
    /// A syscall failed in a way this helper does not expect; see the printed errno.
    Unexpected,
    OutOfMemory,
};

/// How the child process ended.
pub const End = union(enum) {
    exited: u8,
    signaled: linux.SIG,
    /// Killed with SIGKILL by this helper when the time bound passed.
    timed_out,
};

pub const Outcome = struct {
    end: End,
    /// Peak resident set size of the child, from `wait4`'s `ru_maxrss`.
    rss_kib: u64,
    /// Wall time seen by the parent, from fork to reaping (includes exec and runtime start-up).
    parent_wall_ns: u64,
    /// What the child wrote on stdout, truncated to the caller's buffer.
    stdout: []const u8,

    /// The value of `key=value` in the child's stdout (space or newline separated), if present.
    pub fn field(outcome: *const Outcome, key: []const u8) ?[]const u8 {
        var words = std.mem.tokenizeAny(u8, outcome.stdout, " \n");
        while (words.next()) |word| {
            const eq = std.mem.indexOfScalar(u8, word, '=') orelse continue;
            if (std.mem.eql(u8, word[0..eq], key)) return word[eq + 1 ..];
        }
        return null;
    }

    /// `field` parsed as an unsigned integer; null if absent or malformed.
    pub fn fieldInt(outcome: *const Outcome, key: []const u8) ?u64 {
        const text = outcome.field(key) orelse return null;
        return std.fmt.parseInt(u64, text, 10) catch null;
    }
};

pub const Options = struct {
    /// Arguments after argv[0]; the child sees `/proc/self/exe` as its own path.
    args: []const []const u8,
    /// The environment handed to the child (the parent's, from `std.process.Init`).
    environ: std.process.Environ,
    /// The child is killed with SIGKILL once this much wall time has passed.
    timeout_ns: u64,
    /// Receives the child's stdout; output past its end is read and dropped, so that a chatty
    /// child can never block on a full pipe.
    stdout_buffer: []u8,
};

/// Runs `/proc/self/exe` with `options.args`, waits for it (at most `options.timeout_ns`) and
/// returns how it ended. The child's stderr is inherited, so its diagnostics show up directly.
/// Uses `arena` for the argument vector only.
pub fn runSelf(arena: std.mem.Allocator, options: Options) Error!Outcome {
    assert(options.timeout_ns > 0);
    assert(options.stdout_buffer.len > 0);

    // Everything execve needs is built before fork: the child may only call async-signal-safe
    // functions, and allocating there could deadlock on a lock held by another parent thread.
    const exe_path = "/proc/self/exe";
    const argv = try arena.allocSentinel(?[*:0]const u8, options.args.len + 1, null);
    argv[0] = exe_path;
    for (options.args, argv[1..]) |arg, *slot| slot.* = (try arena.dupeZ(u8, arg)).ptr;
    const envp: [*:null]const ?[*:0]const u8 = options.environ.block.slice.ptr;

    var pipe_fds: [2]i32 = undefined;
    try check(linux.pipe2(&pipe_fds, .{ .CLOEXEC = true }), "pipe2");
    const read_fd = pipe_fds[0];
    defer _ = linux.close(read_fd);

    const start_ns = monotonicNs();
    const fork_rc = linux.fork();
    check(fork_rc, "fork") catch |err| {
        _ = linux.close(pipe_fds[1]);
        return err;
    };
    if (fork_rc == 0) execChild(pipe_fds[1], exe_path, argv.ptr, envp);
    const pid: linux.pid_t = @intCast(fork_rc);
    _ = linux.close(pipe_fds[1]);

    const deadline_ns = start_ns + options.timeout_ns;
    const collected = try collect(pid, read_fd, deadline_ns, options.stdout_buffer);
    if (collected.timed_out) _ = linux.kill(pid, .KILL);

    var status: u32 = 0;
    var usage: linux.rusage = undefined;
    while (true) {
        const rc = linux.wait4(pid, &status, 0, &usage);
        switch (linux.errno(rc)) {
            .SUCCESS => break,
            .INTR => continue,
            else => |e| return unexpected("wait4", e),
        }
    }
    const end_ns = monotonicNs();

    const end: End = if (collected.timed_out)
        .timed_out
    else if (linux.W.IFEXITED(status))
        .{ .exited = linux.W.EXITSTATUS(status) }
    else
        .{ .signaled = linux.W.TERMSIG(status) };
    assert(usage.maxrss >= 0);
    return .{
        .end = end,
        .rss_kib = @intCast(usage.maxrss),
        .parent_wall_ns = end_ns - start_ns,
        .stdout = options.stdout_buffer[0..collected.stdout_len],
    };
}

/// In the forked child: route stdout into the pipe and become a fresh copy of this program.
/// Only raw syscalls here (see `runSelf`). Exit code 127 says "exec failed", as in shells.
fn execChild(
    write_fd: i32,
    path: [*:0]const u8,
    argv: [*:null]const ?[*:0]const u8,
    envp: [*:null]const ?[*:0]const u8,
) noreturn {
    // dup2 onto fd 1 drops CLOEXEC on the copy, so only stdout survives the exec.
    if (linux.errno(linux.dup2(write_fd, 1)) != .SUCCESS) linux.exit_group(127);
    _ = linux.execve(path, argv, envp);
    linux.exit_group(127);
}

const Collected = struct { stdout_len: usize, timed_out: bool };

/// Reads the child's stdout until the child exits or the deadline passes. A pidfd makes the exit
/// itself pollable, so the parent sleeps in one `poll` instead of spinning on `WNOHANG`.
fn collect(pid: linux.pid_t, read_fd: i32, deadline_ns: u64, buffer: []u8) Error!Collected {
    const pidfd_rc = linux.pidfd_open(pid, 0);
    try check(pidfd_rc, "pidfd_open");
    const pidfd: i32 = @intCast(pidfd_rc);
    defer _ = linux.close(pidfd);

    var stdout_len: usize = 0;
    var pipe_open = true;
    while (true) {
        const now_ns = monotonicNs();
        if (now_ns >= deadline_ns) return .{ .stdout_len = stdout_len, .timed_out = true };
        // Round up so that the last poll does not wake just before the deadline and spin.
        const wait_ms = @min((deadline_ns - now_ns + std.time.ns_per_ms - 1) / std.time.ns_per_ms, std.math.maxInt(i32));
        var fds = [2]linux.pollfd{
            .{ .fd = pidfd, .events = linux.POLL.IN, .revents = 0 },
            // A negative fd is ignored by poll: the pipe is skipped once it reached EOF.
            .{ .fd = if (pipe_open) read_fd else -1, .events = linux.POLL.IN, .revents = 0 },
        };
        const rc = linux.poll(&fds, fds.len, @intCast(wait_ms));
        switch (linux.errno(rc)) {
            .SUCCESS => {},
            .INTR => continue,
            else => |e| return unexpected("poll", e),
        }
        if (fds[1].revents != 0) pipe_open = try drain(read_fd, buffer, &stdout_len, .once);
        if (fds[0].revents != 0) break;
    }
    // The child is gone, so every write end is closed and the rest of the pipe ends in EOF.
    if (pipe_open) _ = try drain(read_fd, buffer, &stdout_len, .to_eof);
    return .{ .stdout_len = stdout_len, .timed_out = false };
}

/// Reads once (or until EOF) into `buffer` after `len.*`; bytes past the buffer are dropped.
/// Returns whether the pipe is still open.
fn drain(fd: i32, buffer: []u8, len: *usize, mode: enum { once, to_eof }) Error!bool {
    var scratch: [512]u8 = undefined;
    while (true) {
        const dest = if (len.* < buffer.len) buffer[len.*..] else scratch[0..];
        const rc = linux.read(fd, dest.ptr, dest.len);
        switch (linux.errno(rc)) {
            .SUCCESS => {},
            .INTR => continue,
            else => |e| return unexpected("read", e),
        }
        if (rc == 0) return false;
        if (dest.ptr != &scratch) len.* += rc;
        assert(len.* <= buffer.len);
        if (mode == .once) return true;
    }
}

/// CLOCK_MONOTONIC in nanoseconds, read through std.os.linux (vDSO) rather than
/// `Io.Clock.awake.now(io)`, so that timing never goes through the Io under test.
pub fn monotonicNs() u64 {
    var ts: linux.timespec = undefined;
    const rc = linux.clock_gettime(.MONOTONIC, &ts);
    assert(linux.errno(rc) == .SUCCESS);
    return @as(u64, @intCast(ts.sec)) * std.time.ns_per_s + @as(u64, @intCast(ts.nsec));
}

/// Peak RSS of the calling process so far, in KiB.
pub fn selfPeakRssKib() u64 {
    var usage: linux.rusage = undefined;
    const rc = linux.getrusage(linux.rusage.SELF, &usage);
    assert(linux.errno(rc) == .SUCCESS);
    return @intCast(usage.maxrss);
}

fn check(rc: usize, comptime syscall: []const u8) Error!void {
    switch (linux.errno(rc)) {
        .SUCCESS => {},
        .MFILE, .NFILE, .NOMEM, .AGAIN => return error.SystemResources,
        else => |e| return unexpected(syscall, e),
    }
}

fn unexpected(comptime syscall: []const u8, e: linux.E) error{Unexpected} {
    std.debug.print("subprocess: {s} failed: {t}\n", .{ syscall, e });
    return error.Unexpected;
}
