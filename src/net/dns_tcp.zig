//! DNS messages over TCP (RFC 1035 §4.2.2, RFC 7766 §8): on a stream each message is preceded
//! by its length, two bytes in network order. A `Connection` connects to one name server,
//! sends queries (several at once: RFC 7766 §6.2.1.1 pipelining) and receives replies, in any
//! order, one message at a time. The policy (which queries, which server, what a reply means)
//! is `dns_client.zig`'s.
//!
//! Every wait (connect, send, receive) is a loop operation through `sched/io_wait.zig` with the
//! caller's deadline: it parks only the calling fiber, is a cancelation point that cancels the
//! kernel operation, and on a thread weft does not run waits in poll(2). The socket is one of
//! weft's internal ones (close-on-exec, non-blocking: `socket.zig`); sends pass MSG_NOSIGNAL.
//!
//! A reply longer than the caller's buffer is kept as far as it fits (`Received.cut`), and the
//! rest is skipped before the next message is read, so one oversized reply does not cost the
//! replies behind it on the same connection.
const std = @import("std");
const builtin = @import("builtin");
const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};
const posix = std.posix;
const assert = std.debug.assert;
const IpAddress = std.Io.net.IpAddress;
const dns = @import("dns.zig");
const socket = @import("socket.zig");
const os = @import("../os/linux.zig");
const io_wait = @import("../sched/io_wait.zig");
const Op = @import("../loop/Completion.zig").Op;

/// The length prefix of every message on a stream.
pub const length_bytes = 2;
/// Messages one `send` writes at most (each takes two iovecs: its length and its bytes).
pub const messages_max = 4;

pub const Error = error{
    Canceled,
    /// The deadline passed.
    Timeout,
    SystemResources,
    ProcessFdQuotaExceeded,
    SystemFdQuotaExceeded,
    /// The server refused or reset the connection, or could not be reached (no route, the
    /// network down, a firewall, no socket of its address family here).
    ServerUnreachable,
    /// The server closed the connection where a message would have begun.
    ConnectionClosed,
    /// The connection ended inside a message: fewer bytes came than its length announced.
    MessageCut,
    /// A length that cannot be a DNS message (shorter than a header).
    InvalidLength,
    Unexpected,
};

pub const Connection = struct {
    fd: socket.fd_t,
    /// Bytes of the last reply that did not fit the caller's buffer, still on the stream.
    unread_bytes: u16 = 0,

    /// Connects to `server` by `deadline_ns` (CLOCK_MONOTONIC). Cancelation point. The
    /// socket is closed on every error; on success `close` releases it.
    pub fn open(server: *const IpAddress, deadline_ns: u64) Error!Connection {
        const family = socket.family(server);
        const flags = socket.flags_nonblocking; // internal (`socket.zig`)
        const fd = socket.open(family, .stream, .tcp, flags) catch |err| switch (err) {
            // No IPv6 (or no TCP) here: this server cannot be reached from this host.
            error.AddressFamilyUnsupported,
            error.ProtocolUnsupportedBySystem,
            error.ProtocolUnsupportedByAddressFamily,
            error.SocketModeUnsupported,
            => return error.ServerUnreachable,
            error.ProcessFdQuotaExceeded,
            error.SystemFdQuotaExceeded,
            error.SystemResources,
            error.Unexpected,
            => |e| return e,
        };
        errdefer os.closeFd(fd);
        var storage: socket.IpStorage = undefined;
        const op: Op = .{ .connect = .{
            .fd = fd,
            .addr = &storage.any,
            .addr_len = socket.ipToPosix(server, &storage),
        } };
        const result = try io_wait.perform(op, deadline_ns);
        if (result < 0) return connectError(errnoOf(result));
        assert(result == 0);
        return .{ .fd = fd };
    }

    pub fn close(connection: *Connection) void {
        os.closeFd(connection.fd);
        connection.fd = -1;
    }

    /// Sends each of `messages` after its length, all of them, in as few `sendmsg` calls as
    /// the socket buffer allows. Cancelation point.
    pub fn send(
        connection: *Connection,
        messages: []const []const u8,
        deadline_ns: u64,
    ) Error!void {
        assert(messages.len > 0 and messages.len <= messages_max);
        var prefixes: [messages_max][length_bytes]u8 = undefined;
        var iovecs: [2 * messages_max]posix.iovec_const = undefined;
        var total: usize = 0;
        for (messages, 0..) |message, i| {
            assert(message.len >= dns.header_bytes and message.len <= std.math.maxInt(u16));
            std.mem.writeInt(u16, &prefixes[i], @intCast(message.len), .big);
            iovecs[2 * i] = .{ .base = &prefixes[i], .len = length_bytes };
            iovecs[2 * i + 1] = .{ .base = message.ptr, .len = message.len };
            total += length_bytes + message.len;
        }
        var pending: []posix.iovec_const = iovecs[0 .. 2 * messages.len];
        var sent: usize = 0;
        // Bounded: every round sends at least one byte (a send of none is an error below).
        while (sent < total) {
            const n = try sendSome(connection.fd, pending, deadline_ns);
            sent += n;
            pending = advance(pending, n);
        }
        assert(sent == total);
        assert(pending.len == 0);
    }

    pub const Received = struct {
        /// The message, or as much of it as `buffer` held.
        message: []u8,
        /// The message was longer than `buffer`: `message` is its beginning.
        cut: bool,
    };

    /// Receives the next message into `buffer` (first skipping what was left of a cut one).
    /// Cancelation point.
    pub fn receive(connection: *Connection, buffer: []u8, deadline_ns: u64) Error!Received {
        assert(buffer.len >= dns.header_bytes);
        try connection.skipUnread(buffer, deadline_ns);
        assert(connection.unread_bytes == 0);
        var prefix: [length_bytes]u8 = undefined;
        // The first byte on its own: an end before it is a close between messages.
        readExactly(connection.fd, prefix[0..1], deadline_ns) catch |err| switch (err) {
            error.EndOfStream => return error.ConnectionClosed,
            else => |e| return e,
        };
        readExactly(connection.fd, prefix[1..], deadline_ns) catch |err| switch (err) {
            error.EndOfStream => return error.MessageCut,
            else => |e| return e,
        };
        const len = std.mem.readInt(u16, &prefix, .big);
        if (len < dns.header_bytes) return error.InvalidLength;
        const kept = @min(len, buffer.len);
        readExactly(connection.fd, buffer[0..kept], deadline_ns) catch |err| switch (err) {
            error.EndOfStream => return error.MessageCut,
            else => |e| return e,
        };
        connection.unread_bytes = @intCast(len - kept);
        return .{ .message = buffer[0..kept], .cut = kept < len };
    }

    /// Reads and drops the rest of a cut message, through `scratch`.
    fn skipUnread(connection: *Connection, scratch: []u8, deadline_ns: u64) Error!void {
        // Bounded: each round drops at least one byte of at most 65,535.
        while (connection.unread_bytes > 0) {
            const chunk = scratch[0..@min(scratch.len, connection.unread_bytes)];
            readExactly(connection.fd, chunk, deadline_ns) catch |err| switch (err) {
                error.EndOfStream => return error.MessageCut,
                else => |e| return e,
            };
            connection.unread_bytes -= @intCast(chunk.len);
        }
    }
};

fn errnoOf(result: i32) os.E {
    assert(result < 0);
    return @enumFromInt(-result);
}

fn connectError(e: os.E) Error {
    return switch (e) {
        .CONNREFUSED, .CONNRESET, .HOSTUNREACH, .NETUNREACH, .NETDOWN => error.ServerUnreachable,
        .TIMEDOUT => error.ServerUnreachable, // the kernel gave up on the handshake
        .ACCES, .PERM => error.ServerUnreachable, // a firewall rule
        .ADDRNOTAVAIL => error.ServerUnreachable, // no local address (or port) to reach it from
        .NOBUFS, .NOMEM => error.SystemResources,
        // The loop waits for EINPROGRESS/EAGAIN itself; the rest are bugs of this file.
        .AGAIN, .INPROGRESS, .ALREADY, .AFNOSUPPORT, .BADF, .FAULT, .ISCONN, .NOTSOCK => {
            return os.errnoBug(e);
        },
        else => os.unexpectedErrno(e),
    };
}

/// Errors of a send or receive on a connected stream.
fn streamError(e: os.E) Error {
    return switch (e) {
        .CONNRESET, .PIPE, .NOTCONN, .TIMEDOUT => error.ServerUnreachable,
        .HOSTUNREACH, .NETUNREACH, .NETDOWN, .CONNREFUSED => error.ServerUnreachable,
        .NOBUFS, .NOMEM => error.SystemResources,
        // The loop waits for EAGAIN itself; the rest are bugs of this file.
        .AGAIN, .BADF, .FAULT, .INVAL, .NOTSOCK, .MSGSIZE, .OPNOTSUPP => os.errnoBug(e),
        else => os.unexpectedErrno(e),
    };
}

fn sendSome(fd: socket.fd_t, iovecs: []const posix.iovec_const, deadline_ns: u64) Error!usize {
    assert(iovecs.len > 0);
    const msg: linux.msghdr_const = .{
        .name = null,
        .namelen = 0,
        .iov = iovecs.ptr,
        .iovlen = iovecs.len,
        .control = null,
        .controllen = 0,
        .flags = 0,
    };
    const op: Op = .{ .sendmsg = .{ .fd = fd, .msg = &msg, .flags = linux.MSG.NOSIGNAL } };
    const result = try io_wait.perform(op, deadline_ns);
    if (result < 0) return streamError(errnoOf(result));
    // A stream socket with room sends at least one byte; nothing sent would loop forever.
    if (result == 0) return error.ServerUnreachable;
    return @intCast(result);
}

/// `iovecs` without their first `n` bytes (the first remaining one shortened in place).
fn advance(iovecs: []posix.iovec_const, n: usize) []posix.iovec_const {
    var rest = iovecs;
    var left = n;
    while (rest.len > 0 and left >= rest[0].len) {
        left -= rest[0].len;
        rest = rest[1..];
    }
    assert(left == 0 or rest.len > 0);
    if (left > 0) {
        rest[0].base += left;
        rest[0].len -= left;
    }
    return rest;
}

const ReadError = Error || error{
    /// The stream ended before the buffer was full.
    EndOfStream,
};

/// Fills `buffer` from the stream; `error.EndOfStream` if it ends first.
fn readExactly(fd: socket.fd_t, buffer: []u8, deadline_ns: u64) ReadError!void {
    var filled: usize = 0;
    // Bounded: every round reads at least one byte or ends.
    while (filled < buffer.len) {
        const result = try socket.receiveOnLoop(fd, buffer[filled..], null, deadline_ns);
        if (result < 0) return streamError(errnoOf(result));
        if (result == 0) return error.EndOfStream;
        filled += @intCast(result);
    }
    assert(filled == buffer.len);
}

// Tests over a Unix socket pair on the test's own thread: the framing does not care what the
// stream is, and on a thread weft does not run every wait is poll(2).

fn testPair() ![2]socket.fd_t {
    return socket.pair(linux.AF.UNIX, .stream, null);
}

fn writeAll(fd: socket.fd_t, bytes: []const u8) !void {
    const rc = linux.write(fd, bytes.ptr, bytes.len);
    if (os.errno(rc) != .SUCCESS or rc != bytes.len) return error.Unexpected;
}

fn testDeadline() u64 {
    return os.monotonicNs() + 10 * std.time.ns_per_s; // never reached by a passing test
}

test "dns_tcp: queries go out after their lengths, replies come back one at a time" {
    const fds = try testPair();
    defer os.closeFd(fds[1]);
    var connection: Connection = .{ .fd = fds[0] };
    defer connection.close();
    const first = "Q" ** 12;
    const second = "q" ** 300;
    try connection.send(&.{ first, second }, testDeadline());
    var wire: [2 * length_bytes + first.len + second.len]u8 = undefined;
    const rc = linux.read(fds[1], &wire, wire.len);
    try std.testing.expectEqual(wire.len, rc);
    try std.testing.expectEqualSlices(u8, "\x00\x0c" ++ first ++ "\x01\x2c" ++ second, &wire);

    // A reply longer than the buffer is cut, and its rest skipped before the next one.
    try writeAll(fds[1], "\x00\x28" ++ "a" ** 40 ++ "\x00\x14" ++ "b" ** 20);
    var buffer: [32]u8 = undefined;
    const long = try connection.receive(buffer[0..16], testDeadline());
    try std.testing.expect(long.cut);
    try std.testing.expectEqualStrings("a" ** 16, long.message);
    const short = try connection.receive(&buffer, testDeadline());
    try std.testing.expect(!short.cut);
    try std.testing.expectEqualStrings("b" ** 20, short.message);
    try std.testing.expectEqual(@as(u16, 0), connection.unread_bytes);
    // The peer closes between messages.
    try socket.shutdown(fds[1], .send);
    const after_close = connection.receive(&buffer, testDeadline());
    try std.testing.expectError(error.ConnectionClosed, after_close);
}

test "dns_tcp: a stream that ends inside a message or announces too little is an error" {
    var buffer: [64]u8 = undefined;
    const cases = [_]struct { wire: []const u8, expected: Error, kept_first: bool = false }{
        .{ .wire = "\x00", .expected = error.MessageCut }, // half a length
        .{ .wire = "\x00\x64" ++ "x" ** 10, .expected = error.MessageCut }, // 10 of 100 bytes
        .{ .wire = "\x00\x03abc", .expected = error.InvalidLength }, // shorter than a header
        // 70 of 80 bytes: the 64 that fit are kept; the end is found while skipping the rest.
        .{ .wire = "\x00\x50" ++ "y" ** 70, .expected = error.MessageCut, .kept_first = true },
    };
    for (cases) |case| {
        const fds = try testPair();
        var connection: Connection = .{ .fd = fds[0] };
        defer connection.close();
        try writeAll(fds[1], case.wire);
        os.closeFd(fds[1]);
        const outcome = connection.receive(&buffer, testDeadline());
        if (case.kept_first) {
            const received = try outcome;
            try std.testing.expect(received.cut);
            try std.testing.expectError(case.expected, connection.receive(&buffer, testDeadline()));
        } else {
            try std.testing.expectError(case.expected, outcome);
        }
    }
}

test "dns_tcp: a receive waits no longer than its deadline" {
    const fds = try testPair();
    defer os.closeFd(fds[1]);
    var connection: Connection = .{ .fd = fds[0] };
    defer connection.close();
    var buffer: [64]u8 = undefined;
    const deadline_ns = os.monotonicNs() + std.time.ns_per_ms;
    try std.testing.expectError(error.Timeout, connection.receive(&buffer, deadline_ns));
}
