//! weft.Server's HTTP framing over real sockets, as a hostile client would try it: one test per
//! rule of RFC 9112 the server enforces (server/http/head.zig, server/http/Body.zig), each
//! checking the status, whether the connection closed where it must (a request pipelined
//! behind a rejected one is never answered), and that a new connection is served afterwards;
//! then a seeded fuzz test of mutated requests against a `.threaded` server.
//!
//! `-Dfuzz-requests=n` (the build sets `WEFT_FUZZ_REQUESTS`) sets the fuzz test's request
//! count (default `fuzz_requests_default`; CI runs 20,000 more in ReleaseFast);
//! `WEFT_FUZZ_SEED=n` its seed, printed when it fails.
const std = @import("std");
const builtin = @import("builtin");
const Io = std.Io;
const net = Io.net;
const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};
const testing = std.testing;
const config = @import("../config.zig");
const os = @import("../os/linux.zig");
const socket = @import("../net/socket.zig");
const Runtime = @import("../Runtime.zig");
const Server = @import("../server/Server.zig");
const server_test = @import("server_test.zig");
const Running = server_test.Running;

const fuzz_requests_default = 5_000;

/// Reads a request's body (up to 4 KiB) and answers it as the response body: a handler that
/// takes the body, where `hello` leaves it to std's `discardBody`.
const Echo = struct {
    const http_handler: Server.http.Handler = .{ .respondFn = &respond };

    fn respond(
        _: ?*anyopaque,
        _: *Server.Connection,
        request: *Server.http.Request,
    ) Server.http.RespondError!void {
        // std returns its read-only `Io.Reader.ending` for methods without a body, and
        // `readSliceShort` stores to it (a fault in release builds): ask first.
        if (!request.head.method.requestHasBody()) return request.respond("", .{});
        var transfer: [256]u8 = undefined;
        const reader = try request.readerExpectContinue(&transfer);
        var body: [4096]u8 = undefined;
        // A body that failed (malformed, cut) ends the exchange: the server answers or closes.
        const n = reader.readSliceShort(&body) catch return error.WriteFailed;
        try request.respond(body[0..n], .{});
    }
};

const Response = struct {
    status: u16,
    body: []const u8,
    close: bool,
};

/// What came back for `request`, sent whole on a new connection whose sending side is then
/// shut down: every response up to the server's close, in order.
const Exchange = struct {
    bytes: [16 * 1024]u8 = undefined,
    len: usize = 0,
    responses: [8]Response = undefined,
    count: usize = 0,
    /// Responses past `responses.len` (a fuzzed request may pipeline many): parsed, not kept.
    uncounted: usize = 0,

    fn run(exchange: *Exchange, io: Io, port: u16, request: []const u8) !void {
        const address: net.IpAddress = .{ .ip4 = .loopback(port) };
        const stream = try address.connect(io, .{ .mode = .stream });
        defer stream.close(io);
        var write_buffer: [256]u8 = undefined;
        var writer = stream.writer(io, &write_buffer);
        // A server that closes early may reset the connection before all is sent: what it
        // answered is still read below.
        writer.interface.writeAll(request) catch {};
        writer.interface.flush() catch {};
        stream.shutdown(io, .send) catch {};
        var read_buffer: [1024]u8 = undefined;
        var reader = stream.reader(io, &read_buffer);
        exchange.len = reader.interface.readSliceShort(&exchange.bytes) catch |err| switch (err) {
            // A reset after the responses: what was read before it is kept in the buffer.
            error.ReadFailed => reader.interface.bufferedLen(),
        };
        try exchange.parse();
    }

    fn parse(exchange: *Exchange) !void {
        var rest = exchange.bytes[0..exchange.len];
        while (rest.len > 0) {
            const head_end = (std.mem.indexOf(u8, rest, "\r\n\r\n") orelse
                return error.TestResponseMalformed) + 4;
            const head = rest[0..head_end];
            if (!std.mem.startsWith(u8, head, "HTTP/1.1 ")) return error.TestResponseMalformed;
            const status = try std.fmt.parseInt(u16, head[9..12], 10);
            var content_length: usize = 0;
            var close = false;
            var lines = std.mem.splitSequence(u8, head[0 .. head_end - 4], "\r\n");
            _ = lines.next();
            while (lines.next()) |line| {
                const colon = std.mem.indexOfScalar(u8, line, ':') orelse
                    return error.TestResponseMalformed;
                const value = std.mem.trim(u8, line[colon + 1 ..], " ");
                if (std.ascii.eqlIgnoreCase(line[0..colon], "content-length")) {
                    content_length = try std.fmt.parseInt(usize, value, 10);
                } else if (std.ascii.eqlIgnoreCase(line[0..colon], "connection")) {
                    close = std.ascii.eqlIgnoreCase(value, "close");
                }
            }
            if (rest.len < head_end + content_length) return error.TestResponseMalformed;
            rest = rest[head_end..];
            if (status < 100 or status > 599) return error.TestResponseMalformed;
            if (status == 100) continue; // interim: no body
            if (exchange.count == exchange.responses.len) {
                exchange.uncounted += 1;
                rest = rest[content_length..];
                continue;
            }
            exchange.responses[exchange.count] = .{
                .status = status,
                .body = rest[0..content_length],
                .close = close,
            };
            exchange.count += 1;
            rest = rest[content_length..];
        }
    }

    fn statuses(exchange: *const Exchange, out: []u16) []u16 {
        for (exchange.responses[0..exchange.count], out[0..exchange.count]) |r, *s| s.* = r.status;
        return out[0..exchange.count];
    }
};

const Case = struct {
    name: []const u8,
    request: []const u8,
    /// Every response expected, in order; empty: the connection ends with no answer.
    statuses: []const u16,
    /// For `Echo`: the first response's body.
    body: ?[]const u8 = null,
};

const get_after = "GET /after HTTP/1.1\r\nHost: t\r\n\r\n";

/// Runs each case on a new connection to a `.single` server with `http_handler`, then checks
/// a plain GET on another new connection is answered.
fn expectCases(http_handler: *const Server.http.Handler, cases: []const Case) !void {
    var running: Running = undefined;
    try running.start(server_test.optionsOf(.single), Server.http.handler(http_handler));
    errdefer running.abandon();
    var rt = try Runtime.init(testing.allocator, .{});
    defer rt.deinit();
    const io = rt.io();
    try server_test.bounded(io, runCases, .{ io, running.server.port(), cases });
    const report = try running.finish();
    try testing.expectEqual(0, report.workers.cut_at_drain);
}

fn runCases(io: Io, port: u16, cases: []const Case) !void {
    for (cases) |case| {
        var exchange: Exchange = .{};
        exchange.run(io, port, case.request) catch |err| {
            std.debug.print("case \"{s}\": {t}\n", .{ case.name, err });
            return err;
        };
        var got: [8]u16 = undefined;
        testing.expectEqualSlices(u16, case.statuses, exchange.statuses(&got)) catch |err| {
            std.debug.print("case \"{s}\": statuses differ\n", .{case.name});
            return err;
        };
        if (case.body) |body| try testing.expectEqualStrings(body, exchange.responses[0].body);
        // A rejection says it closes.
        for (exchange.responses[0..exchange.count]) |response| {
            if (response.status >= 400) try testing.expect(response.close);
        }
        var after: Exchange = .{};
        try after.run(io, port, get_after);
        try testing.expectEqualSlices(u16, &.{200}, after.statuses(&got));
    }
}

/// Each case for both handlers: one that reads the body and one that leaves it to std.
fn expectBoth(cases: []const Case) !void {
    try expectCases(&Echo.http_handler, cases);
    var for_hello: [32]Case = undefined;
    for (cases, for_hello[0..cases.len]) |case, *copy| copy.* = .{
        .name = case.name,
        .request = case.request,
        .statuses = case.statuses,
    };
    try expectCases(&server_test.hello.http_handler, for_hello[0..cases.len]);
}

test "http: a POST with neither Content-Length nor Transfer-Encoding has an empty body" {
    try expectBoth(&.{
        .{
            .name = "POST without length, then a pipelined GET",
            .request = "POST / HTTP/1.1\r\nHost: t\r\n\r\n" ++ get_after,
            .statuses = &.{ 200, 200 },
            .body = "",
        },
        .{
            .name = "PUT and PATCH too",
            .request = "PUT / HTTP/1.1\r\nHost: t\r\n\r\nPATCH / HTTP/1.1\r\nHost: t\r\n\r\n",
            .statuses = &.{ 200, 200 },
        },
    });
}

test "http: Content-Length and Transfer-Encoding together get 400 and close" {
    try expectBoth(&.{.{
        .name = "both",
        .request = "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n" ++
            "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n" ++ get_after,
        .statuses = &.{400},
    }});
}

test "http: unknown transfer codings get 501, repeated or non-final chunked 400" {
    try expectBoth(&.{
        .{
            .name = "gzip, chunked",
            .request = "POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip, chunked\r\n\r\n" ++
                "0\r\n\r\n" ++ get_after,
            .statuses = &.{501},
        },
        .{
            .name = "gzip alone",
            .request = "POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n\r\nxx" ++
                get_after,
            .statuses = &.{400},
        },
        .{
            .name = "chunked twice",
            .request = "POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n" ++
                "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n" ++ get_after,
            .statuses = &.{400},
        },
        .{
            .name = "chunked in HTTP/1.0",
            .request = "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            .statuses = &.{400},
        },
    });
}

test "http: chunked is matched case-insensitively and framed exactly" {
    try expectCases(&Echo.http_handler, &.{.{
        .name = "CHUNKED with extensions and trailers, then a pipelined GET",
        .request = "POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: ChUnKeD\r\n\r\n" ++
            "3;a=b\r\nhel\r\n2\r\nlo\r\n0\r\nX-Trailer: 1\r\n\r\n" ++ get_after,
        .statuses = &.{ 200, 200 },
        .body = "hello",
    }});
    try expectCases(&server_test.hello.http_handler, &.{.{
        .name = "a chunked body the handler leaves unread is skipped",
        .request = "POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n" ++
            "5\r\nhello\r\n0\r\n\r\n" ++ get_after,
        .statuses = &.{ 200, 200 },
    }});
}

test "http: Content-Length is digits only, one value or identical repeats" {
    const bad = [_][]const u8{ "+5", "-5", "5 5", "0x5", "5, 6", "99999999999999999999" };
    var cases: [bad.len + 2]Case = undefined;
    var texts: [bad.len][160]u8 = undefined;
    for (bad, 0..) |value, i| cases[i] = .{
        .name = value,
        .request = try std.fmt.bufPrint(&texts[i], "POST / HTTP/1.1\r\nHost: t\r\n" ++
            "Content-Length: {s}\r\n\r\nhello" ++ get_after, .{value}),
        .statuses = &.{400},
    };
    cases[bad.len] = .{
        .name = "two lines with different values",
        .request = "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nContent-Length: 4\r\n" ++
            "\r\nhello" ++ get_after,
        .statuses = &.{400},
    };
    cases[bad.len + 1] = .{
        .name = "identical repeats",
        .request = "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nContent-Length: 5, 5" ++
            "\r\n\r\nhello" ++ get_after,
        .statuses = &.{ 200, 200 },
        .body = "hello",
    };
    try expectBoth(&cases);
}

test "http: a malformed chunk size or line, oversized extensions or trailer get 400 and close" {
    const long_extension = "a" ** (config.server_chunk_extensions_bytes_max + 1);
    const long_trailer = "b" ** (config.server_trailer_bytes_max + 1);
    const head = "POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n";
    try expectCases(&Echo.http_handler, &.{
        .{
            .name = "size not hex",
            .request = head ++ "zz\r\nhello\r\n0\r\n\r\n",
            .statuses = &.{400},
        },
        .{
            .name = "size with a sign",
            .request = head ++ "-5\r\nhello\r\n0\r\n\r\n",
            .statuses = &.{400},
        },
        .{
            .name = "size past 64 bits",
            .request = head ++ "1" ++ "0" ** 16 ++ "\r\n",
            .statuses = &.{400},
        },
        .{
            .name = "bare LF after size",
            .request = head ++ "5\nhello\r\n0\r\n\r\n",
            .statuses = &.{400},
        },
        .{
            .name = "data longer than size",
            .request = head ++ "5\r\nhello!\r\n0\r\n\r\n",
            .statuses = &.{400},
        },
        .{
            .name = "no CRLF after data",
            .request = head ++ "5\r\nhello0\r\n\r\n",
            .statuses = &.{400},
        },
        .{
            .name = "extension too long",
            .request = head ++ "5;" ++ long_extension ++ "\r\n",
            .statuses = &.{400},
        },
        .{
            .name = "NUL in an extension",
            .request = head ++ "5;a\x00\r\nhello\r\n0\r\n\r\n",
            .statuses = &.{400},
        },
        .{
            .name = "trailer too long",
            .request = head ++ "0\r\nX: " ++ long_trailer ++ "\r\n\r\n",
            .statuses = &.{400},
        },
        .{
            .name = "trailer without colon",
            .request = head ++ "0\r\nnocolon\r\n\r\n",
            .statuses = &.{400},
        },
    });
    // A handler that leaves the body to std: std's respond discards it through weft's checks
    // and answers 200 whatever the discard found; weft keeps that 200 from going out.
    try expectCases(&server_test.hello.http_handler, &.{
        .{
            .name = "size not hex, unread",
            .request = head ++ "zz\r\nhello\r\n0\r\n\r\n" ++ get_after,
            .statuses = &.{400},
        },
        .{
            .name = "trailer without colon, unread",
            .request = head ++ "0\r\nnocolon\r\n\r\n" ++ get_after,
            .statuses = &.{400},
        },
    });
}

test "http: Host, colons, control bytes and whitespace in the target get 400" {
    try expectBoth(&.{
        .{
            .name = "HTTP/1.1 without Host",
            .request = "GET / HTTP/1.1\r\n\r\n" ++ get_after,
            .statuses = &.{400},
        },
        .{
            .name = "two Hosts",
            .request = "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
            .statuses = &.{400},
        },
        .{
            .name = "no colon",
            .request = "GET / HTTP/1.1\r\nHost: t\r\nNoColon\r\n\r\n",
            .statuses = &.{400},
        },
        .{
            .name = "space before colon",
            .request = "GET / HTTP/1.1\r\nHost : t\r\n\r\n",
            .statuses = &.{400},
        },
        .{
            .name = "folded line",
            .request = "GET / HTTP/1.1\r\nHost: t\r\nX: a\r\n b\r\n\r\n",
            .statuses = &.{400},
        },
        .{
            .name = "NUL in a value",
            .request = "GET / HTTP/1.1\r\nHost: t\r\nX: a\x00b\r\n\r\n",
            .statuses = &.{400},
        },
        .{
            .name = "control byte in a name",
            .request = "GET / HTTP/1.1\r\nHost: t\r\nX\x01: a\r\n\r\n",
            .statuses = &.{400},
        },
        .{
            .name = "bare CR in a value",
            .request = "GET / HTTP/1.1\r\nHost: t\r\nX: a\rb\r\n\r\n",
            .statuses = &.{400},
        },
        .{
            .name = "bare LF line end",
            .request = "GET / HTTP/1.1\nHost: t\n\n",
            .statuses = &.{400},
        },
        .{
            .name = "space in the target",
            .request = "GET /a b HTTP/1.1\r\nHost: t\r\n\r\n",
            .statuses = &.{400},
        },
        .{
            .name = "tab in the target",
            .request = "GET /a\tb HTTP/1.1\r\nHost: t\r\n\r\n",
            .statuses = &.{400},
        },
        .{
            .name = "unknown method",
            .request = "BREW / HTTP/1.1\r\nHost: t\r\n\r\n",
            .statuses = &.{501},
        },
        .{
            .name = "HTTP/2.0",
            .request = "GET / HTTP/2.0\r\nHost: t\r\n\r\n",
            .statuses = &.{505},
        },
        .{
            .name = "Expect other than 100-continue",
            .request = "POST / HTTP/1.1\r\nHost: t\r\nExpect: tea\r\n\r\n",
            .statuses = &.{417},
        },
        .{
            .name = "head too large",
            .request = "GET / HTTP/1.1\r\nHost: t\r\nX: " ++
                "a" ** config.server_head_bytes_max ++ "\r\n\r\n",
            .statuses = &.{431},
        },
    });
}

test "http: a body cut short by the client's close ends the connection quietly" {
    try expectBoth(&.{
        .{
            .name = "Content-Length longer than the body",
            .request = "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\nhello",
            .statuses = &.{},
        },
        .{
            .name = "chunked body without its last chunk",
            .request = "POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n" ++
                "5\r\nhello\r\n",
            .statuses = &.{},
        },
        .{
            .name = "head cut short",
            .request = "GET / HTTP/1.1\r\nHost:",
            .statuses = &.{},
        },
    });
}

test "http: bodies are skipped to the next request: GET with a body, unread and 100-continue" {
    try expectBoth(&.{
        .{
            .name = "GET with a body",
            .request = "GET / HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello" ++ get_after,
            .statuses = &.{ 200, 200 },
        },
        .{
            .name = "Expect: 100-continue",
            .request = "POST / HTTP/1.1\r\nHost: t\r\nExpect: 100-Continue\r\n" ++
                "Content-Length: 2\r\n\r\nhi" ++ get_after,
            .statuses = &.{ 200, 200 },
        },
        .{
            .name = "empty lines before the request line",
            .request = "\r\n\r\nGET / HTTP/1.1\r\nHost: t\r\n\r\n",
            .statuses = &.{200},
        },
        .{
            .name = "HTTP/1.0 closes",
            .request = "GET / HTTP/1.0\r\n\r\n" ++ get_after,
            .statuses = &.{200},
        },
    });
}

/// Answers with `response_bytes` bytes (streamed from one buffer): more than the loopback
/// socket buffers hold, so a client that never reads stalls the write.
const Large = struct {
    const response_bytes = 64 * 1024 * 1024;
    const http_handler: Server.http.Handler = .{ .respondFn = &respond };

    fn respond(
        _: ?*anyopaque,
        _: *Server.Connection,
        request: *Server.http.Request,
    ) Server.http.RespondError!void {
        var buffer: [4096]u8 = undefined;
        var body = try request.respondStreaming(&buffer, .{ .content_length = response_bytes });
        const chunk: [16 * 1024]u8 = @splat('x');
        var left: usize = response_bytes;
        while (left > 0) : (left -= chunk.len) try body.writer.writeAll(&chunk);
        try body.end();
    }
};

const timeout_ms = 200;

/// Options whose every timeout is long but the one under test (`timeout_ms`): a cut within
/// the test's bound can only come from that one.
fn timeoutOptions() Server.Options {
    var options = server_test.optionsOf(.single);
    options.idle_timeout_ns = 30 * std.time.ns_per_s;
    options.header_timeout_ns = 30 * std.time.ns_per_s;
    options.body_timeout_ns = 30 * std.time.ns_per_s;
    options.send_timeout_ns = 30 * std.time.ns_per_s;
    return options;
}

/// Sends `bytes`, then (if `trickle`) one more `trickle` byte every 50 ms, and waits for the
/// server to close the connection; returns how long that took, in ms.
fn sendAndAwaitCut(io: Io, port: u16, bytes: []const u8, trickle: ?u8) !i64 {
    const address: net.IpAddress = .{ .ip4 = .loopback(port) };
    const stream = try address.connect(io, .{ .mode = .stream });
    defer stream.close(io);
    const start = Io.Clock.awake.now(io);
    var write_buffer: [256]u8 = undefined;
    var writer = stream.writer(io, &write_buffer);
    try writer.interface.writeAll(bytes);
    try writer.interface.flush();
    if (trickle) |byte| {
        // Ends when the cut makes the write fail; bounded by the test's deadline.
        while (true) {
            try io.sleep(.fromMilliseconds(50), .awake);
            writer.interface.writeByte(byte) catch break;
            writer.interface.flush() catch break;
        }
    }
    var read_buffer: [256]u8 = undefined;
    var reader = stream.reader(io, &read_buffer);
    var sink: [256]u8 = undefined;
    _ = reader.interface.readSliceShort(&sink) catch {}; // end of stream or reset
    return start.durationTo(Io.Clock.awake.now(io)).toMilliseconds();
}

fn expectCut(
    options: Server.Options,
    http_handler: *const Server.http.Handler,
    bytes: []const u8,
    trickle: ?u8,
) !Server.Report {
    var running: Running = undefined;
    try running.start(options, Server.http.handler(http_handler));
    errdefer running.abandon();
    var rt = try Runtime.init(testing.allocator, .{});
    defer rt.deinit();
    const io = rt.io();
    const Cut = struct {
        fn run(io_: Io, port: u16, bytes_: []const u8, trickle_: ?u8) !void {
            const elapsed_ms = try sendAndAwaitCut(io_, port, bytes_, trickle_);
            // Never before its timeout.
            try testing.expect(elapsed_ms >= timeout_ms);
        }
    };
    try server_test.boundedBy(io, .fromSeconds(10), Cut.run, .{
        io, running.server.port(), bytes, trickle,
    });
    return running.finish();
}

fn expectOnlyCut(report: Server.Report, comptime field: []const u8) !void {
    const names = .{
        "cut_idle_timeout", "cut_header_timeout",  "cut_body_timeout",
        "cut_send_timeout", "cut_request_timeout",
    };
    inline for (names) |name| {
        const expected: u64 = if (comptime std.mem.eql(u8, name, field)) 1 else 0;
        testing.expectEqual(expected, @field(report.workers, name)) catch |err| {
            std.debug.print("{s} = {d}\n", .{ name, @field(report.workers, name) });
            return err;
        };
    }
}

test "http: a stalled body is cut by the body timeout, and only by it" {
    var options = timeoutOptions();
    options.body_timeout_ns = timeout_ms * std.time.ns_per_ms;
    const report = try expectCut(options, &Echo.http_handler, "POST / HTTP/1.1\r\nHost: t\r\n" ++
        "Content-Length: 100\r\n\r\n0123456789", null);
    try expectOnlyCut(report, "cut_body_timeout");
}

test "http: a chunk that stops midway is cut by the body timeout" {
    var options = timeoutOptions();
    options.body_timeout_ns = timeout_ms * std.time.ns_per_ms;
    const report = try expectCut(options, &Echo.http_handler, "POST / HTTP/1.1\r\nHost: t\r\n" ++
        "Transfer-Encoding: chunked\r\n\r\n5\r\nhe", null);
    try expectOnlyCut(report, "cut_body_timeout");
}

test "http: a client that never reads its response is cut by the send timeout" {
    var options = timeoutOptions();
    options.send_timeout_ns = timeout_ms * std.time.ns_per_ms;
    var running: Running = undefined;
    try running.start(options, Server.http.handler(&Large.http_handler));
    errdefer running.abandon();
    var rt = try Runtime.init(testing.allocator, .{});
    defer rt.deinit();
    const io = rt.io();
    try server_test.boundedBy(io, .fromSeconds(10), neverRead, .{ io, running.server.port() });
    const report = try running.finish();
    try expectOnlyCut(report, "cut_send_timeout");
}

/// Asks for `Large`'s response and reads nothing for a while; then what it reads ends short.
fn neverRead(io: Io, port: u16) !void {
    const address: net.IpAddress = .{ .ip4 = .loopback(port) };
    const stream = try address.connect(io, .{ .mode = .stream });
    defer stream.close(io);
    var write_buffer: [256]u8 = undefined;
    var writer = stream.writer(io, &write_buffer);
    try writer.interface.writeAll(get_after);
    try writer.interface.flush();
    // Long enough for the send timeout and its reaper periods.
    try io.sleep(.fromMilliseconds(4 * timeout_ms), .awake);
    var read_buffer: [64 * 1024]u8 = undefined;
    var reader = stream.reader(io, &read_buffer);
    var received_bytes: usize = 0;
    while (true) {
        received_bytes += reader.interface.discard(.unlimited) catch break;
    }
    // The socket buffers held a few MiB of it; the server gave up on the rest.
    try testing.expect(received_bytes < Large.response_bytes);
}

test "http: a trickling upload that keeps the body timeout at bay meets the request timeout" {
    var options = timeoutOptions();
    options.body_timeout_ns = 10 * std.time.ns_per_s;
    options.request_timeout_ns = timeout_ms * std.time.ns_per_ms;
    const report = try expectCut(options, &Echo.http_handler, "POST / HTTP/1.1\r\nHost: t\r\n" ++
        "Content-Length: 1000\r\n\r\n", 'x');
    try expectOnlyCut(report, "cut_request_timeout");
}

test "http: slow uploaders holding every connection slot are cut, then others are served" {
    var options = timeoutOptions();
    options.connections_max = 4;
    options.body_timeout_ns = timeout_ms * std.time.ns_per_ms;
    var running: Running = undefined;
    try running.start(options, Server.http.handler(&Echo.http_handler));
    errdefer running.abandon();
    var rt = try Runtime.init(testing.allocator, .{});
    defer rt.deinit();
    const io = rt.io();
    try server_test.boundedBy(io, .fromSeconds(10), lockOut, .{ io, running.server.port() });
    const report = try running.finish();
    try testing.expectEqual(4, report.workers.cut_body_timeout);
}

/// An uploader that stalls until the server cuts it: refused at once (every slot taken by a
/// probe), it tries again. Its cut is told by the server's report.
fn slowUpload(io: Io, port: u16, upload: []const u8) Io.Cancelable!void {
    while (true) {
        const elapsed_ms = sendAndAwaitCut(io, port, upload, null) catch |err| switch (err) {
            error.Canceled => return error.Canceled,
            else => return,
        };
        if (elapsed_ms >= timeout_ms) return;
    }
}

/// Whether a GET on a new connection was answered: false when it was closed unanswered.
fn probe(io: Io, port: u16) bool {
    var exchange: Exchange = .{};
    exchange.run(io, port, get_after) catch return false;
    return exchange.count == 1 and exchange.responses[0].status == 200;
}

fn lockOut(io: Io, port: u16) !void {
    var uploaders: Io.Group = .init;
    defer uploaders.cancel(io);
    const upload = "POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\nx";
    for (0..4) |_| try uploaders.concurrent(io, slowUpload, .{ io, port, upload });
    // Locked out once the uploaders hold every slot...
    while (probe(io, port)) try io.sleep(.fromMilliseconds(5), .awake);
    const locked = Io.Clock.awake.now(io);
    // ... until the body timeout cuts them.
    while (!probe(io, port)) try io.sleep(.fromMilliseconds(5), .awake);
    const locked_ms = locked.durationTo(Io.Clock.awake.now(io)).toMilliseconds();
    // No longer than the timeout and two reaper periods (25 %), with slack for a slow
    // machine.
    try testing.expect(locked_ms < 4 * timeout_ms);
    try uploaders.await(io);
}

/// The phases a timeout bounds, each given a timeout of its own by `roleOptions`: spaced so
/// that a phase cut by another phase's timeout is out of its own bounds whichever way the two
/// differ, too early (the reaper never cuts before the timeout) or too late (past the
/// precision Worker.zig promises and `role_allowance_ms`, which stay under the next timeout).
const Role = enum {
    header,
    body,
    send,
    idle,
    request,

    fn timeoutMs(role: Role) u64 {
        return switch (role) {
            .header => 200,
            .body => 450,
            .send => 700,
            .idle => 950,
            .request => 1200,
        };
    }

    /// The report's count of cuts by this role's timeout.
    fn field(comptime role: Role) []const u8 {
        return "cut_" ++ @tagName(role) ++ "_timeout";
    }
};

/// Worker.zig's promise: a cut comes at most two reaper periods after its timeout, a period
/// being an eighth of the shortest timeout (so 25 % of any timeout).
const role_lateness_max_ms = 2 * (Role.header.timeoutMs() / 8);
const role_allowance_ms = server_test.cut_allowance_ms;

comptime {
    const roles = std.enums.values(Role);
    for (roles[0 .. roles.len - 1], roles[1..]) |role, next| {
        std.debug.assert(role.timeoutMs() < next.timeoutMs());
        const due_ms_max = role.timeoutMs() + role_lateness_max_ms + role_allowance_ms;
        std.debug.assert(due_ms_max < next.timeoutMs());
    }
}

fn roleOptions() Server.Options {
    var options = server_test.optionsOf(.single);
    options.header_timeout_ns = Role.header.timeoutMs() * std.time.ns_per_ms;
    options.body_timeout_ns = Role.body.timeoutMs() * std.time.ns_per_ms;
    options.send_timeout_ns = Role.send.timeoutMs() * std.time.ns_per_ms;
    options.idle_timeout_ns = Role.idle.timeoutMs() * std.time.ns_per_ms;
    options.request_timeout_ns = Role.request.timeoutMs() * std.time.ns_per_ms;
    return options;
}

/// Answers with `response_bytes` through a small send buffer, and records when its last write
/// began and when a write failed: when the cut reached the handler. The client cannot see a
/// send cut itself: the connection's end waits behind the response bytes it does not read.
const Flood = struct {
    const response_bytes = 16 * 1024 * 1024;

    /// `os.monotonicNs` as the last write began: the send phase cut began after it. The
    /// handler's start would be tens of ms earlier: the socket fills in steps, each after
    /// the client's delayed ACK (40 ms on Linux), so a few writes wait before the last.
    progress_ns: std.atomic.Value(u64) = .init(0),
    /// `os.monotonicNs` at the failed write; 0 before.
    failed_ns: std.atomic.Value(u64) = .init(0),
    http_handler: Server.http.Handler = .{ .respondFn = &respond },

    fn respond(
        context: ?*anyopaque,
        connection: *Server.Connection,
        request: *Server.http.Request,
    ) Server.http.RespondError!void {
        const flood: *Flood = @ptrCast(@alignCast(context.?));
        // A fixed send buffer, not one the kernel grows to megabytes: the socket is full
        // after a few writes, and 16 MiB are far more than it and the client's hold.
        const handle = connection.stream.socket.handle;
        socket.setOption(handle, linux.SOL.SOCKET, linux.SO.SNDBUF, 16 * 1024) catch {};
        var buffer: [4096]u8 = undefined;
        var body = try request.respondStreaming(&buffer, .{ .content_length = response_bytes });
        const chunk: [16 * 1024]u8 = @splat('x');
        var left: usize = response_bytes;
        while (left > 0) : (left -= chunk.len) {
            flood.progress_ns.store(os.monotonicNs(), .monotonic);
            body.writer.writeAll(&chunk) catch |err| {
                flood.failed_ns.store(os.monotonicNs(), .release);
                return err;
            };
        }
        try body.end();
    }
};

fn sendAll(writer: *Io.Writer, bytes: []const u8) !void {
    try writer.writeAll(bytes);
    try writer.flush();
}

/// Leads a new connection into `role`'s phase and leaves it there until the server cuts it;
/// returns the time from just before the client's last step (the phase begins after it) to
/// the cut, or for `.send` from the handler's last write to its failure.
fn cutAfter(io: Io, role: Role, port: u16, flood: *Flood) anyerror!u64 {
    const address: net.IpAddress = .{ .ip4 = .loopback(port) };
    const stream = try address.connect(io, .{ .mode = .stream });
    defer stream.close(io);
    var write_buffer: [256]u8 = undefined;
    var writer = stream.writer(io, &write_buffer);
    var read_buffer: [1024]u8 = undefined;
    var reader = stream.reader(io, &read_buffer);
    const start_ns = os.monotonicNs();
    switch (role) {
        // A head that never ends.
        .header => try sendAll(&writer.interface, "GET / HTTP/1.1\r\nHost: t\r\n"),
        // A body that stops after 10 of its 100 bytes.
        .body => try sendAll(&writer.interface, "POST / HTTP/1.1\r\nHost: t\r\n" ++
            "Content-Length: 100\r\n\r\n0123456789"),
        // A request answered, then nothing.
        .idle => {
            try sendAll(&writer.interface, get_after);
            try testing.expectEqual(200, (try readHead(&reader.interface)).status);
        },
        // A response never read: the handler's write waits.
        .send => {
            try sendAll(&writer.interface, get_after);
            // Bounded by the test's deadline.
            while (flood.failed_ns.load(.acquire) == 0) {
                try io.sleep(.fromMilliseconds(5), .awake);
            }
            const failed_ns = flood.failed_ns.load(.acquire);
            const cut_ns = failed_ns - flood.progress_ns.load(.monotonic);
            // The socket buffers held a little of it; the server gave up on the rest.
            const received_bytes = reader.interface.discardRemaining() catch 0; // or reset
            try testing.expect(received_bytes < Flood.response_bytes);
            return cut_ns;
        },
        // A body trickling in faster than the body timeout, for longer than the request's.
        .request => {
            try sendAll(&writer.interface, "POST / HTTP/1.1\r\nHost: t\r\n" ++
                "Content-Length: 1000\r\n\r\n");
            var trickle = try io.concurrent(trickleBody, .{ io, &writer.interface });
            defer trickle.cancel(io) catch {};
            _ = reader.interface.discardRemaining() catch {}; // end of stream or reset
            return os.monotonicNs() - start_ns;
        },
    }
    _ = reader.interface.discardRemaining() catch {}; // end of stream or reset
    return os.monotonicNs() - start_ns;
}

/// One body byte every 50 ms (a ninth of the body timeout) until a write fails.
fn trickleBody(io: Io, writer: *Io.Writer) Io.Cancelable!void {
    while (true) {
        try io.sleep(.fromMilliseconds(50), .awake);
        sendAll(writer, "x") catch return;
    }
}

/// Runs one `cutAfter` per role at once, each against its own server, into `elapsed_ns`.
fn cutsByRole(
    io: Io,
    ports: *const [roles_count]u16,
    flood: *Flood,
    elapsed_ns: *[roles_count]u64,
) !void {
    var futures: [roles_count]Io.Future(anyerror!u64) = undefined;
    var launched: usize = 0;
    defer for (futures[0..launched]) |*future| {
        _ = future.cancel(io) catch {};
    };
    for (std.enums.values(Role), ports, &futures) |role, port, *future| {
        future.* = try io.concurrent(cutAfter, .{ io, role, port, flood });
        launched += 1;
    }
    for (&futures, elapsed_ns) |*future, *elapsed| {
        elapsed.* = try future.await(io);
    }
}

const roles_count = std.enums.values(Role).len;

/// Whether `elapsed_ns` is within `role`'s timeout and its promised lateness (with the
/// allowance); says what was wrong otherwise.
fn cutInTime(role: Role, elapsed_ns: u64) bool {
    const role_timeout_ms = role.timeoutMs();
    const due_ms_max = role_timeout_ms + role_lateness_max_ms + role_allowance_ms;
    if (elapsed_ns >= role_timeout_ms * std.time.ns_per_ms and
        elapsed_ns <= due_ms_max * std.time.ns_per_ms) return true;
    std.debug.print("{t} phase: cut after {d} ms, not within {d}-{d} ms (its timeout, two " ++
        "reaper periods, {d} ms for scheduling): cut by another phase's timeout?\n", .{
        role,              elapsed_ns / std.time.ns_per_ms, role_timeout_ms, due_ms_max,
        role_allowance_ms,
    });
    return false;
}

test "http: each phase is cut by its own timeout, in time, and counted under its own reason" {
    var flood: Flood = .{};
    flood.http_handler.context = &flood;
    // One server per role, all with the same five timeouts: each report must hold one cut,
    // under its role's reason. At once, so the test takes about the longest timeout.
    var servers: [roles_count]Running = undefined;
    var ports: [roles_count]u16 = undefined;
    var started: usize = 0;
    defer for (servers[0..started]) |*running| running.abandon();
    for (std.enums.values(Role), &servers, &ports) |role, *running, *port| {
        const http_handler = if (role == .send) &flood.http_handler else &Echo.http_handler;
        try running.start(roleOptions(), Server.http.handler(http_handler));
        started += 1;
        port.* = running.server.port();
    }
    var rt = try Runtime.init(testing.allocator, .{});
    defer rt.deinit();
    const io = rt.io();
    var elapsed_ns: [roles_count]u64 = undefined;
    try server_test.boundedBy(io, .fromSeconds(10), cutsByRole, .{
        io, &ports, &flood, &elapsed_ns,
    });
    var failed = false;
    inline for (comptime std.enums.values(Role), &servers, elapsed_ns) |role, *running, elapsed| {
        if (!cutInTime(role, elapsed)) failed = true;
        const report = try running.finish();
        expectOnlyCut(report, role.field()) catch {
            std.debug.print("{t} phase: counted under the wrong reason\n", .{role});
            failed = true;
        };
    }
    if (failed) return error.TestCutByWrongTimeout;
}

/// What one looping keep-alive client saw across a stop.
const Tally = struct {
    responses: u32 = 0,
    /// Requests sent on an accepted connection and never answered: must stay 0.
    lost: u32 = 0,
    /// Connects refused (or reset unanswered on a new connection) after the stop began.
    refused: u32 = 0,
    /// A reused connection closed before the next request was read: sent again on a new one,
    /// as HTTP clients do for idempotent requests (RFC 9112 §9.3.1).
    retried: u32 = 0,
    /// Responses that did not say `Connection: close` although the stop had begun before
    /// the request was sent.
    kept_open_while_stopping: u32 = 0,
};

const Outcome = union(enum) {
    answered: struct { close: bool },
    /// The connection ended before any byte of a response.
    unanswered,
    /// It ended midway through a response.
    cut,
};

fn requestOnce(reader: *Io.Reader, writer: *Io.Writer) Outcome {
    writer.writeAll("GET / HTTP/1.1\r\nHost: t\r\n\r\n") catch return .unanswered;
    writer.flush() catch return .unanswered;
    const status_line = reader.takeDelimiterInclusive('\n') catch return .unanswered;
    if (!std.mem.startsWith(u8, status_line, "HTTP/1.1 200 ")) return .cut;
    var content_length: ?usize = null;
    var close = false;
    while (true) {
        const line = reader.takeDelimiterInclusive('\n') catch return .cut;
        if (std.mem.eql(u8, line, "\r\n")) break;
        const colon = std.mem.indexOfScalar(u8, line, ':') orelse return .cut;
        const value = std.mem.trim(u8, line[colon + 1 ..], " \r\n");
        if (std.ascii.eqlIgnoreCase(line[0..colon], "content-length")) {
            content_length = std.fmt.parseInt(usize, value, 10) catch return .cut;
        } else if (std.ascii.eqlIgnoreCase(line[0..colon], "connection")) {
            close = std.ascii.eqlIgnoreCase(value, "close");
        }
    }
    reader.discardAll(content_length orelse return .cut) catch return .cut;
    return .{ .answered = .{ .close = close } };
}

/// Sends requests in a loop on keep-alive connections until the server refuses it.
fn loopThroughStop(
    io: Io,
    port: u16,
    stopping: *const std.atomic.Value(bool),
    tally: *Tally,
) Io.Cancelable!void {
    const address: net.IpAddress = .{ .ip4 = .loopback(port) };
    while (true) {
        const stream = address.connect(io, .{ .mode = .stream }) catch |err| switch (err) {
            error.Canceled => return error.Canceled,
            else => {
                if (stopping.load(.acquire)) tally.refused += 1 else tally.lost += 1;
                return;
            },
        };
        defer stream.close(io);
        var read_buffer: [1024]u8 = undefined;
        var write_buffer: [256]u8 = undefined;
        var reader = stream.reader(io, &read_buffer);
        var writer = stream.writer(io, &write_buffer);
        var reused = false;
        while (true) {
            const stop_began = stopping.load(.acquire);
            switch (requestOnce(&reader.interface, &writer.interface)) {
                .answered => |answer| {
                    // Atomic: the test polls it while the clients run.
                    _ = @atomicRmw(u32, &tally.responses, .Add, 1, .monotonic);
                    if (stop_began and !answer.close) tally.kept_open_while_stopping += 1;
                    if (answer.close) break;
                    reused = true;
                },
                .unanswered => if (reused) {
                    tally.retried += 1;
                    break;
                } else {
                    if (stopping.load(.acquire)) tally.refused += 1 else tally.lost += 1;
                    return;
                },
                .cut => {
                    tally.lost += 1;
                    return;
                },
            }
            if (reader.err) |err| if (err == error.Canceled) return error.Canceled;
        }
    }
}

fn expectNothingLost(shape: Server.Shape) !void {
    var running: Running = undefined;
    const handler = Server.http.handler(&server_test.hello.http_handler);
    try running.start(server_test.optionsOf(shape), handler);
    errdefer running.abandon();
    var rt = try Runtime.init(testing.allocator, .{});
    defer rt.deinit();
    const io = rt.io();
    const clients = 20;
    var tallies: [clients]Tally = @splat(.{});
    var stopping: std.atomic.Value(bool) = .init(false);
    var group: Io.Group = .init;
    defer group.cancel(io);
    for (&tallies) |*tally| {
        try group.concurrent(io, loopThroughStop, .{ io, running.server.port(), &stopping, tally });
    }
    // Every client has been answered at least once: all are looping.
    for (0..500) |_| {
        var looping: u32 = 0;
        for (&tallies) |*tally| {
            looping += @intFromBool(@atomicLoad(u32, &tally.responses, .monotonic) > 0);
        }
        if (looping == clients) break;
        try io.sleep(.fromMilliseconds(10), .awake);
    } else return error.TestTimedOut;
    stopping.store(true, .release);
    // Not `finish` first: it blocks this thread, where the clients run, until the drain is
    // over, and the drain reads idle connections for its grace period.
    running.server.stop();
    try server_test.boundedBy(io, .fromSeconds(10), Io.Group.await, .{ &group, io });
    const report = try running.finish();
    var total: Tally = .{};
    for (tallies) |tally| {
        inline for (@typeInfo(Tally).@"struct".fields) |field| {
            @field(total, field.name) += @field(tally, field.name);
        }
    }
    try testing.expectEqual(0, total.lost);
    // Nor closed unanswered after a keep-alive response: the drain's grace period reads it.
    try testing.expectEqual(0, total.retried);
    // Every request the server read was answered: none was read and dropped (which the
    // client would have taken for an idle close and retried).
    try testing.expectEqual(report.workers.requests, total.responses);
    try testing.expectEqual(clients, total.refused); // each client ends on a refusal
    try testing.expectEqual(0, report.workers.cut_at_drain);
    try testing.expect(total.responses >= clients);
}

test "http: 20 keep-alive clients looping through a stop lose no request" {
    try expectNothingLost(.single);
    try expectNothingLost(.{ .threaded = 2 });
}

/// Well-formed requests the fuzz test mutates: every framing the server knows.
const fuzz_seeds = [_][]const u8{
    "GET / HTTP/1.1\r\nHost: t\r\n\r\n",
    "POST /p HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello",
    "POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    "PUT / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n" ++
        "3;a=b\r\nabc\r\n0\r\nX-T: 1\r\n\r\n",
    "GET /a HTTP/1.1\r\nHost: t\r\n\r\nGET /b HTTP/1.1\r\nHost: t\r\n\r\n",
    "POST / HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi",
    "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET / HTTP/1.0\r\n\r\n",
    "POST / HTTP/1.1\r\nHost: t\r\n\r\n",
};

/// Bytes and pieces that matter to HTTP framing, spliced into requests.
/// The first `fuzz_bytes` are single bytes (option 1 of `mutate` takes one of them).
const fuzz_tokens = [_][]const u8{
    "\r\n",
    "\n",
    "\r",
    " ",
    "\t",
    ":",
    ";",
    ",",
    "\x00",
    "\x7f",
    "\xff",
    "0",
    "-",
    "+",
    "chunked",
    "Content-Length: 5\r\n",
    "Transfer-Encoding: chunked\r\n",
    "Transfer-Encoding: gzip\r\n",
    "0\r\n\r\n",
    "ffffffffffffffffff",
    "Host: x\r\n",
    "GET / HTTP/1.1\r\n",
    "Expect: 100-continue\r\n",
};

const fuzz_bytes = 14;
comptime {
    for (fuzz_tokens[0..fuzz_bytes]) |token| std.debug.assert(token.len <= 2);
}

/// Builds a mutated request in `out`: a seed with one to four random edits.
fn mutate(random: std.Random, out: []u8) []u8 {
    const seed = fuzz_seeds[random.uintLessThan(usize, fuzz_seeds.len)];
    var len = seed.len;
    @memcpy(out[0..len], seed);
    for (0..random.intRangeAtMost(u32, 1, 4)) |_| {
        if (len == 0) break;
        const at = random.uintLessThan(usize, len);
        switch (random.uintLessThan(u32, 6)) {
            0 => out[at] ^= @as(u8, 1) << random.int(u3),
            1 => out[at] = fuzz_tokens[random.uintLessThan(usize, fuzz_bytes)][0],
            2 => {
                const token = fuzz_tokens[random.uintLessThan(usize, fuzz_tokens.len)];
                if (len + token.len > out.len) continue;
                std.mem.copyBackwards(u8, out[at + token.len .. len + token.len], out[at..len]);
                @memcpy(out[at..][0..token.len], token);
                len += token.len;
            },
            3 => {
                const n = @min(random.intRangeAtMost(usize, 1, 8), len - at);
                std.mem.copyForwards(u8, out[at .. len - n], out[at + n .. len]);
                len -= n;
            },
            4 => {
                const n = @min(random.intRangeAtMost(usize, 1, 16), len - at);
                if (len + n > out.len) continue;
                std.mem.copyBackwards(u8, out[at + n .. len + n], out[at..len]);
                len += n;
            },
            5 => len = at,
            else => unreachable,
        }
    }
    return out[0..len];
}

fn envNumber(name: []const u8, default: u64) u64 {
    var buffer: [32]u8 = undefined;
    const value = os.getEnv(name, &buffer) orelse return default;
    return std.fmt.parseInt(u64, value, 10) catch default;
}

test "http: fuzz: mutated requests never stop a .threaded server nor garble its responses" {
    const requests = envNumber("WEFT_FUZZ_REQUESTS", fuzz_requests_default);
    const seed = envNumber("WEFT_FUZZ_SEED", 0x5eed);
    var options = server_test.optionsOf(.{ .threaded = 2 });
    options.header_timeout_ns = 2 * std.time.ns_per_s;
    options.body_timeout_ns = 2 * std.time.ns_per_s;
    var running: Running = undefined;
    try running.start(options, Server.http.handler(&Echo.http_handler));
    errdefer running.abandon();
    var rt = try Runtime.init(testing.allocator, .{});
    defer rt.deinit();
    const io = rt.io();
    // Seconds per request are far below this bound; a hang is what it catches.
    const deadline: Io.Duration = .fromSeconds(@intCast(30 + requests / 500));
    const port = running.server.port();
    server_test.boundedBy(io, deadline, fuzz, .{ io, port, seed, requests }) catch |err| {
        std.debug.print("fuzz failed: WEFT_FUZZ_SEED={d} WEFT_FUZZ_REQUESTS={d}\n", .{
            seed, requests,
        });
        return err;
    };
    const report = try running.finish();
    try testing.expectEqual(0, report.workers.cut_at_drain);
}

fn fuzz(io: Io, port: u16, seed: u64, requests: u64) !void {
    var prng: std.Random.DefaultPrng = .init(seed);
    const random = prng.random();
    const batch = 100;
    var sent: u64 = 0;
    while (sent < requests) {
        for (0..@min(batch, requests - sent)) |_| {
            var buffer: [1024]u8 = undefined;
            const request = mutate(random, &buffer);
            var exchange: Exchange = .{};
            exchange.run(io, port, request) catch |err| {
                std.debug.print("request {d}: {t}: \"{f}\"\n", .{
                    sent, err, std.zig.fmtString(request),
                });
                return err;
            };
            sent += 1;
        }
        // Alive, and serving a new connection.
        var after: Exchange = .{};
        try after.run(io, port, get_after);
        var got: [8]u16 = undefined;
        try testing.expectEqualSlices(u16, &.{200}, after.statuses(&got));
    }
}

test "http: a timeout of 0 is refused by init" {
    const names = .{ "idle_timeout_ns", "header_timeout_ns", "body_timeout_ns", "send_timeout_ns" };
    inline for (names) |name| {
        var options = server_test.optionsOf(.single);
        @field(options, name) = 0;
        try testing.expectError(error.InvalidOptions, Server.init(testing.allocator, options));
    }
    var options = server_test.optionsOf(.single);
    options.request_timeout_ns = 0;
    try testing.expectError(error.InvalidOptions, Server.init(testing.allocator, options));
}

/// Reads one response head (after any `100 Continue`) from `reader`: its status and whether
/// it says `Connection: close`.
fn readHead(reader: *Io.Reader) !struct { status: u16, close: bool } {
    while (true) {
        const status_line = try reader.takeDelimiterInclusive('\n');
        if (!std.mem.startsWith(u8, status_line, "HTTP/1.1 ")) return error.TestResponseMalformed;
        const status = try std.fmt.parseInt(u16, status_line[9..12], 10);
        var close = false;
        while (true) {
            const line = try reader.takeDelimiterInclusive('\n');
            if (std.mem.eql(u8, line, "\r\n")) break;
            if (std.ascii.startsWithIgnoreCase(line, "connection:")) {
                close = std.ascii.indexOfIgnoreCase(line, "close") != null;
            }
        }
        if (status != 100) return .{ .status = status, .close = close };
    }
}

fn expectContinueFirst(io: Io, port: u16) !void {
    const address: net.IpAddress = .{ .ip4 = .loopback(port) };
    const stream = try address.connect(io, .{ .mode = .stream });
    defer stream.close(io);
    var write_buffer: [256]u8 = undefined;
    var writer = stream.writer(io, &write_buffer);
    var read_buffer: [1024]u8 = undefined;
    var reader = stream.reader(io, &read_buffer);
    try writer.interface.writeAll("POST / HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\n" ++
        "Content-Length: 5\r\n\r\n");
    try writer.interface.flush();
    // The body goes only after the 100: a server that waits for it first hangs this test.
    const interim = try reader.interface.takeDelimiterInclusive('\n');
    try testing.expectEqualStrings("HTTP/1.1 100 Continue\r\n", interim);
    try testing.expectEqualStrings("\r\n", try reader.interface.takeDelimiterInclusive('\n'));
    try writer.interface.writeAll("hello");
    try writer.interface.flush();
    const response = try readHead(&reader.interface);
    try testing.expectEqual(200, response.status);
}

test "http: Expect: 100-continue gets its 100 before the body is read, whoever reads it" {
    for ([_]*const Server.http.Handler{ &server_test.hello.http_handler, &Echo.http_handler }) |h| {
        var running: Running = undefined;
        try running.start(server_test.optionsOf(.single), Server.http.handler(h));
        errdefer running.abandon();
        var rt = try Runtime.init(testing.allocator, .{});
        defer rt.deinit();
        const io = rt.io();
        try server_test.boundedBy(io, .fromSeconds(5), expectContinueFirst, .{
            io, running.server.port(),
        });
        _ = try running.finish();
    }
}

/// Sends a head declaring `declared_bytes` of body and `sent_bytes` of it, then reads the
/// response: its status and close, and that it arrived whole (no reset destroyed it).
fn sendLargeBody(
    io: Io,
    port: u16,
    method: []const u8,
    declared_bytes: u64,
    sent_bytes: usize,
    expect_close: bool,
) !void {
    const address: net.IpAddress = .{ .ip4 = .loopback(port) };
    const stream = try address.connect(io, .{ .mode = .stream });
    defer stream.close(io);
    var write_buffer: [4096]u8 = undefined;
    var writer = stream.writer(io, &write_buffer);
    try writer.interface.print("{s} / HTTP/1.1\r\nHost: t\r\nContent-Length: {d}\r\n\r\n", .{
        method, declared_bytes,
    });
    const chunk: [4096]u8 = @splat('b');
    var left = sent_bytes;
    // A server that answered early may close before all is sent: like HTTP clients, stop
    // sending then and read the response.
    while (left > 0) {
        const n = @min(left, chunk.len);
        writer.interface.writeAll(chunk[0..n]) catch break;
        left -= n;
    }
    writer.interface.flush() catch {};
    var read_buffer: [1024]u8 = undefined;
    var reader = stream.reader(io, &read_buffer);
    const response = readHead(&reader.interface) catch |err| {
        std.debug.print("readHead: {t} {?t}\n", .{ err, reader.err });
        return err;
    };
    try testing.expectEqual(200, response.status);
    try testing.expectEqual(expect_close, response.close);
    try testing.expectEqualStrings("Hello World", try reader.interface.take(11));
}

test "http: an unread body past the skip bound closes the connection after a whole response" {
    var running: Running = undefined;
    const handler = Server.http.handler(&server_test.hello.http_handler);
    try running.start(server_test.optionsOf(.single), handler);
    errdefer running.abandon();
    var rt = try Runtime.init(testing.allocator, .{});
    defer rt.deinit();
    const io = rt.io();
    const port = running.server.port();
    const skip = config.server_body_skip_bytes_max;
    // POST: std's respond discards it first; weft stops that at the bound, so the response
    // comes (saying close) while the client has sent only twice the bound of 10 MiB.
    try server_test.boundedBy(io, .fromSeconds(10), sendLargeBody, .{
        io, port, "POST", 10 * 1024 * 1024, 2 * skip, true,
    });
    // GET: std ignores its body; weft skips it after the response, and past the bound reads
    // on for a while before it closes, so the response is not destroyed by a reset.
    server_test.boundedBy(io, .fromSeconds(10), sendLargeBody, .{
        io, port, "GET", 3 * skip, 3 * skip, false,
    }) catch |err| {
        std.debug.print("GET: {t}\n", .{err});
        return err;
    };
    _ = try running.finish();
}

/// Answers once the server is stopping: a request in flight when the stop began.
const UntilStop = struct {
    started: std.atomic.Value(u32) = .init(0),
    http_handler: Server.http.Handler = .{ .respondFn = &respond },

    fn respond(
        context: ?*anyopaque,
        connection: *Server.Connection,
        request: *Server.http.Request,
    ) Server.http.RespondError!void {
        const until: *UntilStop = @ptrCast(@alignCast(context.?));
        _ = until.started.fetchAdd(1, .release);
        // Bounded by the test's deadline; the stop is what ends it.
        while (!connection.stopping()) {
            connection.io().sleep(.fromMilliseconds(5), .awake) catch return error.WriteFailed;
        }
        try request.respond("late", .{});
    }
};

/// Sends a request that the handler answers only once the stop began, then, on the same
/// connection, one more: the first response's head was decided before the stop (keep-alive,
/// weft never rewrites it), so the connection is still read during the drain's grace period,
/// and the second is answered with `Connection: close`, the connection's last.
fn requestThroughStop(io: Io, port: u16) !void {
    const address: net.IpAddress = .{ .ip4 = .loopback(port) };
    const stream = try address.connect(io, .{ .mode = .stream });
    defer stream.close(io);
    var write_buffer: [256]u8 = undefined;
    var writer = stream.writer(io, &write_buffer);
    try writer.interface.writeAll(get_after);
    try writer.interface.flush();
    var read_buffer: [1024]u8 = undefined;
    var reader = stream.reader(io, &read_buffer);
    const first = try readHead(&reader.interface);
    try testing.expectEqual(200, first.status);
    try testing.expect(!first.close);
    try testing.expectEqualStrings("late", try reader.interface.take("late".len));
    try writer.interface.writeAll(get_after);
    try writer.interface.flush();
    const second = try readHead(&reader.interface);
    try testing.expectEqual(200, second.status);
    try testing.expect(second.close);
    try testing.expectEqualStrings("late", try reader.interface.take("late".len));
    try testing.expectError(error.EndOfStream, reader.interface.takeByte());
}

test "http: a response under way at the stop keeps its head; the next is the connection's last" {
    var until: UntilStop = .{};
    until.http_handler.context = &until;
    var running: Running = undefined;
    try running.start(server_test.optionsOf(.single), Server.http.handler(&until.http_handler));
    errdefer running.abandon();
    var rt = try Runtime.init(testing.allocator, .{});
    defer rt.deinit();
    const io = rt.io();
    var client = try io.concurrent(requestThroughStop, .{ io, running.server.port() });
    defer client.cancel(io) catch {};
    for (0..1000) |_| {
        if (until.started.load(.acquire) == 1) break;
        try io.sleep(.fromMilliseconds(5), .awake);
    } else return error.TestTimedOut;
    running.server.stop(); // the handler answers once the drain began
    try client.await(io);
    const report = try running.finish();
    try testing.expectEqual(2, report.workers.requests);
    try testing.expectEqual(0, report.workers.cut_at_drain);
}

test "http: a folded line with a colon gets 400, not taken for a field of its own" {
    // Taken for a field, ` Transfer-Encoding: chunked` would frame this POST as chunked (an
    // empty body, then the GET behind it answered): the body of a request smuggled past a
    // front proxy that unfolds the line into X's value.
    try expectBoth(&.{
        .{
            .name = "folded Transfer-Encoding",
            .request = "POST / HTTP/1.1\r\nHost: t\r\nX: a\r\n Transfer-Encoding: chunked\r\n" ++
                "\r\n0\r\n\r\n" ++ get_after,
            .statuses = &.{400},
        },
        .{
            .name = "folded Content-Length, by a tab",
            .request = "POST / HTTP/1.1\r\nHost: t\r\nX: a\r\n\tContent-Length: 0\r\n\r\n" ++
                get_after,
            .statuses = &.{400},
        },
    });
}

test "http: Connection: close makes the response the last, whatever else the header lists" {
    // `close` in the list ends the connection after this response (RFC 9112 §9.6), even
    // beside `keep-alive` or in a second Connection field: a server that let `keep-alive`
    // win would answer the GET pipelined behind, which its client has given up on.
    const get = "GET / HTTP/1.1\r\nHost: t\r\n";
    try expectBoth(&.{
        .{
            .name = "close",
            .request = get ++ "Connection: close\r\n\r\n" ++ get_after,
            .statuses = &.{200},
        },
        .{
            .name = "keep-alive, close",
            .request = get ++ "Connection: keep-alive, close\r\n\r\n" ++ get_after,
            .statuses = &.{200},
        },
        .{
            .name = "Close, keep-alive",
            .request = get ++ "Connection: Close, keep-alive\r\n\r\n" ++ get_after,
            .statuses = &.{200},
        },
        .{
            .name = "keep-alive, then close in a field of its own",
            .request = get ++ "Connection: keep-alive\r\nConnection: close\r\n\r\n" ++ get_after,
            .statuses = &.{200},
        },
        .{
            .name = "HTTP/1.0 keep-alive, close",
            .request = "GET / HTTP/1.0\r\nConnection: keep-alive, close\r\n\r\n" ++ get_after,
            .statuses = &.{200},
        },
        .{
            .name = "keep-alive alone",
            .request = get ++ "Connection: keep-alive\r\n\r\n" ++ get_after,
            .statuses = &.{ 200, 200 },
        },
    });
}
