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
};

/// The error of a finished operation, or null when it succeeded.
pub fn err(c: *const Completion) ?std.os.linux.E {
    if (c.result >= 0) return null;
    return @enumFromInt(-c.result);
}

pub const Queue = @import("../intrusive.zig").Queue(Completion);
