//! One operation on a loop, owned by the caller (the loop allocates nothing).
//!
//! Life cycle: `idle` → `submitted` (in the kernel or the readiness set) → `completed` (its
//! result is set and it is on the loop's reaped queue) → the loop runs `callback` and the
//! completion is `idle` again, ready for reuse. A completion must stay at a fixed address and
//! alive from `submit` until its callback has run.
const Completion = @This();

const std = @import("std");
const posix = std.posix;

op: Op,
/// Called on the loop's thread after the operation finished, outside of any reap loop.
callback: *const fn (completion: *Completion) void,
/// Non-negative: the syscall's return value. Negative: `-errno` (`-ECANCELED` if canceled).
result: i32 = 0,
state: State = .idle,
/// Link for the loop's reaped queue.
next: ?*Completion = null,
/// epoll backend: the duplicated descriptor registered for this completion, or -1.
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
    recvmsg: struct { fd: posix.fd_t, msg: *posix.msghdr, flags: u32 },
    /// `sendmsg`; result is the number of bytes sent. Callers pass MSG_NOSIGNAL.
    sendmsg: struct { fd: posix.fd_t, msg: *const posix.msghdr_const, flags: u32 },

    /// The descriptor the operation works on.
    pub fn fd(op: Op) posix.fd_t {
        return switch (op) {
            inline else => |o| o.fd,
        };
    }

    /// Whether the epoll backend tries this operation's syscall before waiting for readiness
    /// (socket operations: weft's sockets are non-blocking, see `nonblocking.zig`).
    pub fn triesFirst(op: Op) bool {
        return switch (op) {
            .accept, .connect, .recvmsg, .sendmsg => true,
            .read, .write, .poll => false,
        };
    }
};

/// The error of a finished operation, or null when it succeeded.
pub fn err(c: *const Completion) ?std.os.linux.E {
    if (c.result >= 0) return null;
    return @enumFromInt(-c.result);
}

pub const Queue = @import("../intrusive.zig").Queue(Completion);
