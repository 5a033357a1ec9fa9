//! HTTP/1.1 over `weft.Server`: a connection handler that reads requests with
//! `std.http.Server` (keep-alive, pipelining) and passes each to a `Handler` to respond.
//!
//! It reports the connection's phases to the worker, so the idle timeout applies while it
//! waits for a request's first byte and the header timeout from there to the end of the
//! head. A head larger than `config.server_head_bytes_max` gets 431, a malformed one 400;
//! the connection is then closed (what follows a bad head cannot be framed) and the server
//! goes on serving the others. While the server stops, the response in flight is the
//! connection's last.
const std = @import("std");
const Io = std.Io;
const config = @import("../config.zig");
const Worker = @import("Worker.zig");

pub const Request = std.http.Server.Request;
pub const RespondError = Request.ExpectContinueError;

/// Answers one request: must call `request.respond` (or `respondStreaming`) once. An error
/// closes the connection. `connection.io()` is the Io to use; `connection.stopping()` says
/// the server is draining.
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
    var read_buffer: [config.server_head_bytes_max]u8 = undefined;
    var write_buffer: [config.server_write_buffer_bytes]u8 = undefined;
    var reader = connection.stream.reader(io, &read_buffer);
    var writer = connection.stream.writer(io, &write_buffer);
    var server = std.http.Server.init(&reader.interface, &writer.interface);
    while (connection.awaitRequest()) {
        // Idle until the first byte (already there when the client pipelines).
        reader.interface.fill(1) catch break;
        connection.receivingHead();
        var request = server.receiveHead() catch |err| {
            switch (err) {
                error.HttpHeadersOversize => {
                    respondRaw(&writer.interface, "431 Request Header Fields Too Large");
                    lingeringClose(connection, &reader.interface);
                },
                error.HttpHeadersInvalid => {
                    respondRaw(&writer.interface, "400 Bad Request");
                    lingeringClose(connection, &reader.interface);
                },
                // The peer left (or a timeout cut it) mid-head or between requests.
                error.HttpRequestTruncated, error.HttpConnectionClosing, error.ReadFailed => {},
            }
            break;
        };
        connection.handling();
        http_handler.respondFn(http_handler.context, connection, &request) catch break;
        if (!request.head.keep_alive) break;
    }
    if (reader.err) |err| if (err == error.Canceled) return error.Canceled;
    if (writer.err) |err| if (err == error.Canceled) return error.Canceled;
}

/// A bodiless error response that closes the connection; a failed write is the peer's loss.
fn respondRaw(writer: *Io.Writer, comptime status: []const u8) void {
    const head = "HTTP/1.1 " ++ status ++ "\r\nconnection: close\r\ncontent-length: 0\r\n\r\n";
    writer.writeAll(head) catch return;
    writer.flush() catch {};
}

/// Bytes of a rejected request read and dropped before the close (see `lingeringClose`).
const linger_bytes_max = 64 * 1024;

/// Half-closes and reads what the client is still sending, so that the close does not reset
/// the connection (a close with unread input sends RST, which can destroy the error response
/// before the client reads it). Bounded by `linger_bytes_max` and by the header timeout: the
/// connection is still in its `head` phase.
fn lingeringClose(connection: *Worker.Connection, reader: *Io.Reader) void {
    connection.stream.shutdown(connection.io(), .send) catch return;
    var dropped: usize = 0;
    while (dropped < linger_bytes_max) {
        dropped += reader.discard(.limited(linger_bytes_max - dropped)) catch return;
    }
}

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
