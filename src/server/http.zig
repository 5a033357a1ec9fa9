//! HTTP/1.1 over `weft.Server`: a connection handler that reads requests (keep-alive,
//! pipelining) and passes each to a `Handler` as a `std.http.Server.Request`, so handlers
//! written for std.http run unchanged.
//!
//! The framing is weft's own: `http/head.zig` parses each head strictly (RFC 9112) and
//! `http/Body.zig` delimits each body, because std.http asserts on input it does not check
//! and is lenient where a server must not be (see both files). A head that breaks a rule gets
//! its status (400, 415, 417, 501 or 505, as `head.status` says), a head larger than
//! `config.server_head_bytes_max` gets 431, a body that breaks its framing gets 400 unless
//! the handler's response had gone out already (`Writer` holds it back otherwise); the
//! connection is then closed (what follows cannot be framed) and the server goes on serving
//! the others. A request without a body length has an empty body.
//!
//! It reports the connection's phases to the worker, so each phase has its timeout: idle until
//! a request's first byte, head until its end, body for each wait for body bytes (in
//! `Body`), send for each wait for the client to take response bytes (in `Writer`). While the
//! server stops, a request whose head is read gets `Connection: close` and is the
//! connection's last; a response under way when the stop comes finishes as it began, and its
//! connection, told nothing of a close, goes on reading for the drain's grace period (see
//! `Worker.zig`).
const std = @import("std");
const Io = std.Io;
const assert = std.debug.assert;
const config = @import("../config.zig");
const Worker = @import("Worker.zig");
const head = @import("http/head.zig");
const Body = @import("http/Body.zig");
const platform = @import("../platform.zig");
/// weft.Runtime as root.zig chooses it (src/platform.zig), for its metrics.
const Runtime = if (platform.fibers)
    @import("../Runtime.zig")
else
    @import("../ThreadedRuntime.zig");

pub const Request = std.http.Server.Request;
pub const RespondError = Request.ExpectContinueError;

/// Answers one request: must call `request.respond` (or `respondStreaming` and end it) once;
/// a handler that writes nothing is answered 500 and the connection closed. An error closes
/// the connection. `connection.io()` is the Io to use; `connection.stopping()` says the
/// server is draining. Setting `request.head.keep_alive = false` before responding makes the
/// response the connection's last (`Connection: close`). The body, read through
/// `request.readerExpectContinue`, ends with `error.ReadFailed` if the client sends a
/// malformed body or leaves before its end; what the handler does not read is skipped (up
/// to `config.server_body_skip_bytes_max`, else the connection is closed).
pub const Handler = struct {
    context: ?*anyopaque = null,
    respondFn: *const fn (
        context: ?*anyopaque,
        connection: *Worker.Connection,
        request: *Request,
    ) RespondError!void,
};

/// The `Server.Handler` serving HTTP with `http_handler`, which must outlive the server.
pub fn handler(http_handler: *const Handler) Worker.Handler {
    return .{ .context = @constCast(http_handler), .serveFn = &serve };
}

fn serve(context: ?*anyopaque, connection: *Worker.Connection) Io.Cancelable!void {
    const http_handler: *const Handler = @ptrCast(@alignCast(context.?));
    const io = connection.io();
    // Buffers only while a request is under way (see `Buffers`): a waiting connection holds
    // none, its reader and writer point at nothing.
    var buffers: ?Buffers = null;
    defer if (buffers) |held| connection.giveBuffer(held.whole);
    var reader = connection.stream.reader(io, &.{});
    var writer: Writer = .init(connection, &.{});
    while (connection.awaitRequest()) {
        if (reader.interface.bufferedLen() == 0) {
            // Nothing pipelined: wait for the next request holding no buffer.
            if (buffers) |held| {
                connection.giveBuffer(held.whole);
                buffers = null;
                reader.interface.buffer = &.{};
                writer.interface.buffer = &.{};
            }
            var first: [config.server_first_read_bytes]u8 = undefined;
            const first_len = awaitFirstBytes(connection, &first) catch |err| switch (err) {
                error.Canceled => return error.Canceled,
                error.EndOfStream, error.ReadFailed => break,
            };
            const held: Buffers = .of(connection.takeBuffer() catch break);
            buffers = held;
            @memcpy(held.read[0..first_len], first[0..first_len]);
            reader.interface.buffer = held.read;
            reader.interface.seek = 0;
            reader.interface.end = first_len;
            writer.interface.buffer = held.write;
        }
        connection.receivingHead();
        const parsed = receiveHead(&reader.interface) catch |err| {
            const status: std.http.Status = switch (err) {
                // The peer left (or a timeout cut it) mid-head.
                error.ReadFailed, error.EndOfStream => break,
                error.HeadOversize => .request_header_fields_too_large,
                else => |e| head.status(e),
            };
            reject(connection, &writer, &reader.interface, status);
            break;
        };
        const exchange = Exchange{
            .connection = connection,
            .in = &reader.interface,
            .writer = &writer,
            .head = parsed,
            .body_buffer = buffers.?.body,
        };
        if (!exchange.run(http_handler)) break;
    }
    if (reader.err) |err| if (err == error.Canceled) return error.Canceled;
    if (writer.err) |err| if (err == error.Canceled) return error.Canceled;
}

/// A connection's buffer (`Worker.Connection.takeBuffer`) while a request is under way, cut
/// into the read buffer (which bounds a head), the write buffer and the body's.
const Buffers = struct {
    whole: Worker.Connection.Buffer,
    read: []u8,
    write: []u8,
    body: []u8,

    comptime {
        assert(Worker.Connection.buffer_bytes == config.server_head_bytes_max +
            config.server_write_buffer_bytes + config.server_body_buffer_bytes);
    }

    fn of(whole: Worker.Connection.Buffer) Buffers {
        const read_end = config.server_head_bytes_max;
        const write_end = read_end + config.server_write_buffer_bytes;
        return .{
            .whole = whole,
            .read = whole[0..read_end],
            .write = whole[read_end..write_end],
            .body = whole[write_end..],
        };
    }
};

/// Waits, in the connection's idle phase, for the next request's first bytes, read into
/// `first` (on the task's stack, so the wait holds no buffer); returns how many.
/// `EndOfStream`: the client closed (or a timeout or the drain shut the reading side).
fn awaitFirstBytes(
    connection: *Worker.Connection,
    first: []u8,
) error{ Canceled, EndOfStream, ReadFailed }!usize {
    const io = connection.io();
    const handle = connection.stream.socket.handle;
    var vectors = [_][]u8{first};
    const len = io.vtable.netRead(io.userdata, handle, &vectors) catch |err| return switch (err) {
        error.Canceled => error.Canceled,
        else => error.ReadFailed,
    };
    if (len == 0) return error.EndOfStream;
    return len;
}

const HeadError = head.Error || error{
    /// The head did not end within the read buffer: 431.
    HeadOversize,
    /// The connection ended mid-head (`EndOfStream`) or its read failed.
    ReadFailed,
    EndOfStream,
};

/// Reads a head into `in`'s buffer and parses it; it stays there (the result's slices point
/// to it) until the buffer is next filled.
fn receiveHead(in: *Io.Reader) HeadError!head.Head {
    var scan: head.Scan = .{};
    while (true) {
        if (try head.findEnd(in.buffered(), &scan)) |span| {
            const bytes = in.buffered()[span.start..span.end];
            in.toss(span.end);
            return head.parse(bytes);
        }
        if (in.bufferedLen() >= in.buffer.len) return error.HeadOversize;
        try in.fillMore(); // moves the buffered bytes to the front: `scan` stays valid
    }
}

/// One request and its response, after its head was read.
const Exchange = struct {
    connection: *Worker.Connection,
    in: *Io.Reader,
    writer: *Writer,
    head: head.Head,
    body_buffer: []u8,

    /// Hands the request to the handler; returns whether the connection may carry another.
    fn run(exchange: *const Exchange, http_handler: *const Handler) bool {
        const connection = exchange.connection;
        const writer = exchange.writer;
        const framing = exchange.head.framing;
        var body: Body = .init(exchange.in, connection, framing, exchange.body_buffer);
        body.out = &writer.interface;
        var server: std.http.Server = .{
            .out = &writer.interface,
            .reader = .{
                .in = &body.interface,
                .state = .received_head,
                .interface = undefined,
                .max_head_len = exchange.in.buffer.len,
            },
        };
        var request: Request = .{
            .server = &server,
            .head = exchange.head.std,
            .head_buffer = exchange.head.bytes,
        };
        if (connection.stopping()) request.head.keep_alive = false;
        connection.handling();
        connection.countRequest();
        const written_before = writer.written_bytes;
        writer.begin(&body);
        const responded = if (http_handler.respondFn(http_handler.context, connection, &request))
            true
        else |_|
            false;
        const flushed = if (writer.interface.flush()) true else |_| false;
        writer.end();
        const answered = writer.written_bytes != written_before;
        if (body.err) |err| switch (err) {
            // The client left: nothing to answer.
            error.BodyTruncated, error.ReadFailed, error.WriteFailed => return false,
            // Answered with `Connection: close` (std saw the failed discard); what the client
            // still sends is read for a while, so that the close does not reset the response.
            error.BodySkipOversize => {
                lingeringClose(connection, exchange.in);
                return false;
            },
            // The body broke its framing: the request is malformed, whatever the handler
            // made of it (`Writer` kept its response from going out).
            error.ChunkInvalid, error.ChunkExtensionsOversize, error.TrailerOversize => {
                if (!answered) reject(connection, writer, exchange.in, .bad_request);
                return false;
            },
        };
        if (!flushed or !responded) return false;
        if (!answered) {
            // A handler that wrote nothing: the client would wait for an answer forever.
            reject(connection, writer, exchange.in, .internal_server_error);
            return false;
        }
        if (!request.head.keep_alive or server.reader.state == .closing) {
            // The response said `Connection: close`. A client that pipelined requests after
            // this one, or is still sending this one's body, would have the close reset the
            // connection, which can destroy responses it has not read yet: read what it
            // sends for a while first.
            if (exchange.in.bufferedLen() > 0 or !body.complete()) {
                lingeringClose(connection, exchange.in);
            }
            return false;
        }
        if (body.skip(config.server_body_skip_bytes_max)) return true;
        // Too much left unread, or it broke its framing: the response said nothing of a
        // close, so read what follows for a while before closing rather than reset.
        lingeringClose(connection, exchange.in);
        return false;
    }
};

/// A bodiless error response, then a lingering close. A failed write is the peer's loss.
fn reject(
    connection: *Worker.Connection,
    writer: *Writer,
    in: *Io.Reader,
    status: std.http.Status,
) void {
    connection.countRejected();
    const out = &writer.interface;
    out.print("HTTP/1.1 {d} {s}\r\nconnection: close\r\ncontent-length: 0\r\n\r\n", .{
        @intFromEnum(status), status.phrase() orelse "",
    }) catch return;
    out.flush() catch return;
    lingeringClose(connection, in);
}

/// Bytes of a rejected request read and dropped before the close (see `lingeringClose`).
const linger_bytes_max = 64 * 1024;

/// Half-closes and reads what the client is still sending, so that the close does not reset
/// the connection (a close with unread input sends RST, which can destroy the error response
/// before the client reads it). Bounded by `linger_bytes_max` and by the header timeout: the
/// connection is in its `head` phase.
fn lingeringClose(connection: *Worker.Connection, in: *Io.Reader) void {
    connection.lingering();
    connection.stream.shutdown(connection.io(), .send) catch return;
    var dropped: usize = 0;
    while (dropped < linger_bytes_max) {
        dropped += in.discard(.limited(linger_bytes_max - dropped)) catch return;
    }
}

/// The connection's response writer: std's `net.Stream.Writer`, but each write that may wait
/// for the client is the connection's `send` phase, the bytes written are counted, and while
/// a handler runs (`begin` to `end`) nothing of its response goes out once the request's body
/// failed (a malformed or cut body makes the request one to reject, whatever the handler
/// answered: std's `respond` swallows the failure of the discard it does first).
///
/// It never changes a byte it is given. Whether a response says `Connection: close` is
/// decided before its head is serialized (`Exchange.run` sets `request.head.keep_alive`, which
/// std's `respond` and `respondStreaming` read); a stop that comes after the head went out
/// leaves the response as it is, and the connection answers what comes next (see
/// `Worker.Connection.awaitRequest`). Rejected: rewriting a buffered head to say `close`
/// once the stop came, which cannot tell a head from body bytes after a short write.
const Writer = struct {
    interface: Io.Writer,
    connection: *Worker.Connection,
    /// Bytes the socket took.
    written_bytes: u64 = 0,
    err: ?Io.net.Stream.Writer.Error = null,
    /// The body of the request whose handler runs; null outside `begin`-`end`.
    body: ?*const Body = null,

    fn init(connection: *Worker.Connection, buffer: []u8) Writer {
        return .{
            .interface = .{ .vtable = &.{ .drain = drain }, .buffer = buffer },
            .connection = connection,
        };
    }

    fn begin(writer: *Writer, body: *const Body) void {
        assert(writer.body == null);
        assert(writer.interface.end == 0);
        writer.body = body;
    }

    fn end(writer: *Writer) void {
        assert(writer.body != null);
        writer.body = null;
        // What a refused response left in the buffer is dropped.
        writer.interface.end = 0;
    }

    fn drain(w: *Io.Writer, data: []const []const u8, splat: usize) Io.Writer.Error!usize {
        const writer: *Writer = @alignCast(@fieldParentPtr("interface", w));
        if (writer.body) |body| if (body.err) |err| switch (err) {
            error.BodySkipOversize => {}, // std answers it with a close: let it through
            else => return error.WriteFailed,
        };
        const connection = writer.connection;
        const io = connection.io();
        const previous = connection.sending();
        defer connection.sent(previous);
        const handle = connection.stream.socket.handle;
        const n = io.vtable.netWrite(io.userdata, handle, w.buffered(), data, splat) catch |err| {
            writer.err = err;
            return error.WriteFailed;
        };
        writer.written_bytes += n;
        return w.consume(n);
    }
};

/// A `Handler` answering every request with 200 and a fixed `text/plain` body.
pub fn Fixed(comptime body: []const u8) type {
    return struct {
        pub const http_handler: Handler = .{ .respondFn = &respond };

        fn respond(_: ?*anyopaque, _: *Worker.Connection, request: *Request) RespondError!void {
            try request.respond(body, .{
                .extra_headers = &.{.{ .name = "content-type", .value = "text/plain" }},
            });
        }
    };
}

/// A `Handler` that answers `GET /metrics` with `weft.Metrics` of the runtime serving the
/// request, in the Prometheus text format, and passes every other request to `inner`, which
/// must outlive the server. Each worker has its own runtime (`.threaded`, `.forked`): a scrape
/// sees the worker whose connection it arrived on.
///
/// ```
/// const metered: weft.Server.http.WithMetrics = .{ .inner = &hello.http_handler };
/// const metered_handler = metered.httpHandler();
/// const report = try server.run(weft.Server.http.handler(&metered_handler));
/// ```
pub const WithMetrics = struct {
    inner: *const Handler,
    path: []const u8 = "/metrics",

    /// The handler; it points at `with_metrics`, which must outlive the server.
    pub fn httpHandler(with_metrics: *const WithMetrics) Handler {
        return .{ .context = @constCast(with_metrics), .respondFn = &respond };
    }

    fn respond(
        context: ?*anyopaque,
        connection: *Worker.Connection,
        request: *Request,
    ) RespondError!void {
        const with_metrics: *const WithMetrics = @ptrCast(@alignCast(context.?));
        const scrape = request.head.method == .GET and
            std.mem.eql(u8, request.head.target, with_metrics.path);
        if (!scrape) {
            return with_metrics.inner.respondFn(with_metrics.inner.context, connection, request);
        }
        // Made on the blocking lane (`Runtime.prometheusTextOf`): a snapshot is larger than
        // the frame a small connection stack affords. A scrape every few seconds affords a
        // mapping of its own, which also leaves no memory behind.
        const gpa = std.heap.page_allocator;
        const io = connection.io();
        const text = Runtime.prometheusTextOf(io, gpa) catch |err| switch (err) {
            error.OutOfMemory => {
                return request.respond("no memory for the metrics\n", .{
                    .status = .service_unavailable,
                });
            },
            // Kept for the write, which ends the request with it.
            error.Canceled => {
                io.recancel();
                return request.respond("", .{ .status = .service_unavailable });
            },
        } orelse {
            return request.respond("not a weft runtime\n", .{ .status = .not_found });
        };
        defer gpa.free(text);
        try request.respond(text, .{
            .extra_headers = &.{.{ .name = "content-type", .value = "text/plain; version=0.0.4" }},
        });
    }
};
