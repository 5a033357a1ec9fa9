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
const Runtime = @import("../Runtime.zig");
const Server = @import("../server/Server.zig");
const config = @import("../config.zig");
const server_test = @import("server_test.zig");
const stop_download = @import("stop_download.zig");

const Running = server_test.Running;
const Client = server_test.Client;
const request_get = stop_download.request_get;
const Download = stop_download.Download;
const Response = stop_download.Response;
const readHead = stop_download.readHead;
const expectBody = stop_download.expectBody;
const expectEnd = stop_download.expectEnd;
const awaitSending = stop_download.awaitSending;

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
    try stop_download.expectWholeAcrossStop(&client, download);
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

test "Server stop: a response partly written when the stop comes arrives whole, byte for byte" {
    var rt = try Runtime.init(testing.allocator, .{});
    defer rt.deinit();
    const io = rt.io();
    const body_buffer = try testing.allocator.alloc(u8, stop_download.bufferBytes(download_stops));
    defer testing.allocator.free(body_buffer);
    for ([_]Server.Shape{ .single, .{ .threaded = 2 } }) |shape| {
        // Fewer for .threaded: the shapes share the writer; its listeners and threads differ.
        const stops: usize = if (shape == .single) download_stops else download_stops / 4;
        for (0..stops) |stop| {
            var download = stop_download.forStop(body_buffer, stop);
            const report = try serveDownload(io, shape, &download, downloadAcrossStop);
            try testing.expectEqual(0, report.workers.cut_at_drain);
            try testing.expect(report.workers.requests >= 2);
        }
    }
}

test "Server stop: a response partly written when SIGTERM comes arrives whole, .forked" {
    if (builtin.sanitize_thread) return os.skipTest(@src(), server_test.tsan_fork);
    const body_buffer = try testing.allocator.alloc(u8, stop_download.bufferBytes(download_stops));
    defer testing.allocator.free(body_buffer);
    for (0..download_stops / 10) |stop| {
        // Filled before the fork: the workers serve their copy.
        var download = stop_download.forStop(body_buffer, stop);
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
