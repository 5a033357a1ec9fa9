//! weft.Server's shapes that run on every runtime, `.single` and `.threaded` with a shared
//! listener, on the runtime this build has: the fiber runtime on Linux (where server_test.zig
//! tests every shape in depth), the threaded one on other OSes and with `-Dbackend=threaded`
//! (`./zigw build test-threaded`), where `stop` cancels each worker's accept through a word
//! (`Worker.Stop.word`) instead of shutting the listener down.
//!
//! The client is a plain std.Io.Threaded of the test's own, over loopback. Bounded: `finish`
//! panics if `run` has not returned within `stop_limit_ns` of `stop` (a stop that never ends
//! fails by name, not at the runner's limit); the server's drain timeout bounds a client's
//! wait for a close. Under Wine these skip: std's Windows sockets need AFD ioctls Wine lacks.
const std = @import("std");
const Io = std.Io;
const net = Io.net;
const testing = std.testing;
const platform = @import("../platform.zig");
const Server = @import("../server/Server.zig");
const os = @import("../os/host.zig");
const wine = @import("wine.zig");
const stop_download = @import("stop_download.zig");

const hello = Server.http.Fixed("Hello World");
const request_get = stop_download.request_get;
const response_body = "Hello World";
/// Far above what a stop takes (milliseconds past the drain): a hang guard.
const stop_limit_ns = 10 * std.time.ns_per_s;

/// A server running `run` on a thread of its own until `finish`.
const Running = struct {
    server: Server,
    thread: std.Thread = undefined,
    result: Server.RunError!Server.Report = error.WorkerStartFailed,
    /// 1 once `run` returned and `result` is written (release).
    done: std.atomic.Value(u32) = .init(0),
    /// Set by the first `finish`, which joined the thread and closed the listener.
    finished: bool = false,

    fn start(running: *Running, options: Server.Options) !void {
        return running.startWith(options, Server.http.handler(&hello.http_handler));
    }

    fn startWith(running: *Running, options: Server.Options, handler: Server.Handler) !void {
        running.* = .{ .server = try Server.init(testing.allocator, options) };
        errdefer running.server.deinit();
        running.thread = try std.Thread.spawn(.{}, main, .{ running, handler });
    }

    fn main(running: *Running, handler: Server.Handler) void {
        running.result = running.server.run(handler);
        running.done.store(1, .release);
        os.futexWake(&running.done, 1);
    }

    fn address(running: *const Running) net.IpAddress {
        return .{ .ip4 = .loopback(running.server.port()) };
    }

    /// Stops the server and returns its report; panics if `run` does not return in time.
    /// Once: an `errdefer` that finishes a server a failed client left running must not
    /// finish one the test already finished.
    fn finish(running: *Running) !Server.Report {
        if (running.finished) return running.result;
        running.finished = true;
        running.server.stop();
        const start_ns = os.monotonicNs();
        while (running.done.load(.acquire) == 0) {
            const waited_ns = os.monotonicNs() - start_ns;
            if (waited_ns >= stop_limit_ns) std.debug.panic("server: run did not return " ++
                "within {d} s of stop", .{stop_limit_ns / std.time.ns_per_s});
            os.futexWait(&running.done, 0, stop_limit_ns - waited_ns);
        }
        running.thread.join();
        defer running.server.deinit();
        return running.result;
    }
};

/// A keep-alive client connection over the test's own std.Io.Threaded.
const Client = struct {
    stream: net.Stream,
    reader: net.Stream.Reader,
    writer: net.Stream.Writer,
    read_buffer: [1024]u8 = undefined,
    write_buffer: [256]u8 = undefined,

    fn connect(client: *Client, io: Io, address: net.IpAddress) !void {
        client.stream = try address.connect(io, .{ .mode = .stream });
        client.reader = client.stream.reader(io, &client.read_buffer);
        client.writer = client.stream.writer(io, &client.write_buffer);
    }

    pub fn send(client: *Client, bytes: []const u8) !void {
        try client.writer.interface.writeAll(bytes);
        try client.writer.interface.flush();
    }

    /// Sends a GET and reads its response through the body (`Content-Length: 11`).
    fn get(client: *Client) !void {
        try client.send(request_get);
        const in = &client.reader.interface;
        const status = try in.takeDelimiterInclusive('\n');
        try testing.expect(std.mem.startsWith(u8, status, "HTTP/1.1 200"));
        while (true) {
            const line = try in.takeDelimiterInclusive('\n');
            if (std.mem.eql(u8, line, "\r\n")) break;
        }
        try testing.expectEqualStrings(response_body, try in.take(response_body.len));
    }

    /// Whether the server closed the connection: a read returns the end of the stream.
    fn expectClosed(client: *Client) !void {
        try testing.expectError(error.EndOfStream, client.reader.interface.takeByte());
    }

    fn close(client: *Client, io: Io) void {
        client.stream.close(io);
    }
};

/// Serves `clients_count` keep-alive connections of `requests` GETs each with `options`, then
/// stops the server and returns its report.
fn serveClients(
    options: Server.Options,
    comptime clients_count: usize,
    requests: usize,
) !Server.Report {
    var client_io: Io.Threaded = .init(testing.allocator, .{});
    defer client_io.deinit();
    const io = client_io.io();
    var running: Running = undefined;
    try running.start(options);
    // A failed client still stops the server (its error is the test's).
    errdefer _ = running.finish() catch {};
    var clients: [clients_count]Client = undefined;
    var connected: usize = 0;
    defer for (clients[0..connected]) |*client| client.close(io);
    for (&clients) |*client| {
        try client.connect(io, running.address());
        connected += 1;
    }
    for (0..requests) |_| for (&clients) |*client| try client.get();
    return running.finish();
}

test "server shapes: .single serves keep-alive requests and stops on stop" {
    try wine.skipUnderWine(.afd_sockets, @src());
    const report = try serveClients(.{ .address = .{ .ip4 = .loopback(0) } }, 2, 3);
    try testing.expectEqual(@as(u64, 2), report.workers.accepted);
    try testing.expectEqual(@as(u64, 6), report.workers.requests);
}

test "server shapes: .threaded workers share one listener; stop ends every worker" {
    try wine.skipUnderWine(.afd_sockets, @src());
    const report = try serveClients(.{
        .address = .{ .ip4 = .loopback(0) },
        .shape = .{ .threaded = 2 },
        .listeners = .shared,
    }, 4, 2);
    try testing.expectEqual(@as(u64, 4), report.workers.accepted);
    try testing.expectEqual(@as(u64, 8), report.workers.requests);
}

test "server shapes: a stop closes an idle keep-alive connection at the drain" {
    try wine.skipUnderWine(.afd_sockets, @src());
    var client_io: Io.Threaded = .init(testing.allocator, .{});
    defer client_io.deinit();
    const io = client_io.io();
    var running: Running = undefined;
    try running.start(.{
        .address = .{ .ip4 = .loopback(0) },
        .drain_timeout_ns = 2 * std.time.ns_per_s,
        .drain_idle_grace_ns = 50 * std.time.ns_per_ms,
    });
    errdefer _ = running.finish() catch {};
    var client: Client = undefined;
    try client.connect(io, running.address());
    defer client.close(io);
    try client.get();
    const report = try running.finish();
    try client.expectClosed();
    try testing.expectEqual(@as(u64, 1), report.workers.requests);
    try testing.expectEqual(@as(u64, 1), report.workers.closed_idle_at_drain);
}

test "server shapes: a response partly written when the stop comes arrives whole, byte for byte" {
    try wine.skipUnderWine(.afd_sockets, @src());
    var client_io: Io.Threaded = .init(testing.allocator, .{});
    defer client_io.deinit();
    const io = client_io.io();
    // server_stop_test.zig stops more downloads, on the fiber runtime; these are the shapes'.
    const stops = 20;
    const body_buffer = try testing.allocator.alloc(u8, stop_download.bufferBytes(stops));
    defer testing.allocator.free(body_buffer);
    const shapes = [_]Server.Shape{ .single, .{ .threaded = 2 } };
    for (shapes) |shape| for (0..stops) |stop| {
        var download = stop_download.forStop(body_buffer, stop);
        const http_handler: Server.http.Handler = .{
            .context = &download,
            .respondFn = &stop_download.Download.respond,
        };
        var running: Running = undefined;
        try running.startWith(.{
            .address = .{ .ip4 = .loopback(0) },
            .shape = shape,
            .listeners = .shared,
        }, Server.http.handler(&http_handler));
        errdefer _ = running.finish() catch {};
        var client: Client = undefined;
        try client.connect(io, running.address());
        defer client.close(io);
        try client.send(request_get);
        try stop_download.awaitSending(io, &download.connection);
        running.server.stop();
        try stop_download.expectWholeAcrossStop(&client, &download);
        const report = try running.finish();
        try testing.expectEqual(@as(u64, 0), report.workers.cut_at_drain);
        try testing.expect(report.workers.requests >= 2);
    };
}

test "server shapes: /metrics answers with the worker runtime's figures" {
    try wine.skipUnderWine(.afd_sockets, @src());
    var client_io: Io.Threaded = .init(testing.allocator, .{});
    defer client_io.deinit();
    const io = client_io.io();
    const metered: Server.http.WithMetrics = .{ .inner = &hello.http_handler };
    const metered_handler = metered.httpHandler();
    var running: Running = undefined;
    try running.startWith(
        .{ .address = .{ .ip4 = .loopback(0) } },
        Server.http.handler(&metered_handler),
    );
    errdefer _ = running.finish() catch {};
    var client: Client = undefined;
    try client.connect(io, running.address());
    defer client.close(io);
    try client.get(); // any other path: the inner handler
    try client.send("GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n");
    const in = &client.reader.interface;
    const response = try stop_download.readHead(in);
    try testing.expectEqual(200, response.status);
    var body: [64 * 1024]u8 = undefined;
    try in.readSliceAll(body[0..response.content_length]);
    const text = body[0..response.content_length];
    // On every runtime: the uptime and the lanes; on the fiber runtime its tasks too.
    try testing.expect(std.mem.indexOf(u8, text, "\nweft_uptime_seconds ") != null);
    try testing.expect(std.mem.indexOf(u8, text, "lane=\"cpu\"") != null);
    _ = try running.finish();
}

test "server shapes: on the threaded runtime, the fiber runtime's shapes are InvalidOptions" {
    if (platform.fibers) return os.skipTest(@src(), "the fiber runtime serves every shape");
    const address: net.IpAddress = .{ .ip4 = .loopback(0) };
    try testing.expectError(
        error.InvalidOptions,
        Server.init(testing.allocator, .{ .address = address, .shape = .{ .forked = 2 } }),
    );
    try testing.expectError(error.InvalidOptions, Server.init(testing.allocator, .{
        .address = address,
        .shape = .{ .threaded = 2 },
        .listeners = .reuse_port,
    }));
    // The default listeners there are the shared one: a default `.threaded` shape listens.
    try wine.skipUnderWine(.afd_sockets, @src());
    var server = try Server.init(testing.allocator, .{
        .address = address,
        .shape = .{ .threaded = 2 },
    });
    server.deinit();
}
