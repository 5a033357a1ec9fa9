//! weft.Server's stop and its limits, driven as an operator drives them: a stop while a
//! response is partly written (bodies compared byte for byte), a pipelining client that never
//! reads, keep-alive load stopped mid-run in every shape (no request may be lost), and a full
//! worker admitting a new client by closing its longest-idle connection.
//!
//! Bounded like server_test.zig: every client runs under `bounded`, every server stops within
//! `Running.finish`'s limit, and each wait polls for at most a few seconds.
const std = @import("std");
const builtin = @import("builtin");
const Io = std.Io;
const net = Io.net;
const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};
const testing = std.testing;
const os = @import("../os/linux.zig");
const socket = @import("../net/socket.zig");
const Runtime = @import("../Runtime.zig");
const Server = @import("../server/Server.zig");
const config = @import("../config.zig");
const server_test = @import("server_test.zig");

const Running = server_test.Running;
const Client = server_test.Client;
const request_get = "GET / HTTP/1.1\r\nHost: t\r\n\r\n";

/// One response as a client reads it: its status, whether its head says `Connection: close`,
/// and its body (in `Response.body_buffer`, or checked against an expected body as it is
/// read).
const Response = struct {
    status: u16,
    close: bool,
    content_length: usize,
};

/// Reads a response's head and returns it; the body is left to the caller. Any framing it
/// cannot read is an error, as it would be for a real client.
fn readHead(in: *Io.Reader) !Response {
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
fn expectBody(in: *Io.Reader, expected: []const u8) !void {
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
fn expectEnd(in: *Io.Reader) !void {
    if (in.takeByte()) |_| return error.TestUnexpectedData else |err| switch (err) {
        error.EndOfStream, error.ReadFailed => {},
    }
}

/// How a test stops the server it drives: `Server.stop` in this process, or SIGTERM to a
/// forked supervisor.
const Stopper = union(enum) {
    server: *Server,
    pid: linux.pid_t,

    fn stop(stopper: Stopper) void {
        switch (stopper) {
            .server => |server| server.stop(),
            .pid => |pid| _ = linux.kill(pid, .TERM),
        }
    }
};

/// A handler answering with `body`, its socket's send buffer made small so that the response
/// stays partly written while the client does not read. It publishes its connection, whose
/// phase tells the client when the server is waiting to write. With `piece_bytes` it streams
/// the body in pieces of that size (`respondStreaming`, as a handler copying a file does), so
/// that body bytes sit in the connection's write buffer whenever a write waits; else it hands
/// std the whole body (`respond`).
const Download = struct {
    body: []const u8,
    piece_bytes: ?usize,
    connection: std.atomic.Value(?*Server.Connection) = .init(null),

    fn respond(
        context: ?*anyopaque,
        connection: *Server.Connection,
        request: *Server.http.Request,
    ) Server.http.RespondError!void {
        const download: *Download = @ptrCast(@alignCast(context.?));
        const fd = connection.stream.socket.handle;
        socket.setOption(fd, linux.SOL.SOCKET, linux.SO.SNDBUF, 4096) catch {};
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
fn awaitSending(io: Io, published: *std.atomic.Value(?*Server.Connection)) !void {
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

/// Polls until the client's socket `fd` holds at least 16 KiB unread and the count stopped
/// growing (for 3 polls 2 ms apart): the server, in another process, waits to write. For at
/// most a few seconds.
fn awaitClientQueue(io: Io, fd: linux.fd_t) !void {
    var last: c_int = -1;
    var steady: u32 = 0;
    for (0..2_500) |_| {
        var unread: c_int = 0;
        if (linux.errno(linux.ioctl(fd, linux.T.FIONREAD, @intFromPtr(&unread))) != .SUCCESS) {
            return error.TestNoFionread;
        }
        steady = if (unread == last and unread >= 16 * 1024) steady + 1 else 0;
        if (steady == 3) return;
        last = unread;
        try io.sleep(.fromMilliseconds(2), .awake);
    }
    return error.TestNeverSending;
}

/// Stops the server while it is partway through writing `download.body`, then reads the whole
/// response and checks it byte for byte: the response the stop interrupted finishes, and its
/// connection answers one more request with `Connection: close` and then ends.
fn downloadAcrossStop(io: Io, port: u16, download: *Download, stopper: Stopper) !void {
    var client: Client = undefined;
    try client.connect(io, port);
    defer client.close(io);
    try client.send(request_get);
    switch (stopper) {
        .server => try awaitSending(io, &download.connection),
        .pid => try awaitClientQueue(io, client.stream.socket.handle),
    }
    stopper.stop();
    const in = &client.reader.interface;
    const response = try readHead(in);
    try testing.expectEqual(200, response.status);
    try testing.expectEqual(download.body.len, response.content_length);
    try expectBody(in, download.body);
    // Its head went out before the stop: the connection still answers what comes next. The
    // stop reaches the worker a moment after `stopper.stop()` returns (its accept ends, or a
    // forked worker reads its eventfd), so a request sent meanwhile may still be answered
    // keep-alive; one sent after is answered `Connection: close`, as the connection's last.
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

/// Serves `download` in `shape` (in this process) while `client(io, port, download,
/// stopper)` runs and stops the server, then finishes it and returns its report.
fn serveDownload(
    io: Io,
    shape: Server.Shape,
    download: *Download,
    comptime client: fn (Io, u16, *Download, Stopper) anyerror!void,
) !Server.Report {
    const http_handler: Server.http.Handler = .{
        .context = download,
        .respondFn = &Download.respond,
    };
    var running: Running = undefined;
    try running.start(server_test.optionsOf(shape), Server.http.handler(&http_handler));
    errdefer running.abandon();
    const stopper: Stopper = .{ .server = &running.server };
    try server_test.bounded(io, client, .{ io, running.server.port(), download, stopper });
    return running.finish();
}

const download_stops = 200;

/// The body of stop `stop`: its length moves across the write buffer's boundary by 37 bytes
/// per stop, and odd stops stream it in pieces of 700 to 1,012 bytes.
fn downloadOf(body_buffer: []u8, stop: usize) Download {
    // Large enough that the server waits for the client more than once.
    const body = body_buffer[0 .. download_len_base + stop * 37];
    fillBody(body, stop);
    const piece_bytes: ?usize = if (stop % 2 == 1) 700 + (stop * 13) % 313 else null;
    return .{ .body = body, .piece_bytes = piece_bytes };
}

const download_len_base = 96 * 1024;

test "Server stop: a response partly written when the stop comes arrives whole, byte for byte" {
    var rt = try Runtime.init(testing.allocator, .{});
    defer rt.deinit();
    const io = rt.io();
    const body_buffer = try testing.allocator.alloc(u8, download_len_base + download_stops * 37);
    defer testing.allocator.free(body_buffer);
    for ([_]Server.Shape{ .single, .{ .threaded = 2 } }) |shape| {
        // Fewer for .threaded: the shapes share the writer; its listeners and threads differ.
        const stops: usize = if (shape == .single) download_stops else download_stops / 4;
        for (0..stops) |stop| {
            var download = downloadOf(body_buffer, stop);
            const report = try serveDownload(io, shape, &download, downloadAcrossStop);
            try testing.expectEqual(0, report.workers.cut_at_drain);
            try testing.expect(report.workers.requests >= 2);
        }
    }
}

test "Server stop: a response partly written when SIGTERM comes arrives whole, .forked" {
    if (builtin.sanitize_thread) return os.skipTest(@src(), server_test.tsan_fork);
    const body_buffer = try testing.allocator.alloc(u8, download_len_base + download_stops * 37);
    defer testing.allocator.free(body_buffer);
    for (0..download_stops / 10) |stop| {
        // Filled before the fork: the workers serve their copy.
        var download = downloadOf(body_buffer, stop);
        const http_handler: Server.http.Handler = .{
            .context = &download,
            .respondFn = &Download.respond,
        };
        var supervisor = try server_test.Supervisor.start(
            server_test.optionsOf(.{ .forked = 2 }),
            &http_handler,
            struct {
                fn expected(report: Server.Report) bool {
                    return report.workers.cut_at_drain == 0 and report.workers_unclean == 0 and
                        report.workers.requests >= 2;
                }
            }.expected,
        );
        defer supervisor.reap();
        var rt = try Runtime.init(testing.allocator, .{});
        defer rt.deinit();
        const io = rt.io();
        const stopper: Stopper = .{ .pid = supervisor.pid };
        const port = supervisor.port;
        try server_test.bounded(io, downloadAcrossStop, .{ io, port, &download, stopper });
        const status = try supervisor.awaitExit(io, 10 * std.time.ms_per_s) orelse
            return error.TestTimedOut;
        try testing.expect(linux.W.IFEXITED(status));
        try testing.expectEqual(0, linux.W.EXITSTATUS(status));
    }
}

/// A 1 KiB body: a thousand responses overfill what loopback buffers for an idle reader.
const kib_body = "0123456789abcdef\r\n\r\n" ** 51 ++ "0123";

const pipelined_requests = 1_000;

/// Sends `pipelined_requests` requests at once and reads nothing until the server, its
/// responses (`kib_body` each) unread, waits to write; stops it; then reads every response:
/// each whole, keep-alive until the one that says `Connection: close`, and nothing after it.
fn pipelineAcrossStop(io: Io, port: u16, download: *Download, stopper: Stopper) !void {
    var client: Client = undefined;
    try client.connect(io, port);
    defer client.close(io);
    const requests = request_get ** pipelined_requests;
    try client.writer.interface.writeAll(requests);
    try client.writer.interface.flush();
    try awaitSending(io, &download.connection);
    stopper.stop();
    const in = &client.reader.interface;
    var answered: u32 = 0;
    while (true) {
        const response = try readHead(in);
        answered += 1;
        try testing.expectEqual(200, response.status);
        try testing.expectEqual(kib_body.len, response.content_length);
        try expectBody(in, kib_body);
        if (response.close) break;
    }
    try testing.expect(answered <= pipelined_requests);
    try expectEnd(in);
}

test "Server stop: a pipelining client that never reads gets whole responses, then a close" {
    var rt = try Runtime.init(testing.allocator, .{});
    defer rt.deinit();
    const io = rt.io();
    for ([_]Server.Shape{ .single, .{ .threaded = 2 } }) |shape| {
        var download: Download = .{ .body = kib_body, .piece_bytes = null };
        const report = try serveDownload(io, shape, &download, pipelineAcrossStop);
        try testing.expectEqual(0, report.workers.cut_at_drain);
    }
}

/// The keep-alive drain scenario's shared counts. A request is lost when it was written to a
/// connection whose previous response promised more (keep-alive) and no response came back:
/// a client cannot tell whether it was handled, so it cannot safely retry it.
const Load = struct {
    /// Requests written, bounded by `requests_max`.
    sent: std.atomic.Value(u32) = .init(0),
    answered: std.atomic.Value(u32) = .init(0),
    lost: std.atomic.Value(u32) = .init(0),
    /// New connections refused: the listener was shut down (nothing was sent on them).
    refused: std.atomic.Value(u32) = .init(0),
    /// Connections answered once: the load starts when all are (see `loadConnection`).
    ready: std.atomic.Value(u32) = .init(0),
    stopped: std.atomic.Value(bool) = .init(false),
    requests_max: u32,
    /// Answers before the stop.
    stop_after: u32,
    stopper: Stopper,

    fn stopOnce(load: *Load) void {
        if (load.stopped.swap(true, .acq_rel)) return;
        load.stopper.stop();
    }
};

/// One client connection of the load: requests back to back, a new connection after a
/// `Connection: close`, until `requests_max` were sent or a connect is refused.
///
/// The load starts once every connection has been answered once, so that each was accepted:
/// a connection still in a listener's queue when the stop shuts the listener is reset by the
/// kernel, never accepted (docs/SERVER.md says so), which is not what this scenario measures.
fn loadConnection(io: Io, port: u16, load: *Load) !void {
    var client: Client = undefined;
    try client.connect(io, port);
    var open = true;
    defer if (open) client.close(io);
    _ = load.sent.fetchAdd(1, .monotonic);
    try testing.expectEqual(200, (try exchange(&client)).status);
    _ = load.answered.fetchAdd(1, .monotonic);
    _ = load.ready.fetchAdd(1, .release);
    while (load.ready.load(.acquire) < load_connections) try io.sleep(.fromMilliseconds(1), .awake);
    while (load.sent.fetchAdd(1, .monotonic) < load.requests_max) {
        if (!open) {
            client.connect(io, port) catch |err| switch (err) {
                error.ConnectionRefused => {
                    _ = load.refused.fetchAdd(1, .monotonic);
                    return;
                },
                else => |e| return e,
            };
            open = true;
        }
        const response = exchange(&client) catch |err| switch (err) {
            error.WriteFailed, error.ReadFailed, error.EndOfStream => {
                _ = load.lost.fetchAdd(1, .monotonic);
                client.close(io);
                open = false;
                continue;
            },
            else => |e| return e,
        };
        try testing.expectEqual(200, response.status);
        if (load.answered.fetchAdd(1, .monotonic) + 1 == load.stop_after) load.stopOnce();
        if (response.close) {
            client.close(io);
            open = false;
        }
    }
}

fn exchange(client: *Client) !Response {
    try client.send(request_get);
    const in = &client.reader.interface;
    const response = try readHead(in);
    try expectBody(in, "Hello World");
    return response;
}

const load_connections = 20;

/// Runs `load_connections` clients against `port` until the stop and returns the counts.
fn runLoad(io: Io, port: u16, load: *Load) !void {
    var group: Io.Group = .init;
    defer group.cancel(io);
    var results: [load_connections]anyerror!void = @splat({});
    for (&results) |*result| {
        try group.concurrent(io, struct {
            fn run(task_io: Io, p: u16, l: *Load, out: *anyerror!void) Io.Cancelable!void {
                out.* = loadConnection(task_io, p, l);
            }
        }.run, .{ io, port, load, result });
    }
    try group.await(io);
    for (results) |result| try result;
}

/// Fails, saying what the clients and the server saw, unless the stop came and no request
/// was lost. `report` is null for `.forked` (its supervisor checks its own).
fn expectNoneLost(
    load: *const Load,
    shape: Server.Shape,
    run: usize,
    report: ?Server.Report,
) !void {
    const lost = load.lost.load(.monotonic);
    const stopped = load.stopped.load(.monotonic);
    if (lost != 0 or !stopped) {
        const answered = load.answered.load(.monotonic);
        const refused = load.refused.load(.monotonic);
        std.debug.print("{t} run {d}: {d} lost, {d} answered, {d} refused, stopped: {}\n", .{
            shape, run, lost, answered, refused, stopped,
        });
        if (report) |r| std.debug.print("report: {any}\n", .{r.workers});
        return error.TestRequestsLost;
    }
}

/// Runs of the keep-alive drain scenario per shape, and the requests of each: the stop comes
/// at the half, with every connection busy.
const load_runs = 20;
const load_requests_max = 400;

test "Server stop: keep-alive load stopped mid-run loses no request, .single and .threaded" {
    var rt = try Runtime.init(testing.allocator, .{});
    defer rt.deinit();
    const io = rt.io();
    for ([_]Server.Shape{ .single, .{ .threaded = 2 } }) |shape| {
        for (0..load_runs) |run| {
            var running: Running = undefined;
            const handler = Server.http.handler(&server_test.hello.http_handler);
            try running.start(server_test.optionsOf(shape), handler);
            errdefer running.abandon();
            var load: Load = .{
                .requests_max = load_requests_max,
                .stop_after = load_requests_max / 2,
                .stopper = .{ .server = &running.server },
            };
            try server_test.bounded(io, runLoad, .{ io, running.server.port(), &load });
            const report = try running.finish();
            try expectNoneLost(&load, shape, run, report);
            try testing.expectEqual(0, report.workers.cut_at_drain);
        }
    }
}

test "Server stop: keep-alive load stopped mid-run loses no request, .forked" {
    if (builtin.sanitize_thread) return os.skipTest(@src(), server_test.tsan_fork);
    const shape: Server.Shape = .{ .forked = 2 };
    for (0..load_runs) |run| {
        var supervisor = try server_test.Supervisor.start(
            server_test.optionsOf(shape),
            &server_test.hello.http_handler,
            struct {
                fn expected(report: Server.Report) bool {
                    return report.workers.cut_at_drain == 0 and report.workers_killed == 0;
                }
            }.expected,
        );
        defer supervisor.reap();
        var rt = try Runtime.init(testing.allocator, .{});
        defer rt.deinit();
        const io = rt.io();
        var load: Load = .{
            .requests_max = load_requests_max,
            .stop_after = load_requests_max / 2,
            .stopper = .{ .pid = supervisor.pid },
        };
        // The workers may still be starting: a refused connect before the stop is retried.
        try awaitListening(io, supervisor.port);
        try server_test.bounded(io, runLoad, .{ io, supervisor.port, &load });
        try expectNoneLost(&load, shape, run, null);
        const status = try supervisor.awaitExit(io, 10 * std.time.ms_per_s) orelse
            return error.TestTimedOut;
        try testing.expect(linux.W.IFEXITED(status));
        try testing.expectEqual(0, linux.W.EXITSTATUS(status));
    }
}

/// Waits until a request on a new connection to `port` is answered (a forked worker serves).
fn awaitListening(io: Io, port: u16) !void {
    for (0..250) |_| {
        var client: Client = undefined;
        if (client.connect(io, port)) {
            defer client.close(io);
            if (client.get()) |status| {
                if (status == 200) return;
            } else |_| {}
        } else |_| {}
        try io.sleep(.fromMilliseconds(20), .awake);
    }
    return error.TestTimedOut;
}

/// Fills a worker of `connections_max` = 4 with idle keep-alive connections, opened and used
/// one after the other, then connects a fifth: it is served, the first (the longest idle) is
/// closed, and the others still work.
fn admitWhenFull(io: Io, port: u16) !void {
    var clients: [4]Client = undefined;
    var opened: usize = 0;
    defer for (clients[0..opened]) |*client| client.close(io);
    for (&clients) |*client| {
        try client.connect(io, port);
        opened += 1;
        try testing.expectEqual(200, try client.get());
        // Longer than two reaper periods: the reaper has seen each idle before the next.
        try io.sleep(.fromMilliseconds(40), .awake);
    }
    var fifth: Client = undefined;
    try fifth.connect(io, port);
    defer fifth.close(io);
    try testing.expectEqual(200, try fifth.get());
    try clients[0].expectClosed();
    for (clients[1..]) |*client| try testing.expectEqual(200, try client.get());
    try testing.expectEqual(200, try fifth.get());
}

test "Server: a full worker closes its longest-idle connection to admit a new one" {
    var options = server_test.optionsOf(.single);
    options.connections_max = 4;
    // A short header timeout makes the reaper sweep every 10 ms; no request here waits on it.
    options.header_timeout_ns = 80 * std.time.ns_per_ms;
    var running: Running = undefined;
    try running.start(options, Server.http.handler(&server_test.hello.http_handler));
    errdefer running.abandon();
    var rt = try Runtime.init(testing.allocator, .{});
    defer rt.deinit();
    const io = rt.io();
    try server_test.bounded(io, admitWhenFull, .{ io, running.server.port() });
    const report = try running.finish();
    try testing.expectEqual(5, report.workers.accepted);
    try testing.expectEqual(0, report.workers.rejected_full);
    try testing.expectEqual(1, report.workers.closed_idle_for_admission);
}
