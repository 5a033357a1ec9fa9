//! What a pending operation sees when its peer goes away, on each backend, in milliseconds
//! rather than at a timeout: a read, the end of the stream once the peer shuts its sending side
//! or closes its end of a pipe; a write, the reset of a peer that closed without reading. On
//! epoll these come from the peer's half-close (`EPOLLRDHUP`) and hang-up (`EPOLLHUP`,
//! `EPOLLERR`) events of the descriptor's registration (backend/epoll.zig); a backend that
//! dropped them would leave the operation parked until something else woke it.
const std = @import("std");
const builtin = @import("builtin");
const Io = std.Io;
const net = Io.net;
const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};
const testing = std.testing;
const Runtime = @import("../Runtime.zig");
const os = @import("../os/linux.zig");
const parked = @import("parked.zig");
const fs_test = @import("fs_test.zig");

const qemu = @import("qemu.zig");

const Backend = @FieldType(Runtime.Options, "backend");
const backends = [_]Backend{ .epoll, .io_uring };

/// Whether this run can use `backend`: qemu-user has no io_uring (src/testing/qemu.zig).
fn available(backend: Backend) bool {
    return backend != .io_uring or !qemu.underQemu();
}

/// How soon the parked operation must see its peer go: far under any timeout weft has, and room
/// for a loaded machine.
const seen_within_ns = 500 * std.time.ns_per_ms;

const Pair = @import("loopback.zig").Pair;

/// Reads until the end of the stream; returns when it came, or an error.
fn readToEnd(io: Io, stream: net.Stream, ended_ns: *std.atomic.Value(u64)) !void {
    var buffer: [64]u8 = undefined;
    var reader = stream.reader(io, &buffer);
    const rest = reader.interface.allocRemaining(testing.allocator, .unlimited) catch |err|
        return if (err == error.ReadFailed) reader.err.? else err;
    defer testing.allocator.free(rest);
    try testing.expectEqual(@as(usize, 0), rest.len);
    ended_ns.store(os.monotonicNs(), .release);
}

test "readiness: a parked read sees its peer's half-close at once, on each backend" {
    for (backends) |backend| {
        if (!available(backend)) continue;
        var rt = try Runtime.init(testing.allocator, .{ .backend = backend });
        defer rt.deinit();
        const io = rt.io();
        var pair: Pair = try .open(io);
        defer pair.close(io);
        var ended_ns: std.atomic.Value(u64) = .init(0);
        var reading = try io.concurrent(readToEnd, .{ io, pair.client, &ended_ns });
        defer reading.cancel(io) catch {};
        try parked.waitParked(io, &reading, .cancelable);
        const shut_ns = os.monotonicNs();
        try pair.peer.shutdown(io, .send);
        try expectSoon(io, backend, "a read's end of stream", shut_ns, &ended_ns);
        try reading.await(io);
    }
}

fn readPipeToEnd(io: Io, file: Io.File, ended_ns: *std.atomic.Value(u64)) !void {
    var bytes: [8]u8 = undefined;
    var buffers = [_][]u8{&bytes};
    // The end of file is `error.EndOfStream` (std.Io.File.readStreaming).
    if (file.readStreaming(io, &buffers)) |read| {
        std.debug.print("read {d} bytes from a pipe nobody wrote to\n", .{read});
        return error.TestUnexpectedResult;
    } else |err| switch (err) {
        error.EndOfStream => ended_ns.store(os.monotonicNs(), .release),
        else => |e| return e,
    }
}

test "readiness: a parked pipe read sees the writer's close at once, on each backend" {
    for (backends) |backend| {
        if (!available(backend)) continue;
        var rt = try Runtime.init(testing.allocator, .{ .backend = backend });
        defer rt.deinit();
        const io = rt.io();
        const files = try fs_test.pipe();
        defer files[0].close(io);
        var ended_ns: std.atomic.Value(u64) = .init(0);
        var reading = try io.concurrent(readPipeToEnd, .{ io, files[0], &ended_ns });
        defer reading.cancel(io) catch {};
        try parked.waitParked(io, &reading, .cancelable);
        const closed_ns = os.monotonicNs();
        files[1].close(io);
        try expectSoon(io, backend, "a pipe read's end of file", closed_ns, &ended_ns);
        try reading.await(io);
    }
}

/// Writes until the write fails; returns the error, and notes when it came.
fn writeUntilFailure(io: Io, stream: net.Stream, failed_ns: *std.atomic.Value(u64)) anyerror!void {
    var buffer: [64 * 1024]u8 = undefined;
    @memset(&buffer, 'x');
    var writer = stream.writer(io, &.{});
    while (true) {
        writer.interface.writeAll(&buffer) catch |err| {
            failed_ns.store(os.monotonicNs(), .release);
            return if (err == error.WriteFailed) writer.err.? else err;
        };
    }
}

test "readiness: a parked write sees its peer's reset at once, on each backend" {
    for (backends) |backend| {
        if (!available(backend)) continue;
        var rt = try Runtime.init(testing.allocator, .{ .backend = backend });
        defer rt.deinit();
        const io = rt.io();
        var pair: Pair = try .open(io);
        defer pair.client.close(io);
        defer pair.server.deinit(io);
        var failed_ns: std.atomic.Value(u64) = .init(0);
        var writing = try io.concurrent(writeUntilFailure, .{ io, pair.client, &failed_ns });
        defer writing.cancel(io) catch {};
        // Parked once both sides' buffers are full: the peer never reads.
        try parked.waitParked(io, &writing, .cancelable);
        // Closed with unread bytes and a zero linger: the kernel resets the connection.
        const linger: linux.linger = .{ .onoff = 1, .linger = 0 };
        try testing.expectEqual(@as(usize, 0), linux.setsockopt(
            pair.peer.socket.handle,
            linux.SOL.SOCKET,
            linux.SO.LINGER,
            std.mem.asBytes(&linger),
            @sizeOf(linux.linger),
        ));
        const reset_ns = os.monotonicNs();
        pair.peer.close(io);
        try expectSoon(io, backend, "a write's reset", reset_ns, &failed_ns);
        if (writing.await(io)) |_| return error.TestUnexpectedResult else |err| {
            try testing.expect(err == error.ConnectionResetByPeer or
                err == error.SocketUnconnected);
        }
    }
}

/// Waits for `seen_ns` to be set, up to 2 s (so that an operation left parked fails the test
/// by name, not at the runner's timeout: the caller's deferred cancel then ends it), and
/// checks it came within `seen_within_ns` of `cause_ns`.
fn expectSoon(
    io: Io,
    backend: Backend,
    what: []const u8,
    cause_ns: u64,
    seen: *const std.atomic.Value(u64),
) !void {
    for (0..2000) |_| {
        if (seen.load(.acquire) != 0) break;
        try io.sleep(.fromMilliseconds(1), .awake);
    }
    const seen_ns = seen.load(.acquire);
    if (seen_ns != 0 and seen_ns -| cause_ns <= seen_within_ns) return;
    std.debug.print("{t}: {s} came {d} ms after its cause (0: not within 2 s)\n", .{
        backend, what, if (seen_ns == 0) 0 else (seen_ns -| cause_ns) / std.time.ns_per_ms,
    });
    return error.TestUnexpectedResult;
}
