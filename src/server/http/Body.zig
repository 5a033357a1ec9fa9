//! A request body, framed by weft: the `Io.Reader` std.http reads a request's body from.
//!
//! The server hands std's `http.Reader` this reader as its input, in place of the socket, for
//! the length of one body. It yields the body's bytes exactly: a Content-Length body ends after
//! its length, a chunked body after its last chunk and trailer section, so std's decoders never
//! read into the next request. For a chunked body std's decoder still does the decoding (its
//! `Request` API stays as it is), but only over bytes this reader has checked against RFC 9112
//! §7.1 first (`Chunked`): std's chunk parser takes any letter as a hex digit, skips any
//! extension, accepts a bare LF and wraps a long size. A body that breaks a rule or ends early
//! (the client closed) fails the read with `error.ReadFailed`, and `err` says why, so the
//! handler never takes a cut body for a whole one.
//!
//! Reads that must wait for the socket report the connection's `body` phase to the worker, so
//! the body timeout bounds the wait for each read (like nginx's `client_body_timeout`), and
//! first flush what is buffered of the response: std's `respond` buffers a `100 Continue` and
//! then reads the body it asked for without sending it, which left clients waiting for it
//! (RFC 9110 §10.1.1) until the body timeout.
//!
//! A Content-Length body only ever discarded (std's `respond` drops a body its handler did not
//! read, whatever its length) is cut off after `config.server_body_skip_bytes_max`: the read
//! fails with `error.BodySkipOversize`, so std answers with `Connection: close` instead of
//! taking in a body of any size for nothing (Go's net/http stops at 256 KiB the same way).
//! A chunked body cannot be told apart so: std's decoder reads its framing through `readVec`
//! whether it keeps or drops the data, so std drops it whole, bounded by the body timeout
//! (and `request_timeout_ns` where set).
const Body = @This();

const std = @import("std");
const Io = std.Io;
const assert = std.debug.assert;
const config = @import("../../config.zig");
const head = @import("head.zig");
const Worker = @import("../Worker.zig");

interface: Io.Reader,
/// The connection's reader: the head was taken from it, the next request follows the body.
source: *Io.Reader,
/// Null in unit tests: no worker times the reads.
connection: ?*Worker.Connection,
/// The response writer, flushed before each wait for body bytes; null in unit tests.
out: ?*Io.Writer = null,
/// Content-Length body bytes passed on through `stream` (read) and through `discard`.
read_bytes: u64 = 0,
discarded_bytes: u64 = 0,
state: union(enum) {
    /// Body bytes not yet passed on.
    length: u64,
    chunked: Chunked,
},
err: ?Error = null,

pub const Error = error{
    /// The client closed before the body's end.
    BodyTruncated,
    /// A chunk size, extension or line ending broke RFC 9112 §7.1.
    ChunkInvalid,
    /// The chunk extensions of the body passed `config.server_chunk_extensions_bytes_max`.
    ChunkExtensionsOversize,
    /// The trailer section passed `config.server_trailer_bytes_max`.
    TrailerOversize,
    /// The socket read failed (the connection's reader holds the error), or was cut.
    ReadFailed,
    /// Past `config.server_body_skip_bytes_max` bytes discarded and none read: the rest is
    /// not worth reading (the connection closes after the response).
    BodySkipOversize,
    /// Writing what was buffered of the response failed before a wait for the body.
    WriteFailed,
};

/// `buffer` holds checked chunked bytes until std's decoder takes them; the trailer section
/// must fit in it whole, since std parses it from this reader's buffer.
pub fn init(
    source: *Io.Reader,
    connection: ?*Worker.Connection,
    framing: head.Framing,
    buffer: []u8,
) Body {
    assert(buffer.len > config.server_trailer_bytes_max);
    return .{
        .interface = .{
            .vtable = &.{ .stream = stream, .discard = discard, .readVec = readVec },
            .buffer = buffer,
            .seek = 0,
            .end = 0,
        },
        .source = source,
        .connection = connection,
        .state = switch (framing) {
            .length => |length| .{ .length = length },
            .chunked => .{ .chunked = .{} },
        },
    };
}

/// Whether every byte of the body was read from the connection.
pub fn complete(body: *const Body) bool {
    return switch (body.state) {
        .length => |remaining| remaining == 0,
        .chunked => |chunked| chunked.state == .done,
    } and body.interface.seek == body.interface.end;
}

/// Reads and drops what is left of the body, up to `bytes_max` bytes, so that the next request
/// can be read from the connection. Returns false when the connection cannot be reused: the
/// body was malformed or cut, or more than `bytes_max` bytes remain (reading them is not worth
/// the time; closing is cheaper).
pub fn skip(body: *Body, bytes_max: u64) bool {
    switch (body.state) {
        .length => |remaining| if (remaining > bytes_max) return false,
        .chunked => {},
    }
    var skipped: u64 = 0;
    while (!body.complete()) {
        if (skipped >= bytes_max) return false;
        const limit: Io.Limit = .limited64(bytes_max - skipped);
        skipped += body.interface.discard(limit) catch |err| switch (err) {
            error.EndOfStream => break,
            error.ReadFailed => return false,
        };
    }
    return body.complete();
}

fn fail(body: *Body, err: Error) error{ReadFailed} {
    body.err = err;
    return error.ReadFailed;
}

/// Waits for more bytes of the connection, in the `body` phase, after sending what is
/// buffered of the response (a `100 Continue` the client waits for, among others).
fn fillSource(body: *Body) error{ReadFailed}!void {
    if (body.out) |out| out.flush() catch return body.fail(error.WriteFailed);
    const connection = body.connection;
    if (connection) |c| c.waitingBody();
    defer if (connection) |c| c.handling();
    body.source.fillMore() catch |err| return body.fail(switch (err) {
        error.EndOfStream => error.BodyTruncated,
        error.ReadFailed => error.ReadFailed,
    });
}

/// The connection's buffered bytes, after waiting for some if there were none.
fn bufferedSource(body: *Body) error{ReadFailed}!Io.Limit {
    if (body.source.bufferedLen() == 0) try body.fillSource();
    assert(body.source.bufferedLen() > 0);
    return .limited(body.source.bufferedLen());
}

fn stream(r: *Io.Reader, w: *Io.Writer, limit: Io.Limit) Io.Reader.StreamError!usize {
    const body: *Body = @alignCast(@fieldParentPtr("interface", r));
    switch (body.state) {
        .length => |*remaining| {
            if (remaining.* == 0) return error.EndOfStream;
            // Only bytes already buffered: the wait for more is `fillSource`'s, in its phase.
            const buffered = try body.bufferedSource();
            const n = try body.source.stream(w, limit.min(.limited64(remaining.*)).min(buffered));
            remaining.* -= n;
            body.read_bytes += n;
            return n;
        },
        .chunked => {
            try body.fillChunked();
            return 0; // the bytes are in the buffer
        },
    }
}

fn discard(r: *Io.Reader, limit: Io.Limit) Io.Reader.Error!usize {
    const body: *Body = @alignCast(@fieldParentPtr("interface", r));
    assert(r.seek == r.end);
    switch (body.state) {
        .length => |*remaining| {
            if (remaining.* == 0) return error.EndOfStream;
            try body.checkSkip();
            const buffered = try body.bufferedSource();
            const n = try body.source.discard(limit.min(.limited64(remaining.*)).min(buffered));
            remaining.* -= n;
            body.discarded_bytes += n;
            return n;
        },
        .chunked => {
            try body.fillChunked();
            const n = limit.minInt(r.end - r.seek);
            r.seek += n;
            return n;
        },
    }
}

fn readVec(r: *Io.Reader, data: [][]u8) Io.Reader.Error!usize {
    const body: *Body = @alignCast(@fieldParentPtr("interface", r));
    switch (body.state) {
        .length => return Io.Reader.defaultReadVec(r, data),
        .chunked => {
            try body.fillChunked();
            return 0; // the bytes are in the buffer
        },
    }
}

/// Fails a discard of a Content-Length body once the skip bound was discarded and nothing
/// read: std's `respond` dropping a body nobody wanted.
fn checkSkip(body: *Body) error{ReadFailed}!void {
    assert(body.state == .length);
    if (body.read_bytes > 0) return;
    if (body.discarded_bytes < config.server_body_skip_bytes_max) return;
    return body.fail(error.BodySkipOversize);
}

/// Moves checked bytes of a chunked body from the connection into the buffer: at least one,
/// or fails. `error.EndOfStream` once the body's last byte was passed on and taken.
fn fillChunked(body: *Body) Io.Reader.Error!void {
    const r = &body.interface;
    const chunked = &body.state.chunked;
    if (body.err != null) return error.ReadFailed; // a rule was broken after the bytes given
    if (r.seek == r.end) {
        r.seek = 0;
        r.end = 0;
    }
    if (chunked.state == .done) {
        if (r.seek == r.end) return error.EndOfStream;
        return;
    }
    if (r.end == r.buffer.len) {
        if (r.seek == 0) return; // full: the caller takes from it first
        // Room for more: std's decoder needs a trailer section in one piece.
        try r.vtable.rebase(r, r.end - r.seek + 1);
    }
    if (body.source.bufferedLen() == 0) try body.fillSource();
    const source = body.source.buffered();
    const room = r.buffer[r.end..];
    const n = chunked.feed(source[0..@min(source.len, room.len)]);
    @memcpy(room[0..n], source[0..n]);
    r.end += n;
    body.source.toss(n);
    if (chunked.err) |err| {
        // The bytes before the broken one are passed on; the next read fails.
        body.err = err;
        if (n == 0) return error.ReadFailed;
    }
}

/// A checker of chunked framing (RFC 9112 §7.1), fed the body's bytes in order. It says how
/// many bytes of what it is fed belong to the body and are well-formed, stopping at the first
/// broken one or at the end of the body.
pub const Chunked = struct {
    state: State = .size_first,
    /// Data bytes left in the current chunk (`data` state).
    data_remaining: u64 = 0,
    /// The size being read (`size` state).
    size: u64 = 0,
    extensions_bytes: u64 = 0,
    trailer_bytes: u64 = 0,
    err: ?Error = null,

    pub const State = enum {
        /// First hex digit of a chunk size.
        size_first,
        size,
        /// Whitespace after the size: a `;` must follow.
        size_space,
        /// `;` extensions up to the CR.
        extension,
        /// CR of a chunk-size line seen, LF next.
        size_lf,
        data,
        /// CRLF after a chunk's data.
        data_cr,
        data_lf,
        /// Start of a trailer field line, or the CR of the final empty line.
        trailer_line,
        trailer_name,
        trailer_value,
        trailer_lf,
        final_lf,
        done,
        invalid,
    };

    /// Returns how many of `bytes` were taken: all of them, or up to the end of the body, or
    /// up to the first byte that breaks the framing (then `err` is set).
    pub fn feed(chunked: *Chunked, bytes: []const u8) usize {
        var i: usize = 0;
        while (i < bytes.len) {
            switch (chunked.state) {
                .done, .invalid => break,
                .data => {
                    const n: usize = @intCast(@min(chunked.data_remaining, bytes.len - i));
                    chunked.data_remaining -= n;
                    i += n;
                    if (chunked.data_remaining == 0) chunked.state = .data_cr;
                    continue;
                },
                else => {},
            }
            chunked.state = chunked.next(bytes[i]) orelse {
                if (chunked.err == null) chunked.err = error.ChunkInvalid;
                chunked.state = .invalid;
                break;
            };
            i += 1;
        }
        return i;
    }

    /// The state after framing byte `c`; null if `c` breaks the rules (`err` may say how).
    fn next(chunked: *Chunked, c: u8) ?State {
        switch (chunked.state) {
            .size_first => {
                chunked.size = hexValue(c) orelse return null;
                return .size;
            },
            .size => {
                if (hexValue(c)) |digit| {
                    if (chunked.size > std.math.maxInt(u64) >> 4) return null;
                    chunked.size = chunked.size << 4 | digit;
                    return .size;
                }
                return switch (c) {
                    '\r' => .size_lf,
                    ' ', '\t' => .size_space,
                    ';' => chunked.extensionByte(c),
                    else => null,
                };
            },
            .size_space => return switch (c) {
                ' ', '\t' => .size_space,
                ';' => chunked.extensionByte(c),
                else => null,
            },
            .extension => return switch (c) {
                '\r' => .size_lf,
                else => chunked.extensionByte(c),
            },
            .size_lf => {
                if (c != '\n') return null;
                chunked.data_remaining = chunked.size;
                return if (chunked.size == 0) .trailer_line else .data;
            },
            .data_cr => return if (c == '\r') .data_lf else null,
            .data_lf => return if (c == '\n') .size_first else null,
            .trailer_line => {
                if (c == '\r') return .final_lf;
                if (!head.isToken(c)) return null;
                return chunked.trailerByte(.trailer_name);
            },
            .trailer_name => {
                if (c == ':') return chunked.trailerByte(.trailer_value);
                if (!head.isToken(c)) return null;
                return chunked.trailerByte(.trailer_name);
            },
            .trailer_value => {
                if (c == '\r') return .trailer_lf;
                if (!head.isFieldValue(c)) return null;
                return chunked.trailerByte(.trailer_value);
            },
            .trailer_lf => return if (c == '\n') .trailer_line else null,
            .final_lf => return if (c == '\n') .done else null,
            .data, .done, .invalid => unreachable, // handled by feed
        }
    }

    /// An extension byte: visible ASCII, obs-text, SP or HTAB. The grammar's names, values
    /// and quoted strings are not taken apart: std skips extensions, only their bytes matter.
    fn extensionByte(chunked: *Chunked, c: u8) ?State {
        chunked.extensions_bytes += 1;
        if (chunked.extensions_bytes > config.server_chunk_extensions_bytes_max) {
            chunked.err = error.ChunkExtensionsOversize;
            return null;
        }
        if (!head.isFieldValue(c)) return null;
        return .extension;
    }

    fn trailerByte(chunked: *Chunked, state: State) ?State {
        chunked.trailer_bytes += 1;
        if (chunked.trailer_bytes > config.server_trailer_bytes_max) {
            chunked.err = error.TrailerOversize;
            return null;
        }
        return state;
    }

    fn hexValue(c: u8) ?u8 {
        return switch (c) {
            '0'...'9' => c - '0',
            'a'...'f' => c - 'a' + 10,
            'A'...'F' => c - 'A' + 10,
            else => null,
        };
    }
};

const testing = std.testing;

fn checkAll(text: []const u8) !usize {
    var chunked: Chunked = .{};
    const n = chunked.feed(text);
    if (chunked.err) |err| return err;
    if (chunked.state != .done) return error.Incomplete;
    return n;
}

test "Chunked: well-formed bodies end exactly at their last CRLF" {
    const bodies = [_][]const u8{
        "0\r\n\r\n",
        "5\r\nhello\r\n0\r\n\r\n",
        "A;name=value;q=\"x y\"\r\n0123456789\r\n00\r\nTrailer-A: 1\r\nB:\t2\r\n\r\n",
        "1 ; ext\r\nx\r\n0\r\n\r\n",
        "2;a=\"b;c\"\r\nxy\r\n0\r\nt:\r\n\r\n",
    };
    for (bodies) |body| {
        var buffer: [128]u8 = undefined;
        const text = try std.fmt.bufPrint(&buffer, "{s}GET / HTTP/1.1\r\n", .{body});
        try testing.expectEqual(body.len, try checkAll(text));
        // Byte by byte.
        var chunked: Chunked = .{};
        for (text, 0..) |_, i| {
            const n = chunked.feed(text[i .. i + 1]);
            if (chunked.state == .done) {
                try testing.expectEqual(body.len, i + n);
                break;
            }
            try testing.expectEqual(1, n);
        }
    }
}

test "Chunked: malformed sizes, line endings and extensions are refused" {
    const bad = [_][]const u8{
        "g\r\n",                      "\r\n",                    "-1\r\n",
        "5\nhello\r\n",               "5\r\nhelloX\r\n",         "5\r\nhello\n0\r\n\r\n",
        "0x5\r\nhello\r\n",           "1;a\x00\r\n",             "1\r\r\n",
        "0\r\nbad field\x01\r\n\r\n", "0\r\n folded: x\r\n\r\n", "0\r\n\n",
        "0\r\n:x\r\n\r\n",            "10000000000000000\r\n",   "1 2\r\n",
        "0\r\nnocolon\r\n\r\n",
    };
    for (bad) |text| {
        try testing.expectError(error.ChunkInvalid, checkAll(text));
    }
    // The largest size that fits is well-formed (its data never arrives here).
    try testing.expectError(error.Incomplete, checkAll("ffffffffffffffff\r\n"));
}

test "Chunked: extensions and trailers are bounded" {
    const extension: [config.server_chunk_extensions_bytes_max + 1]u8 = @splat('a');
    var text: [extension.len + 8]u8 = undefined;
    const long = try std.fmt.bufPrint(&text, "1;{s}", .{&extension});
    try testing.expectError(error.ChunkExtensionsOversize, checkAll(long));
    const field: [config.server_trailer_bytes_max]u8 = @splat('b');
    var trailer_text: [field.len + 16]u8 = undefined;
    const trailer = try std.fmt.bufPrint(&trailer_text, "0\r\nX:{s}\r\n\r\n", .{&field});
    try testing.expectError(error.TrailerOversize, checkAll(trailer));
}

fn readBody(wire: []const u8, framing: head.Framing, out: []u8) !struct { usize, Body, usize } {
    var source: Io.Reader = .fixed(wire);
    var buffer: [config.server_body_buffer_bytes]u8 = undefined;
    var body: Body = .init(&source, null, framing, &buffer);
    var transfer: [64]u8 = undefined;
    var server: std.http.Server = .{
        .out = undefined,
        .reader = .{
            .in = &body.interface,
            .state = .received_head,
            .interface = undefined,
            .max_head_len = buffer.len,
        },
    };
    const reader = server.reader.bodyReader(&transfer, switch (framing) {
        .length => .none,
        .chunked => .chunked,
    }, switch (framing) {
        .length => |n| n,
        .chunked => null,
    });
    const n = try reader.readSliceShort(out);
    return .{ n, body, source.seek };
}

test "Body: std's decoders read exactly the body through it; the next request stays" {
    var out: [64]u8 = undefined;
    const wire = "3;x=1\r\nabc\r\n2\r\nde\r\n0\r\nT: v\r\n\r\nGET / HTTP/1.1\r\n";
    const n, const body, const consumed = try readBody(wire, .chunked, &out);
    try testing.expectEqualStrings("abcde", out[0..n]);
    try testing.expect(body.complete());
    try testing.expectEqualStrings("GET / HTTP/1.1\r\n", wire[consumed..]);
    const n2, const body2, const consumed2 = try readBody("hello world", .{ .length = 5 }, &out);
    try testing.expectEqualStrings("hello", out[0..n2]);
    try testing.expect(body2.complete());
    try testing.expectEqual(5, consumed2);
}

test "Body: a body cut short or malformed fails the read and says why" {
    var out: [64]u8 = undefined;
    try testing.expectError(error.ReadFailed, readBody("hel", .{ .length = 5 }, &out));
    try testing.expectError(error.ReadFailed, readBody("5\r\nhel", .chunked, &out));
    try testing.expectError(error.ReadFailed, readBody("5\r\nhello\r\nz\r\n", .chunked, &out));
    // The reason is kept.
    var source: Io.Reader = .fixed("2\r\nab\r\nq\r\n");
    var buffer: [config.server_body_buffer_bytes]u8 = undefined;
    var body: Body = .init(&source, null, .chunked, &buffer);
    try testing.expect(!body.skip(1024));
    try testing.expectEqual(error.ChunkInvalid, body.err.?);
    var source2: Io.Reader = .fixed("ab");
    var body2: Body = .init(&source2, null, .{ .length = 3 }, &buffer);
    try testing.expect(!body2.skip(1024));
    try testing.expectEqual(error.BodyTruncated, body2.err.?);
}

test "Body: skip drops what the handler left, up to a bound" {
    var buffer: [config.server_body_buffer_bytes]u8 = undefined;
    var source: Io.Reader = .fixed("4\r\nabcd\r\n0\r\n\r\nnext");
    var body: Body = .init(&source, null, .chunked, &buffer);
    try testing.expect(body.skip(1024));
    try testing.expectEqualStrings("next", source.buffered());
    var source2: Io.Reader = .fixed("0123456789next");
    var body2: Body = .init(&source2, null, .{ .length = 10 }, &buffer);
    try testing.expect(!body2.skip(9)); // more than the bound: close instead
    var body3: Body = .init(&source2, null, .{ .length = 10 }, &buffer);
    try testing.expect(body3.skip(10));
    try testing.expectEqualStrings("next", source2.buffered());
}
