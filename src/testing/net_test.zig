//! std.Io networking on weft, written against std.Io.net only (loopback). Runs on both
//! backends (`WEFT_BACKEND`). No timed assertions: timeouts are only checked to happen.
const std = @import("std");
const builtin = @import("builtin");
const Io = std.Io;
const net = Io.net;
const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};
const testing = std.testing;
const Runtime = @import("../Runtime.zig");
const parked = @import("parked.zig");

fn withRuntime(comptime body: fn (io: Io) anyerror!void) !void {
    var rt = try Runtime.init(testing.allocator, .{});
    defer rt.deinit();
    try body(rt.io());
}

const loopback: net.IpAddress = .{ .ip4 = .loopback(0) };

/// Echoes everything the peer sends until it shuts its sending side, then closes.
fn echoOne(io: Io, server: *net.Server) !void {
    const stream = try server.accept(io);
    defer stream.close(io);
    var read_buffer: [64]u8 = undefined;
    var write_buffer: [64]u8 = undefined;
    var reader = stream.reader(io, &read_buffer);
    var writer = stream.writer(io, &write_buffer);
    _ = try reader.interface.streamRemaining(&writer.interface);
    try writer.interface.flush();
}

/// Sends `message`, half-closes, and expects the same bytes back followed by end of stream.
fn expectEcho(io: Io, stream: net.Stream, message: []const u8) !void {
    var write_buffer: [16]u8 = undefined;
    var writer = stream.writer(io, &write_buffer);
    try writer.interface.writeAll(message);
    try writer.interface.flush();
    try stream.shutdown(io, .send);
    var read_buffer: [16]u8 = undefined;
    var reader = stream.reader(io, &read_buffer);
    const echoed = try reader.interface.allocRemaining(testing.allocator, .unlimited);
    defer testing.allocator.free(echoed);
    try testing.expectEqualStrings(message, echoed);
}

test "net: TCP echo over loopback, half-close and end of stream" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var server = try loopback.listen(io, .{ .reuse_address = true });
            defer server.deinit(io);
            try testing.expect(server.socket.address.getPort() != 0);
            var echo = try io.concurrent(echoOne, .{ io, &server });
            const stream = try server.socket.address.connect(io, .{ .mode = .stream });
            defer stream.close(io);
            // Larger than every buffer on the way: partial reads and writes on both sides.
            const message = "the quick brown fox jumps over the lazy dog, " ** 40;
            try expectEcho(io, stream, message);
            try echo.await(io);
        }
    }.body);
}

test "net: Unix socket echo" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var path_buffer: [64]u8 = undefined;
            var suffix: [8]u8 = undefined;
            io.random(&suffix);
            const format = "/tmp/weft-net-{x}.sock\x00";
            const path_z = try std.fmt.bufPrint(&path_buffer, format, .{suffix});
            const path = path_z[0 .. path_z.len - 1];
            const address = try net.UnixAddress.init(path);
            var server = try address.listen(io, .{});
            defer server.deinit(io);
            defer _ = linux.unlink(@ptrCast(path_z.ptr));
            var echo = try io.concurrent(echoOne, .{ io, &server });
            const stream = try address.connect(io);
            defer stream.close(io);
            try expectEcho(io, stream, "over a Unix socket");
            try echo.await(io);
        }
    }.body);
}

/// Accepts one connection and, once the peer has seen its connect succeed (`connected`),
/// resets it. Resetting earlier would race the peer's connect: on epoll a non-blocking connect
/// that finds the socket already reset reports ECONNRESET, a correct but different outcome.
fn acceptAndReset(io: Io, server: *net.Server, connected: *Io.Event) !void {
    const stream = try server.accept(io);
    try connected.wait(io);
    // Linger with a zero timeout: close sends RST instead of FIN.
    const linger: linux.linger = .{ .onoff = 1, .linger = 0 };
    const bytes = std.mem.asBytes(&linger);
    const fd = stream.socket.handle;
    const rc = linux.setsockopt(fd, linux.SOL.SOCKET, linux.SO.LINGER, bytes, bytes.len);
    try testing.expectEqual(@as(usize, 0), rc);
    stream.close(io);
}

test "net: peer reset is ConnectionResetByPeer; writes to it never raise SIGPIPE" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var server = try loopback.listen(io, .{});
            defer server.deinit(io);
            var connected: Io.Event = .unset;
            var resetter = try io.concurrent(acceptAndReset, .{ io, &server, &connected });
            // On an early failure the resetter is canceled, not left alive past the runtime.
            defer resetter.cancel(io) catch {};
            const stream = try server.socket.address.connect(io, .{ .mode = .stream });
            defer stream.close(io);
            connected.set(io);
            try resetter.await(io);
            var buffer: [8]u8 = undefined;
            var reader = stream.reader(io, &buffer);
            try testing.expectError(error.ReadFailed, reader.interface.takeByte());
            try testing.expectEqual(error.ConnectionResetByPeer, reader.err.?);
            // The connection is gone: a write fails with an error, the process lives on.
            var writer = stream.writer(io, &.{});
            try testing.expectError(error.WriteFailed, writer.interface.writeAll("x"));
            try testing.expect(writer.err.? == error.SocketUnconnected or
                writer.err.? == error.ConnectionResetByPeer);
        }
    }.body);
}

test "net: connect to a closed port is ConnectionRefused" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var server = try loopback.listen(io, .{});
            const address = server.socket.address;
            server.deinit(io);
            try testing.expectError(
                error.ConnectionRefused,
                address.connect(io, .{ .mode = .stream }),
            );
        }
    }.body);
}

/// Connects to `address` until the listener's accept queue is full (Linux then drops SYNs,
/// so the next handshake never completes). Keeps the connections in `streams`; returns how
/// many were made before one timed out, or null when none did.
fn fillBacklog(io: Io, address: net.IpAddress, streams: []net.Stream) !?usize {
    for (streams, 0..) |*stream, i| {
        stream.* = address.connect(io, .{
            .mode = .stream,
            .timeout = .{ .duration = .{ .raw = .fromMilliseconds(100), .clock = .awake } },
        }) catch |err| switch (err) {
            error.Timeout => return i,
            else => |e| return e,
        };
    }
    return null;
}

test "net: connect timeout against a listener whose backlog is full" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var server = try loopback.listen(io, .{ .kernel_backlog = 0 });
            defer server.deinit(io);
            var streams: [8]net.Stream = undefined;
            const made = try fillBacklog(io, server.socket.address, &streams) orelse
                return error.TestExpectedTimeout;
            defer for (streams[0..made]) |s| s.close(io);
            try testing.expect(made < streams.len);
        }
    }.body);
}

fn connectForever(io: Io, address: net.IpAddress) !void {
    const stream = try address.connect(io, .{ .mode = .stream });
    stream.close(io);
}

test "net: cancel a blocked connect" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var server = try loopback.listen(io, .{ .kernel_backlog = 0 });
            defer server.deinit(io);
            var streams: [8]net.Stream = undefined;
            const made = try fillBacklog(io, server.socket.address, &streams) orelse
                return error.TestExpectedTimeout;
            defer for (streams[0..made]) |s| s.close(io);
            var future = try io.concurrent(connectForever, .{ io, server.socket.address });
            try parked.waitParked(io, &future, .cancelable);
            try testing.expectError(error.Canceled, future.cancel(io));
        }
    }.body);
}

fn acceptOne(io: Io, server: *net.Server) !void {
    const stream = try server.accept(io);
    stream.close(io);
}

test "net: cancel a blocked accept; the listener still works" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var server = try loopback.listen(io, .{});
            defer server.deinit(io);
            var blocked = try io.concurrent(acceptOne, .{ io, &server });
            try parked.waitParked(io, &blocked, .cancelable);
            try testing.expectError(error.Canceled, blocked.cancel(io));
            var accepting = try io.concurrent(acceptOne, .{ io, &server });
            const stream = try server.socket.address.connect(io, .{ .mode = .stream });
            stream.close(io);
            try accepting.await(io);
        }
    }.body);
}

fn readOne(io: Io, stream: net.Stream) !u8 {
    var buffer: [1]u8 = undefined;
    var reader = stream.reader(io, &buffer);
    return reader.interface.takeByte() catch |err| switch (err) {
        error.ReadFailed => return reader.err.?,
        error.EndOfStream => return error.EndOfStream,
    };
}

test "net: cancel a blocked read; the socket still works" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var server = try loopback.listen(io, .{});
            defer server.deinit(io);
            const client = try server.socket.address.connect(io, .{ .mode = .stream });
            defer client.close(io);
            const peer = try server.accept(io);
            defer peer.close(io);
            var blocked = try io.concurrent(readOne, .{ io, client });
            try parked.waitParked(io, &blocked, .cancelable);
            try testing.expectError(error.Canceled, blocked.cancel(io));
            var writer = peer.writer(io, &.{});
            try writer.interface.writeAll("z");
            try testing.expectEqual(@as(u8, 'z'), try readOne(io, client));
        }
    }.body);
}

/// Bytes a send is asked for in the tests of two operations on one socket: far more than a
/// sender's buffer shrunk by `shrinkSendBuffer` and the receiver's initial window hold, so
/// the send waits for the peer to read.
const blocked_send_bytes = 1 << 20;

/// A small send buffer, so that a send of `blocked_send_bytes` waits. (Not a small receive
/// buffer too: its window would then drain the megabyte in 8 KiB steps, one delayed ACK
/// apart, 20 s in all.)
fn shrinkSendBuffer(sender: net.Stream) !void {
    const size_bytes: i32 = 4096;
    const value = std.mem.asBytes(&size_bytes);
    const rc = linux.setsockopt(sender.socket.handle, linux.SOL.SOCKET, linux.SO.SNDBUF, value, 4);
    if (linux.errno(rc) != .SUCCESS) return error.Unexpected;
}

/// `readOne` that says when it returned, for a test that must not await it blindly.
fn readOneMarked(io: Io, stream: net.Stream, ended: *std.atomic.Value(bool)) anyerror!u8 {
    defer ended.store(true, .release);
    return readOne(io, stream);
}

/// Sends all of `bytes`, then says it returned.
fn sendMarked(
    io: Io,
    stream: net.Stream,
    bytes: []const u8,
    ended: *std.atomic.Value(bool),
) anyerror!void {
    defer ended.store(true, .release);
    var writer = stream.writer(io, &.{});
    writer.interface.writeAll(bytes) catch return writer.err.?;
}

fn cancelReceive(io: Io, future: *Io.Future(anyerror!u8)) anyerror!u8 {
    return future.cancel(io);
}

fn cancelSend(io: Io, future: *Io.Future(anyerror!void)) anyerror!void {
    return future.cancel(io);
}

/// Waits until the canceled operation's task or the other one returned; true if the other
/// did while the canceled one still waits (the cancel reached the wrong operation).
fn otherEndedFirst(
    io: Io,
    canceled: *const std.atomic.Value(bool),
    other: *const std.atomic.Value(bool),
) !bool {
    for (0..10_000) |_| {
        if (canceled.load(.acquire)) return false;
        if (other.load(.acquire)) return true;
        try io.sleep(.fromMilliseconds(1), .awake);
    }
    return true; // 10 s and the cancel took effect on neither: as wrong
}

const OneOfTwo = enum { receive, send };

/// A receive and a send wait on the same socket; `canceled` of them is canceled, which must
/// end it alone: the other completes once the peer writes (or reads). A cancel addressed by
/// descriptor, not by operation, would end the other instead, or both.
fn cancelOneOfTwo(io: Io, comptime canceled: OneOfTwo) !void {
    var server = try loopback.listen(io, .{});
    defer server.deinit(io);
    const client = try server.socket.address.connect(io, .{ .mode = .stream });
    defer client.close(io);
    const peer = try server.accept(io);
    var peer_open = true;
    defer if (peer_open) peer.close(io);
    try shrinkSendBuffer(client);
    const bytes = try testing.allocator.alloc(u8, blocked_send_bytes);
    defer testing.allocator.free(bytes);
    @memset(bytes, 'x');

    var receive_ended: std.atomic.Value(bool) = .init(false);
    var send_ended: std.atomic.Value(bool) = .init(false);
    var receiving = try io.concurrent(readOneMarked, .{ io, client, &receive_ended });
    try parked.waitParked(io, &receiving, .cancelable);
    var sending = try io.concurrent(sendMarked, .{ io, client, bytes, &send_ended });
    try parked.waitParked(io, &sending, .cancelable);
    var canceling = switch (canceled) {
        .receive => try io.concurrent(cancelReceive, .{ io, &receiving }),
        .send => try io.concurrent(cancelSend, .{ io, &sending }),
    };
    const wrong = switch (canceled) {
        .receive => try otherEndedFirst(io, &receive_ended, &send_ended),
        .send => try otherEndedFirst(io, &send_ended, &receive_ended),
    };
    if (wrong) {
        // The canceled operation still waits: the peer's close ends it, and the test fails.
        std.debug.print("canceling the {t} ended the other operation on the socket\n", .{
            canceled,
        });
        peer_open = false;
        peer.close(io);
    } else if (canceled == .receive) {
        var read_buffer: [4096]u8 = undefined;
        var reader = peer.reader(io, &read_buffer);
        try reader.interface.discardAll(blocked_send_bytes);
    } else {
        var writer = peer.writer(io, &.{});
        try writer.interface.writeAll("z");
    }
    const canceled_result = canceling.await(io);
    switch (canceled) {
        .receive => {
            const sent_result = sending.await(io);
            try testing.expectError(error.Canceled, canceled_result);
            try sent_result;
        },
        .send => {
            const received_result = receiving.await(io);
            try testing.expectError(error.Canceled, canceled_result);
            try testing.expectEqual(@as(u8, 'z'), try received_result);
        },
    }
    try testing.expect(!wrong);
}

test "net: canceling one of two operations in flight on a socket leaves the other to complete" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            // Which of two operations on one descriptor a cancel by descriptor would end
            // depends on where their completions live (the kernel's table is hashed by the
            // completion's address): each round first parks more spacer tasks, so that the
            // two operations' tasks, and their completions, sit on other stacks.
            var gate: Io.Event = .unset;
            var spacers: [rounds]Io.Future(Io.Cancelable!void) = undefined;
            var spacers_len: usize = 0;
            defer {
                gate.set(io);
                for (spacers[0..spacers_len]) |*spacer| spacer.await(io) catch {};
            }
            for (0..rounds) |_| {
                try cancelOneOfTwo(io, .receive);
                try cancelOneOfTwo(io, .send);
                spacers[spacers_len] = try io.concurrent(Io.Event.wait, .{ &gate, io });
                spacers_len += 1;
            }
        }
        const rounds = 16;
    }.body);
}

test "net: UDP send and receive" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            const a = try loopback.bind(io, .{ .mode = .dgram });
            defer a.close(io);
            const b = try loopback.bind(io, .{ .mode = .dgram });
            defer b.close(io);
            try a.send(io, &b.address, "datagram");
            var buffer: [32]u8 = undefined;
            const message = try b.receive(io, &buffer);
            try testing.expectEqualStrings("datagram", message.data);
            try testing.expectEqual(a.address.getPort(), message.from.getPort());
        }
    }.body);
}

fn receiveOne(io: Io, s: net.Socket) !void {
    var buffer: [8]u8 = undefined;
    _ = try s.receive(io, &buffer);
}

test "net: cancel a blocked UDP receive" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            const s = try loopback.bind(io, .{ .mode = .dgram });
            defer s.close(io);
            var blocked = try io.concurrent(receiveOne, .{ io, s });
            try parked.waitParked(io, &blocked, .cancelable);
            try testing.expectError(error.Canceled, blocked.cancel(io));
        }
    }.body);
}

test "net: IP socket pairs are OperationUnsupported on Linux" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            try testing.expectError(error.OperationUnsupported, net.Socket.createPair(io, .{}));
        }
    }.body);
}

/// Serves one connection with std.http.Server: "hello" on every request, keep-alive.
fn serveHello(io: Io, server: *net.Server) !void {
    const stream = try server.accept(io);
    defer stream.close(io);
    var read_buffer: [1024]u8 = undefined;
    var write_buffer: [1024]u8 = undefined;
    var reader = stream.reader(io, &read_buffer);
    var writer = stream.writer(io, &write_buffer);
    var http_server = std.http.Server.init(&reader.interface, &writer.interface);
    while (true) {
        var request = http_server.receiveHead() catch |err| switch (err) {
            error.HttpConnectionClosing => return,
            else => |e| return e,
        };
        try request.respond("hello from weft", .{});
    }
}

test "net: std.http.Client fetches from std.http.Server, both on weft" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var server = try loopback.listen(io, .{});
            defer server.deinit(io);
            var serving = try io.concurrent(serveHello, .{ io, &server });
            var client: std.http.Client = .{ .allocator = testing.allocator, .io = io };
            var url_buffer: [64]u8 = undefined;
            const url = try std.fmt.bufPrint(&url_buffer, "http://127.0.0.1:{d}/", .{
                server.socket.address.getPort(),
            });
            var body_writer: Io.Writer.Allocating = .init(testing.allocator);
            defer body_writer.deinit();
            for (0..2) |_| { // twice over one kept-alive connection
                body_writer.clearRetainingCapacity();
                const result = try client.fetch(.{
                    .location = .{ .url = url },
                    .response_writer = &body_writer.writer,
                });
                try testing.expectEqual(std.http.Status.ok, result.status);
                try testing.expectEqualStrings("hello from weft", body_writer.written());
            }
            client.deinit(); // closes the kept-alive connection: the server sees it end
            try serving.await(io);
        }
    }.body);
}

test "net: interface names and indexes through std.Io (lo)" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            const lo: net.Interface.Name = try .fromSlice("lo");
            const interface = try lo.resolve(io);
            try testing.expect(!interface.isNone());
            const name = try interface.name(io);
            try testing.expectEqualStrings("lo", name.toSlice());
            const missing: net.Interface.Name = try .fromSlice("weft-nope0");
            try testing.expectError(error.InterfaceNotFound, missing.resolve(io));
            // A scoped IPv6 address resolves its interface and formats it back by name.
            const scoped = try net.IpAddress.resolve(io, "fe80::1%lo", 7);
            try testing.expectEqual(interface.index, scoped.ip6.interface.index);
            var buffer: [64]u8 = undefined;
            var writer: Io.Writer = .fixed(&buffer);
            try scoped.formatResolved(io, &writer);
            try testing.expectEqualStrings("[fe80::1%lo]:7", writer.buffered());
        }
    }.body);
}

/// Reads the stream to its end into a new slice.
fn readAll(io: Io, stream: net.Stream) ![]u8 {
    var buffer: [4096]u8 = undefined;
    var reader = stream.reader(io, &buffer);
    return reader.interface.allocRemaining(testing.allocator, .unlimited);
}

/// Calls netWriteFile until it reports the end of the file or `limit` file bytes were sent;
/// returns the file bytes sent.
fn writeFileAll(
    io: Io,
    stream: net.Stream,
    header_all: []const u8,
    file_reader: *Io.File.Reader,
    limit: usize,
) !usize {
    var header = header_all;
    var file_bytes: usize = 0;
    var calls: usize = 0;
    while (file_bytes < limit or header.len > 0) : (calls += 1) {
        try testing.expect(calls < 1_000_000); // fails rather than spins
        const handle = stream.socket.handle;
        const remaining: Io.Limit = .limited(limit - file_bytes);
        const n = try io.vtable.netWriteFile(io.userdata, handle, header, file_reader, remaining);
        if (n == 0) break;
        const header_sent = @min(n, header.len);
        header = header[header_sent..];
        file_bytes += n - header_sent;
    }
    return file_bytes;
}

test "net: netWriteFile sends header, buffered bytes and the file; partial writes continue" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var path_buffer: [64]u8 = undefined;
            var suffix: [8]u8 = undefined;
            io.random(&suffix);
            const path = try std.fmt.bufPrint(&path_buffer, "/tmp/weft-sendfile-{x}", .{suffix});
            const contents = try testing.allocator.alloc(u8, 300 * 1024);
            defer testing.allocator.free(contents);
            for (contents, 0..) |*byte, i| byte.* = @truncate(i *% 7 +% i / 251);
            try Io.Dir.cwd().writeFile(io, .{ .sub_path = path, .data = contents });
            defer Io.Dir.cwd().deleteFile(io, path) catch {};

            var server = try loopback.listen(io, .{});
            defer server.deinit(io);
            const modes = [_]Io.File.Reader.Mode{ .positional, .streaming, .positional_simple };
            for (modes) |mode| {
                const client = try server.socket.address.connect(io, .{ .mode = .stream });
                defer client.close(io);
                // A small send buffer: sendfile stops early and waits on the loop, often.
                const small: u32 = 4096;
                const fd = client.socket.handle;
                const opt = std.mem.asBytes(&small);
                const rc = linux.setsockopt(fd, linux.SOL.SOCKET, linux.SO.SNDBUF, opt, opt.len);
                try testing.expectEqual(@as(usize, 0), rc);
                const peer = try server.accept(io);
                defer peer.close(io);
                var reading = try io.concurrent(readAll, .{ io, peer });

                const file = try Io.Dir.cwd().openFile(io, path, .{});
                defer file.close(io);
                var read_buffer: [512]u8 = undefined;
                var file_reader = file.reader(io, &read_buffer);
                file_reader.mode = mode;
                try file_reader.interface.fill(100); // bytes buffered in the reader go first
                const sent = try writeFileAll(io, client, "HEADER", &file_reader, contents.len);
                try testing.expectEqual(contents.len, sent);
                try client.shutdown(io, .send);

                const received = try reading.await(io);
                defer testing.allocator.free(received);
                try testing.expectEqualStrings("HEADER", received[0..6]);
                try testing.expect(std.mem.eql(u8, contents, received[6..]));
            }
        }
    }.body);
}

test "net: netWriteFile honours its limit and reports the end of the file" {
    try withRuntime(struct {
        fn body(io: Io) !void {
            var path_buffer: [64]u8 = undefined;
            var suffix: [8]u8 = undefined;
            io.random(&suffix);
            const path = try std.fmt.bufPrint(&path_buffer, "/tmp/weft-sendfile-{x}", .{suffix});
            try Io.Dir.cwd().writeFile(io, .{ .sub_path = path, .data = "0123456789" });
            defer Io.Dir.cwd().deleteFile(io, path) catch {};
            var server = try loopback.listen(io, .{});
            defer server.deinit(io);
            const client = try server.socket.address.connect(io, .{ .mode = .stream });
            defer client.close(io);
            const peer = try server.accept(io);
            defer peer.close(io);

            const file = try Io.Dir.cwd().openFile(io, path, .{});
            defer file.close(io);
            var file_reader = file.reader(io, &.{});
            const first = try writeFileAll(io, client, "", &file_reader, 4);
            try testing.expectEqual(@as(usize, 4), first);
            try testing.expectEqual(@as(u64, 4), file_reader.pos);
            const rest = try writeFileAll(io, client, "", &file_reader, 100);
            try testing.expectEqual(@as(usize, 6), rest);
            const handle = client.socket.handle;
            const vtable = io.vtable;
            const at_end =
                try vtable.netWriteFile(io.userdata, handle, "", &file_reader, .unlimited);
            try testing.expectEqual(@as(usize, 0), at_end);
            try client.shutdown(io, .send);
            const received = try readAll(io, peer);
            defer testing.allocator.free(received);
            try testing.expectEqualStrings("0123456789", received);
        }
    }.body);
}
