//! A download a stop interrupts, as its client sees it: a handler that answers with a large body
//! through a small socket send buffer (so the response stays partly written while the client
//! does not read), and the client's checks of what arrives: the head's framing, the body byte
//! for byte, the connection's last response and its end. Shared by server_stop_test.zig (the
//! fiber runtime: every shape, a forked supervisor's SIGTERM, pipelining) and
//! server_shapes_test.zig (the shapes every runtime serves). std.Io and std.posix only.
const std = @import("std");
const builtin = @import("builtin");
const Io = std.Io;
const testing = std.testing;
const Server = @import("../server/Server.zig");

pub const request_get = "GET / HTTP/1.1\r\nHost: t\r\n\r\n";

/// One response as a client reads it: its status, whether its head says `Connection: close`,
/// and its body (in `Response.body_buffer`, or checked against an expected body as it is
/// read).
pub const Response = struct {
    status: u16,
    close: bool,
    content_length: usize,
};

/// Reads a response's head and returns it; the body is left to the caller. Any framing it
/// cannot read is an error, as it would be for a real client.
pub fn readHead(in: *Io.Reader) !Response {
    const status_line = try in.takeDelimiterInclusive('\n');
    if (!std.mem.startsWith(u8, status_line, "HTTP/1.1 ")) return error.TestBadStatusLine;
    var response: Response = .{
        .status = try std.fmt.parseInt(u16, status_line[9..12], 10),
        .close = false,
        .content_length = 0,
    };
    var has_length = false;
    while (true) {
        const line = try in.takeDelimiterInclusive('\n');
        if (std.mem.eql(u8, line, "\r\n")) break;
        const colon = std.mem.indexOfScalar(u8, line, ':') orelse return error.TestBadHeader;
        const name = line[0..colon];
        const value = std.mem.trim(u8, line[colon + 1 ..], " \r\n");
        if (std.ascii.eqlIgnoreCase(name, "content-length")) {
            if (has_length) return error.TestDuplicateLength;
            has_length = true;
            response.content_length = try std.fmt.parseInt(usize, value, 10);
        } else if (std.ascii.eqlIgnoreCase(name, "connection")) {
            response.close = std.ascii.eqlIgnoreCase(value, "close");
        }
    }
    if (!has_length) return error.TestNoLength;
    return response;
}

/// Reads `expected.len` body bytes and fails at the first that differs.
pub fn expectBody(in: *Io.Reader, expected: []const u8) !void {
    var offset: usize = 0;
    while (offset < expected.len) {
        const chunk = try in.take(@min(expected.len - offset, in.buffer.len));
        if (!std.mem.eql(u8, chunk, expected[offset..][0..chunk.len])) {
            const at = std.mem.indexOfDiff(u8, chunk, expected[offset..][0..chunk.len]).?;
            std.debug.print("body differs at byte {d} of {d}\n", .{ offset + at, expected.len });
            return error.TestBodyAltered;
        }
        offset += chunk.len;
    }
}

/// Expects the server to have closed the connection: end of stream (or a reset).
pub fn expectEnd(in: *Io.Reader) !void {
    if (in.takeByte()) |_| return error.TestUnexpectedData else |err| switch (err) {
        error.EndOfStream, error.ReadFailed => {},
    }
}

/// A handler answering with `body`, its socket's send buffer made small so that the response
/// stays partly written while the client does not read. It publishes its connection, whose
/// phase tells the client when the server is waiting to write. With `piece_bytes` it streams
/// the body in pieces of that size (`respondStreaming`, as a handler copying a file does), so
/// that body bytes sit in the connection's write buffer whenever a write waits; else it hands
/// std the whole body (`respond`).
pub const Download = struct {
    body: []const u8,
    piece_bytes: ?usize,
    connection: std.atomic.Value(?*Server.Connection) = .init(null),

    pub fn respond(
        context: ?*anyopaque,
        connection: *Server.Connection,
        request: *Server.http.Request,
    ) Server.http.RespondError!void {
        const download: *Download = @ptrCast(@alignCast(context.?));
        setSendBuffer(connection.stream.socket.handle);
        download.connection.store(connection, .release);
        const piece_bytes = download.piece_bytes orelse
            return request.respond(download.body, .{});
        var buffer: [512]u8 = undefined;
        var response = try request.respondStreaming(&buffer, .{
            .content_length = download.body.len,
        });
        var offset: usize = 0;
        while (offset < download.body.len) {
            const piece = download.body[offset..][0..@min(piece_bytes, download.body.len - offset)];
            try response.writer.writeAll(piece);
            offset += piece.len;
        }
        try response.end();
    }
};

/// Polls until `connection` waits for the client to take response bytes (`send`), for at most
/// a few seconds.
pub fn awaitSending(io: Io, published: *std.atomic.Value(?*Server.Connection)) !void {
    for (0..5_000) |_| {
        if (published.load(.acquire)) |connection| {
            if (connection.phase.load(.acquire) == .send) return;
        }
        try io.sleep(.fromMilliseconds(1), .awake);
    }
    return error.TestNeverSending;
}

/// A body of `len` bytes whose `\r\n` lines and `\r\n\r\n` blank lines fall at offsets that
/// move with `shift`: what a server that looked for a response head in body bytes would take
/// for one.
fn fillBody(body: []u8, shift: usize) void {
    for (body, 0..) |*byte, i| byte.* = 'a' + @as(u8, @intCast((i + shift) % 26));
    var i: usize = shift % 61;
    while (i + 4 <= body.len) : (i += 61 + (i % 7)) {
        const blank = (i / 61 + shift) % 3 == 0;
        @memcpy(body[i..][0..2], "\r\n");
        if (blank) @memcpy(body[i + 2 ..][0..2], "\r\n");
    }
}

/// The body of stop `stop` (in `body_buffer`, of `bufferBytes(stops)` for stops below
/// `stops`): its length moves across the write buffer's boundary by `body_step_bytes` per stop,
/// and odd stops stream it in pieces of 700 to 1,012 bytes.
pub fn forStop(body_buffer: []u8, stop: usize) Download {
    const body = body_buffer[0 .. body_bytes_base + stop * body_step_bytes];
    fillBody(body, stop);
    const piece_bytes: ?usize = if (stop % 2 == 1) 700 + (stop * 13) % 313 else null;
    return .{ .body = body, .piece_bytes = piece_bytes };
}

/// Large enough that the server waits for the client more than once.
const body_bytes_base = 96 * 1024;
const body_step_bytes = 37;

pub fn bufferBytes(stops: usize) usize {
    return body_bytes_base + stops * body_step_bytes;
}

/// A send buffer of 4 KiB on the connection's socket: the response waits for the client early
/// and often. Not on Windows (std.posix has no setsockopt there), where these tests skip under
/// Wine anyway.
fn setSendBuffer(handle: std.posix.socket_t) void {
    if (builtin.os.tag == .windows) return;
    const bytes: c_int = 4096;
    std.posix.setsockopt(
        handle,
        std.posix.SOL.SOCKET,
        std.posix.SO.SNDBUF,
        std.mem.asBytes(&bytes),
    ) catch {};
}

/// After the stop, on `client` (a `reader` and a `send`): reads the response the stop
/// interrupted and checks it byte for byte. Its head went out before the stop, so the connection
/// still answers what comes next: the stop reaches the worker a moment after it was called,
/// and a request sent meanwhile may still be answered keep-alive; one sent after is answered
/// `Connection: close`, as the connection's last. Then the connection ends.
pub fn expectWholeAcrossStop(client: anytype, download: *const Download) !void {
    const in = &client.reader.interface;
    const response = try readHead(in);
    try testing.expectEqual(200, response.status);
    try testing.expectEqual(download.body.len, response.content_length);
    try expectBody(in, download.body);
    var closed = response.close;
    var requests: u32 = 1;
    while (!closed) : (requests += 1) {
        if (requests == 50) return error.TestNeverClosed;
        try client.send(request_get);
        const next = try readHead(in);
        try testing.expectEqual(200, next.status);
        try expectBody(in, download.body);
        closed = next.close;
    }
    try expectEnd(in);
}
