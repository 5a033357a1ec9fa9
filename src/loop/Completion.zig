//! One operation on a loop, owned by the caller (the loop allocates nothing).
//!
//! Life cycle: `idle` → `submitted` (in the kernel or the readiness set) → `completed` (its
//! result is set and it is on the loop's reaped queue) → the loop runs `callback` and the
//! completion is `idle` again, ready for reuse. A completion must stay at a fixed address and
//! alive from `submit` until its callback has run.
//!
//! 80 bytes on 64-bit targets (a test below pins it, as libxev's does): every task waiting for
//! I/O holds one in its frame (sched/io_wait.zig), so a larger `Op` grows every waiting task.
const Completion = @This();

const std = @import("std");
const builtin = @import("builtin");
const posix = std.posix;
const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};

op: Op,
/// Called on the loop's thread after the operation finished, outside of any reap loop.
callback: *const fn (completion: *Completion) void,
/// Non-negative: the syscall's return value. Negative: `-errno` (`-ECANCELED` if canceled).
result: i32 = 0,
state: State = .idle,
/// Link for the loop's reaped queue.
next: ?*Completion = null,
/// epoll backend: the descriptor in whose watch list this completion waits, or -1 (not
/// waiting: finished, or ready to run; see backend/Watches.zig).
epoll_fd: posix.fd_t = -1,

pub const State = enum { idle, submitted, completed };

pub const Op = union(enum) {
    /// `preadv`; `offset == null` reads at the current file position (pipes, sockets, ttys).
    read: struct { fd: posix.fd_t, iovecs: []const posix.iovec, offset: ?u64 },
    /// `pwritev`; `offset == null` writes at the current file position.
    write: struct { fd: posix.fd_t, iovecs: []const posix.iovec_const, offset: ?u64 },
    /// Waits until `fd` reports any of `events` (POLLIN, POLLOUT, ...); result is the revents.
    poll: struct { fd: posix.fd_t, events: u32 },
    /// `accept4`; result is the new descriptor. `flags` are accept4's (SOCK_CLOEXEC, ...).
    accept: struct {
        fd: posix.fd_t,
        addr: *posix.sockaddr,
        addr_len: *posix.socklen_t,
        flags: u32,
    },
    /// `connect` on a non-blocking socket; result is 0 once connected.
    connect: struct {
        fd: posix.fd_t,
        addr: *const posix.sockaddr,
        addr_len: posix.socklen_t,
        /// Backend-owned: the epoll backend started the connect and now waits for its outcome.
        started: bool = false,
    },
    /// `recvmsg`; result is the number of bytes received, 0 at end of stream.
    recvmsg: struct { fd: posix.fd_t, msg: *linux.msghdr, flags: u32 },
    /// `sendmsg`; result is the number of bytes sent. Callers pass MSG_NOSIGNAL.
    sendmsg: struct { fd: posix.fd_t, msg: *const linux.msghdr_const, flags: u32 },
    /// `recv` into one buffer; result as `recvmsg`. Cheaper than a `recvmsg` of one iovec: the
    /// kernel copies and checks no message header and imports no iovec array.
    recv: struct { fd: posix.fd_t, buffer: []u8, flags: u32 },
    /// `send` of one buffer; result as `sendmsg`. Callers pass MSG_NOSIGNAL.
    send: struct { fd: posix.fd_t, buffer: []const u8, flags: u32 },

    // File system operations. The paths are borrowed until the completion's callback ran.
    // `fd` is the directory the path is resolved against (AT_FDCWD allowed).

    /// `openat`; result is the new descriptor.
    openat: struct { fd: posix.fd_t, path: [*:0]const u8, flags: linux.O, mode: linux.mode_t },
    /// `statx` into `buffer`; result is 0.
    statx: struct {
        fd: posix.fd_t,
        path: [*:0]const u8,
        flags: u32,
        mask: linux.STATX,
        buffer: *linux.Statx,
    },
    /// `fsync`, or `fdatasync` when `datasync`; result is 0.
    fsync: struct { fd: posix.fd_t, datasync: bool },
    /// `ftruncate`; result is 0.
    ftruncate: struct { fd: posix.fd_t, length: u64 },
    /// `unlinkat` (`AT_REMOVEDIR` in `flags` removes a directory); result is 0.
    unlinkat: struct { fd: posix.fd_t, path: [*:0]const u8, flags: u32 },
    /// `renameat2`; result is 0. `fd`/`path` name the old entry.
    renameat: struct {
        fd: posix.fd_t,
        path: [*:0]const u8,
        new_fd: posix.fd_t,
        new_path: [*:0]const u8,
        flags: u32,
    },
    /// `mkdirat`; result is 0.
    mkdirat: struct { fd: posix.fd_t, path: [*:0]const u8, mode: linux.mode_t },
    /// `symlinkat`: a link at `fd`/`path` pointing at `target`; result is 0.
    symlinkat: struct { fd: posix.fd_t, path: [*:0]const u8, target: [*:0]const u8 },
    /// `linkat`; result is 0. `fd`/`path` name the existing entry.
    linkat: struct {
        fd: posix.fd_t,
        path: [*:0]const u8,
        new_fd: posix.fd_t,
        new_path: [*:0]const u8,
        flags: u32,
    },
    /// `waitid(P_PID, pid, info, options)`; result is 0 (or the errno).
    waitid: struct { pid: linux.pid_t, info: *linux.siginfo_t, options: u32 },

    pub const Tag = std.meta.Tag(Op);
    pub const Read = @FieldType(Op, "read");
    pub const Write = @FieldType(Op, "write");
    pub const Ftruncate = @FieldType(Op, "ftruncate");
    pub const Openat = @FieldType(Op, "openat");
    pub const Mkdirat = @FieldType(Op, "mkdirat");
    pub const Symlinkat = @FieldType(Op, "symlinkat");

    /// The descriptor the operation works on (for a path operation, its directory).
    pub fn fd(op: Op) posix.fd_t {
        return switch (op) {
            .waitid => unreachable, // works on a process, not a descriptor
            inline else => |o| o.fd,
        };
    }

    /// Whether the epoll backend tries this operation's syscall before waiting for readiness
    /// (socket operations, which never block there: see `nonblocking.zig`).
    pub fn triesFirst(op: Op) bool {
        return switch (op) {
            .accept, .connect, .recvmsg, .sendmsg, .recv, .send => true,
            .read, .write, .poll => false,
            .openat, .statx, .fsync, .ftruncate, .unlinkat, .renameat => false,
            .mkdirat, .symlinkat, .linkat, .waitid => false,
        };
    }

    /// Whether the operation waits for readiness, which both backends can do asynchronously;
    /// the others (file system, process) only io_uring can (see `Loop.supports`).
    pub fn isReadiness(tag: Tag) bool {
        return switch (tag) {
            .read, .write, .poll, .accept, .connect, .recvmsg, .sendmsg, .recv, .send => true,
            .openat, .statx, .fsync, .ftruncate, .unlinkat, .renameat => false,
            .mkdirat, .symlinkat, .linkat, .waitid => false,
        };
    }
};

/// The result of a `read` or `write` on the epoll backend whose descriptor epoll cannot watch
/// (a regular file or a directory): the operation did not run, and would block the loop's
/// thread if it did. The caller runs it elsewhere (weft's blocking lane). Never an errno.
pub const result_unpollable: i32 = std.math.minInt(i32);

/// The error of a finished operation, or null when it succeeded.
pub fn err(c: *const Completion) ?std.os.linux.E {
    if (c.result >= 0) return null;
    return @enumFromInt(-c.result);
}

pub const Queue = @import("../intrusive.zig").Queue(Completion);

/// Who reaps a backend: the loop's own thread (`Loop.poll`), or a rescuer on another thread
/// (`Loop.rescue`), which must neither enter io_uring's kernel side (only the ring's thread
/// may) nor run a system call that could block it.
pub const Reaper = enum { loop_thread, rescuer };

/// What one reap of a backend found.
pub const Reaped = struct {
    /// Completions moved to the reaper's queue.
    completions: usize = 0,
    /// Whether the loop's wake-up fired (an eventfd written by another thread).
    woken: bool = false,
};

test "Completion: 80 bytes" {
    try std.testing.expectEqual(@as(usize, 80), @sizeOf(Completion));
}
