//! File to socket without a copy through user space: `sendfile(2)`, waiting on the loop while
//! the socket's send buffer is full.
//!
//! sendfile has no per-call non-blocking flag: on a blocking socket (weft hands sockets out
//! blocking, `socket.zig`) it returns only once every byte asked for went into the send
//! buffer, holding the executor while the peer reads. So on an executor each call reads the
//! socket's mode (`F_GETFL`), and if it is blocking makes it non-blocking for the sendfile
//! alone and blocking again right after, on every path (`FIONBIO` twice): three syscalls
//! beside the sendfile, which moves up to a send buffer's worth. The socket is non-blocking
//! only while the call runs, never while the task waits for room: a blocking call that
//! another thread begins on the same socket inside that window may see `EAGAIN` (one already
//! waiting waits on: the kernel reads the mode when a call begins). A thread weft does not
//! run makes the blocking call, as std.Io.Threaded would. Rejected: a pipe and two `splice`
//! calls (whether splicing into a socket waits is the socket's own mode too, and a pipe costs
//! two descriptors), and bounding each call by the room left in the send buffer (the kernel's
//! accounting of it is not visible exactly from user space).
//!
//! sendfile reads the file from the page cache inside the call, on the calling thread: a file
//! that is not cached stalls the executor for the disk read. The alternative, reading through
//! the loop into a buffer and sending that, copies every byte twice and is kept as the
//! fallback for files sendfile refuses (`error.Unsupported`).
const std = @import("std");
const builtin = @import("builtin");
const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};
const assert = std.debug.assert;
const os = @import("../os/linux.zig");
const io_wait = @import("../sched/io_wait.zig");
const Executor = @import("../sched/Executor.zig");
const socket = @import("socket.zig");

/// Bytes one call moves at most: Linux's own cap on one read or write (MAX_RW_COUNT).
pub const call_bytes_max = 0x7fff_f000;

pub const Error = error{
    /// sendfile cannot read this file (a pipe or socket on older kernels, a file system
    /// without splice support); read and send it instead.
    Unsupported,
    /// The peer closed or reset the connection, or the socket is not connected.
    ConnectionClosed,
    /// Reading the file failed (EIO and the like).
    FileReadFailed,
    SystemResources,
    NetworkDown,
    Canceled,
    Unexpected,
};

/// Sends up to `count` bytes of `file_fd` to `socket_fd`, from `offset.*` (advanced by the
/// bytes sent) or, with a null `offset`, from the file's own position. Waits while the socket
/// cannot take any byte; returns as soon as some were sent (fewer than `count` is normal),
/// and 0 at the end of the file. Cancelation point while waiting.
pub fn send(socket_fd: os.fd_t, file_fd: os.fd_t, offset: ?*i64, count: usize) Error!usize {
    assert(count > 0);
    const bytes = @min(count, call_bytes_max);
    const on_executor = Executor.currentTask() != null;
    const blocking = on_executor and !try socket.isNonBlocking(socket_fd);
    // Bounded: each round either sends, fails, or waits for the socket to become writable.
    while (true) {
        const rc = if (blocking)
            try sendNonBlocking(socket_fd, file_fd, offset, bytes)
        else
            linux.sendfile(socket_fd, file_fd, offset, bytes);
        switch (os.errno(rc)) {
            .SUCCESS => return rc,
            .INTR => continue,
            .AGAIN => try waitWritable(socket_fd),
            .INVAL, .NOSYS, .OPNOTSUPP, .SPIPE => return error.Unsupported,
            .PIPE, .CONNRESET, .NOTCONN => return error.ConnectionClosed,
            .IO => return error.FileReadFailed,
            .NOMEM, .NOBUFS => return error.SystemResources,
            .NETDOWN => return error.NetworkDown,
            // Descriptors closed under us, or an offset and count we got wrong.
            .BADF, .FAULT, .OVERFLOW => |e| return os.errnoBug(e),
            else => |e| return os.unexpectedErrno(e),
        }
    }
}

/// One sendfile on the blocking socket `socket_fd`, made non-blocking for the call (see the
/// file doc). Returns sendfile's result; the socket is blocking again whatever it was.
fn sendNonBlocking(
    socket_fd: os.fd_t,
    file_fd: os.fd_t,
    offset: ?*i64,
    bytes: usize,
) Error!usize {
    try socket.setNonBlocking(socket_fd, true);
    const rc = linux.sendfile(socket_fd, file_fd, offset, bytes);
    try socket.setNonBlocking(socket_fd, false);
    return rc;
}

fn waitWritable(fd: os.fd_t) Error!void {
    const events = linux.POLL.OUT;
    if (Executor.currentTask() == null) {
        // A thread weft does not run has no loop: block it in poll(2), as its sockets do.
        var fds = [_]linux.pollfd{.{ .fd = fd, .events = events, .revents = 0 }};
        switch (os.errno(linux.poll(&fds, 1, -1))) {
            .SUCCESS, .INTR, .AGAIN => return, // the next sendfile says what happened
            .NOMEM => return error.SystemResources,
            else => |e| return os.unexpectedErrno(e),
        }
    }
    _ = io_wait.perform(.{ .poll = .{ .fd = fd, .events = events } }, null) catch |err| {
        return switch (err) {
            error.Canceled => error.Canceled,
            error.Timeout, error.SystemResources => unreachable, // no deadline, no timer
        };
    };
}
