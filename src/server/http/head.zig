//! weft's HTTP/1.1 request-head parser: strict framing before any handler sees a request.
//!
//! std.http's own parser is lenient where leniency is dangerous for a server (RFC 9112 §6,
//! §11.2, request smuggling): a POST with neither Content-Length nor Transfer-Encoding reaches
//! an assertion in `Request.discardBody`, unknown transfer codings are taken as content
//! codings, a signed Content-Length parses, whitespace before a colon or a bare LF passes. So
//! the server parses every head here and builds std's `Request.Head` from the result only
//! when the head is well-formed; handlers keep using `std.http.Server.Request` unchanged.
//!
//! Rules (each rejection names its status, see `status`):
//! - Lines end in CRLF; a bare LF or a CR without LF is 400. Empty lines before the request
//!   line are skipped (RFC 9112 §2.2), counted in the head's size.
//! - request-line = method SP request-target SP HTTP-version: a method of token characters
//!   (one std.http.Method does not know is 501, and so is CONNECT: no tunnels here), a target
//!   of visible ASCII only (so any whitespace in it is 400) in origin form (`/...`), absolute
//!   form (`scheme://...`) or, for OPTIONS only, `*`; a version `HTTP/d.d` (1.0 and 1.1
//!   served, others 505).
//! - field-line = token ":" OWS value OWS: no whitespace before the colon, no line folding,
//!   and no control byte (NUL, CR, ...) but HTAB in a value: 400.
//! - HTTP/1.1 needs exactly one Host; more than one is 400 in any version, and so is a Host
//!   that is not `host[:port]` (RFC 9112 §3.2, RFC 3986 §3.2.2).
//! - Content-Length: digits only (no sign, no space inside), one value or identical repeats
//!   (also as a list), fitting 64 bits; else 400.
//! - Transfer-Encoding: only `chunked` (any case), last, once. With Content-Length, in an
//!   HTTP/1.0 request, repeated, or not last: 400 (the body cannot be framed); another
//!   coding before a final chunked: 501 (RFC 9112 §6.1).
//! - Expect: only 100-continue (any case; ignored in HTTP/1.0), else 417.
//! - Content-Encoding: one coding std.http can decode, else 415.
//! - No Content-Length and no Transfer-Encoding: the body is empty (RFC 9112 §6.3).
const std = @import("std");
const http = std.http;
const assert = std.debug.assert;

pub const Framing = union(enum) {
    /// Exactly this many body bytes follow the head (0 when neither header was sent).
    length: u64,
    chunked,
};

pub const Head = struct {
    /// What std's `Request.head` holds for the handler. `content_length` is the body's length
    /// (0 for none) unless the body is chunked; `expect` is "100-continue" or null.
    std: http.Server.Request.Head,
    framing: Framing,
    /// From the request line to the final CRLF: `Request.head_buffer`.
    bytes: []const u8,
};

pub const Error = error{
    /// 400: a line that does not end in CRLF, or a control byte where none may be.
    LineInvalid,
    /// 400: the request line is not `method SP target SP version`.
    RequestLineInvalid,
    /// 400: the method has a byte that is not a token character.
    MethodInvalid,
    /// 501: a well-formed method std.http.Method does not name, or CONNECT.
    MethodUnknown,
    /// 400: the target is empty, holds whitespace, a control byte or a non-ASCII byte, or is
    /// in none of the forms this method may use.
    TargetInvalid,
    /// 400: the version is not `HTTP/` DIGIT `.` DIGIT.
    VersionInvalid,
    /// 505: a well-formed version other than 1.0 and 1.1.
    VersionUnsupported,
    /// 400: a field line without a colon, with an empty or non-token name, whitespace before
    /// the colon, or folded onto the next line.
    FieldInvalid,
    /// 400: HTTP/1.1 without Host, more than one Host, or one that is not `host[:port]`.
    HostInvalid,
    /// 400: Content-Length not digits, differing repeats, or past 64 bits.
    ContentLengthInvalid,
    /// 400: Transfer-Encoding and Content-Length together (request smuggling).
    ContentLengthWithTransferEncoding,
    /// 400: Transfer-Encoding that does not end in one `chunked`, or in HTTP/1.0.
    TransferEncodingInvalid,
    /// 501: a transfer coding other than chunked.
    TransferEncodingUnsupported,
    /// 417: an Expect other than 100-continue.
    ExpectationUnsupported,
    /// 415: a Content-Encoding std.http cannot decode, or more than one.
    ContentEncodingUnsupported,
};

/// The status answering a rejected head. The connection is closed after it: what follows a
/// head that could not be framed cannot be read as a next request.
pub fn status(err: Error) http.Status {
    return switch (err) {
        error.MethodUnknown, error.TransferEncodingUnsupported => .not_implemented,
        error.VersionUnsupported => .http_version_not_supported,
        error.ExpectationUnsupported => .expectation_failed,
        error.ContentEncodingUnsupported => .unsupported_media_type,
        error.LineInvalid,
        error.RequestLineInvalid,
        error.MethodInvalid,
        error.TargetInvalid,
        error.VersionInvalid,
        error.FieldInvalid,
        error.HostInvalid,
        error.ContentLengthInvalid,
        error.ContentLengthWithTransferEncoding,
        error.TransferEncodingInvalid,
        => .bad_request,
    };
}

/// The state of a search for a head's end over bytes that grow between calls.
pub const Scan = struct {
    /// Bytes before this were scanned.
    scanned: usize = 0,
    /// Where the request line starts: past the empty lines that came before it.
    start: usize = 0,
};

/// Where the head is in the bytes scanned: `bytes[start..end]`, `end` just past the final CRLF.
pub const Span = struct { start: usize, end: usize };

/// Finds the end of the head in `bytes`, which hold the bytes of earlier calls with the same
/// `scan` and maybe more; null until it is there. Checks that every LF follows a CR. Cheap
/// enough to run on each read: a vectorized search for LF, then a look at the bytes before.
pub fn findEnd(bytes: []const u8, scan: *Scan) error{LineInvalid}!?Span {
    assert(scan.scanned <= bytes.len);
    assert(scan.start <= scan.scanned);
    var i = scan.scanned;
    while (std.mem.indexOfScalarPos(u8, bytes, i, '\n')) |lf| {
        if (lf == 0 or bytes[lf - 1] != '\r') return error.LineInvalid;
        if (lf + 1 == scan.start + 2) {
            // An empty line before the request line: skipped.
            scan.start = lf + 1;
        } else if (lf >= scan.start + 3 and bytes[lf - 2] == '\n') {
            scan.scanned = lf + 1;
            return .{ .start = scan.start, .end = lf + 1 };
        }
        i = lf + 1;
    }
    scan.scanned = bytes.len;
    return null;
}

/// Parses a complete head, `bytes` from the request line through the final CRLF (as
/// `findEnd` delimits it). The result's slices point into `bytes`.
pub fn parse(bytes: []const u8) Error!Head {
    assert(bytes.len >= 4);
    assert(std.mem.endsWith(u8, bytes, "\r\n\r\n"));
    const request_line_end = std.mem.indexOf(u8, bytes, "\r\n").?;
    var head: Head = .{
        .std = try parseRequestLine(bytes[0..request_line_end]),
        .framing = .{ .length = 0 },
        .bytes = bytes,
    };
    var fields: Fields = .{};
    var line_start = request_line_end + 2;
    while (true) {
        const line_end = std.mem.indexOfPos(u8, bytes, line_start, "\r\n").?;
        if (line_end == line_start) break; // the empty line ending the head
        try fields.add(&head.std, bytes[line_start..line_end]);
        line_start = line_end + 2;
    }
    assert(line_start + 2 == bytes.len);
    head.framing = try fields.finish(&head.std);
    return head;
}

fn parseRequestLine(line: []const u8) Error!http.Server.Request.Head {
    const method_end = std.mem.indexOfScalar(u8, line, ' ') orelse
        return error.RequestLineInvalid;
    const method_name = line[0..method_end];
    if (method_name.len == 0) return error.RequestLineInvalid;
    for (method_name) |c| if (!isToken(c)) return error.MethodInvalid;
    const target_end = std.mem.indexOfScalarPos(u8, line, method_end + 1, ' ') orelse
        return error.RequestLineInvalid;
    const target = line[method_end + 1 .. target_end];
    if (target.len == 0) return error.TargetInvalid;
    for (target) |c| if (c <= ' ' or c >= 0x7f) return error.TargetInvalid;
    const version = try parseVersion(line[target_end + 1 ..]);
    const method = std.meta.stringToEnum(http.Method, method_name) orelse
        return error.MethodUnknown;
    // A 2xx to CONNECT would start a tunnel (RFC 9110 §9.3.6), which std.http's Request
    // cannot carry: refuse it rather than answer with a body.
    if (method == .CONNECT) return error.MethodUnknown;
    if (!targetFormValid(method, target)) return error.TargetInvalid;
    return .{
        .method = method,
        .target = target,
        .version = version,
        .expect = null,
        .content_type = null,
        .content_length = null,
        .transfer_encoding = .none,
        .transfer_compression = .identity,
        .keep_alive = version == .@"HTTP/1.1",
    };
}

/// RFC 9112 §3.2: origin form, absolute form (with an authority: `scheme://`), or `*` for
/// OPTIONS; authority form is CONNECT's alone, refused above.
fn targetFormValid(method: http.Method, target: []const u8) bool {
    assert(target.len > 0);
    if (target[0] == '/') return true;
    if (std.mem.eql(u8, target, "*")) return method == .OPTIONS;
    const scheme_end = std.mem.indexOf(u8, target, "://") orelse return false;
    if (scheme_end == 0 or !std.ascii.isAlphabetic(target[0])) return false;
    for (target[1..scheme_end]) |c| {
        if (!std.ascii.isAlphanumeric(c) and c != '+' and c != '-' and c != '.') return false;
    }
    return true;
}

/// RFC 3986 §3.2.2-3: `[IP-literal]` or a reg-name/IPv4 of unreserved, pct-encoded and
/// sub-delim characters, then an optional `:port` of digits. Empty is allowed (a target
/// without an authority).
fn hostValid(value: []const u8) bool {
    var rest = value;
    if (rest.len > 0 and rest[0] == '[') {
        const close = std.mem.indexOfScalar(u8, rest, ']') orelse return false;
        for (rest[1..close]) |c| {
            if (!std.ascii.isHex(c) and c != ':' and c != '.' and c != 'v' and c != 'V') {
                return false;
            }
        }
        rest = rest[close + 1 ..];
    } else {
        const end = std.mem.indexOfScalar(u8, rest, ':') orelse rest.len;
        for (rest[0..end]) |c| if (!host_table[c]) return false;
        rest = rest[end..];
    }
    if (rest.len == 0) return true;
    if (rest[0] != ':') return false;
    for (rest[1..]) |c| if (!std.ascii.isDigit(c)) return false;
    return true;
}

fn parseVersion(text: []const u8) Error!http.Version {
    if (text.len != 8 or !std.mem.startsWith(u8, text, "HTTP/") or text[6] != '.') {
        // A trailing field after the version, or whitespace in the target, lands here too.
        return error.VersionInvalid;
    }
    if (!std.ascii.isDigit(text[5]) or !std.ascii.isDigit(text[7])) return error.VersionInvalid;
    if (text[5] != '1') return error.VersionUnsupported;
    return switch (text[7]) {
        '0' => .@"HTTP/1.0",
        '1' => .@"HTTP/1.1",
        else => error.VersionUnsupported,
    };
}

/// What the field lines said about framing, gathered before it is decided.
const Fields = struct {
    hosts: u32 = 0,
    content_length: ?u64 = null,
    transfer_encoding: TransferEncoding = .{},
    content_encoding_seen: bool = false,
    expect_continue: bool = false,
    connection_close: bool = false,
    connection_keep_alive: bool = false,

    /// The transfer codings seen so far, in order (only their shape matters).
    const TransferEncoding = struct {
        present: bool = false,
        chunked_count: u32 = 0,
        /// Whether the last coding listed so far is chunked.
        chunked_last: bool = false,
        other: bool = false,
    };

    fn add(fields: *Fields, head: *http.Server.Request.Head, line: []const u8) Error!void {
        if (line[0] == ' ' or line[0] == '\t') return error.FieldInvalid; // obs-fold
        const colon = std.mem.indexOfScalar(u8, line, ':') orelse return error.FieldInvalid;
        const name = line[0..colon];
        if (name.len == 0) return error.FieldInvalid;
        for (name) |c| if (!isToken(c)) return error.FieldInvalid; // also space before ':'
        const value = std.mem.trim(u8, line[colon + 1 ..], " \t");
        for (value) |c| if (!isFieldValue(c)) return error.LineInvalid;
        switch (name.len) {
            4 => if (std.ascii.eqlIgnoreCase(name, "host")) {
                fields.hosts += 1;
                if (!hostValid(value)) return error.HostInvalid;
            },
            6 => if (std.ascii.eqlIgnoreCase(name, "expect")) {
                if (!std.ascii.eqlIgnoreCase(value, "100-continue")) {
                    return error.ExpectationUnsupported;
                }
                fields.expect_continue = true;
            },
            10 => if (std.ascii.eqlIgnoreCase(name, "connection")) {
                fields.addConnection(value);
            },
            12 => if (std.ascii.eqlIgnoreCase(name, "content-type")) {
                head.content_type = value;
            },
            14 => if (std.ascii.eqlIgnoreCase(name, "content-length")) {
                try fields.addContentLength(value);
            },
            16 => if (std.ascii.eqlIgnoreCase(name, "content-encoding")) {
                if (fields.content_encoding_seen) return error.ContentEncodingUnsupported;
                fields.content_encoding_seen = true;
                head.transfer_compression = http.ContentEncoding.fromString(value) orelse
                    return error.ContentEncodingUnsupported;
                // std.http has no decoder for `compress`.
                if (head.transfer_compression == .compress) {
                    return error.ContentEncodingUnsupported;
                }
            },
            17 => if (std.ascii.eqlIgnoreCase(name, "transfer-encoding")) {
                try fields.addTransferEncoding(value);
            },
            else => {},
        }
    }

    fn addConnection(fields: *Fields, value: []const u8) void {
        var options = std.mem.splitScalar(u8, value, ',');
        while (options.next()) |option_untrimmed| {
            const option = std.mem.trim(u8, option_untrimmed, " \t");
            if (std.ascii.eqlIgnoreCase(option, "close")) fields.connection_close = true;
            if (std.ascii.eqlIgnoreCase(option, "keep-alive")) fields.connection_keep_alive = true;
        }
    }

    fn addContentLength(fields: *Fields, value: []const u8) Error!void {
        // A list of identical values is one value (RFC 9110 §8.6); anything else is 400.
        var elements = std.mem.splitScalar(u8, value, ',');
        while (elements.next()) |element_untrimmed| {
            const element = std.mem.trim(u8, element_untrimmed, " \t");
            if (element.len == 0) return error.ContentLengthInvalid;
            var length: u64 = 0;
            for (element) |c| {
                if (!std.ascii.isDigit(c)) return error.ContentLengthInvalid;
                length = std.math.mul(u64, length, 10) catch return error.ContentLengthInvalid;
                length = std.math.add(u64, length, c - '0') catch
                    return error.ContentLengthInvalid;
            }
            if (fields.content_length) |previous| {
                if (previous != length) return error.ContentLengthInvalid;
            }
            fields.content_length = length;
        }
    }

    fn addTransferEncoding(fields: *Fields, value: []const u8) Error!void {
        const te = &fields.transfer_encoding;
        te.present = true;
        var codings = std.mem.splitScalar(u8, value, ',');
        while (codings.next()) |coding_untrimmed| {
            const coding = std.mem.trim(u8, coding_untrimmed, " \t");
            if (coding.len == 0) return error.TransferEncodingInvalid;
            if (std.ascii.eqlIgnoreCase(coding, "chunked")) {
                te.chunked_count += 1;
                te.chunked_last = true;
            } else {
                te.other = true;
                te.chunked_last = false;
            }
        }
    }

    fn finish(fields: *const Fields, head: *http.Server.Request.Head) Error!Framing {
        switch (head.version) {
            .@"HTTP/1.1" => if (fields.hosts != 1) return error.HostInvalid,
            .@"HTTP/1.0" => if (fields.hosts > 1) return error.HostInvalid,
        }
        if (fields.connection_close) {
            head.keep_alive = false;
        } else if (fields.connection_keep_alive) {
            head.keep_alive = true;
        }
        // RFC 9110 §10.1.1: a server ignores 100-continue in an HTTP/1.0 request.
        if (fields.expect_continue and head.version == .@"HTTP/1.1") head.expect = "100-continue";
        const te = fields.transfer_encoding;
        if (!te.present) {
            const length = fields.content_length orelse 0;
            head.content_length = length;
            return .{ .length = length };
        }
        if (fields.content_length != null) return error.ContentLengthWithTransferEncoding;
        if (head.version == .@"HTTP/1.0") return error.TransferEncodingInvalid;
        if (!te.chunked_last or te.chunked_count != 1) return error.TransferEncodingInvalid;
        if (te.other) return error.TransferEncodingUnsupported;
        head.transfer_encoding = .chunked;
        return .chunked;
    }
};

/// RFC 9110 §5.6.2 tchar.
pub fn isToken(c: u8) bool {
    return token_table[c];
}

/// RFC 9110 §5.5: field-vchar, SP and HTAB (obs-text included).
pub fn isFieldValue(c: u8) bool {
    return c == '\t' or (c >= ' ' and c != 0x7f);
}

/// RFC 3986 unreserved, `%` of pct-encoded, and sub-delims.
const host_table: [256]bool = table: {
    var table: [256]bool = @splat(false);
    for ("-._~%!$&'()*+,;=") |c| table[c] = true;
    for ('0'..'9' + 1) |c| table[c] = true;
    for ('a'..'z' + 1) |c| table[c] = true;
    for ('A'..'Z' + 1) |c| table[c] = true;
    break :table table;
};

const token_table: [256]bool = table: {
    var table: [256]bool = @splat(false);
    for ("!#$%&'*+-.^_`|~") |c| table[c] = true;
    for ('0'..'9' + 1) |c| table[c] = true;
    for ('a'..'z' + 1) |c| table[c] = true;
    for ('A'..'Z' + 1) |c| table[c] = true;
    break :table table;
};

fn parseText(text: []const u8) Error!Head {
    var scan: Scan = .{};
    const span = (try findEnd(text, &scan)).?; // tests pass complete heads
    return parse(text[span.start..span.end]);
}

const testing = std.testing;

test "head: a GET with a Host has an empty body and keeps the connection" {
    const head = try parseText("GET /a?b=c HTTP/1.1\r\nHost: x\r\n\r\n");
    try testing.expectEqual(.GET, head.std.method);
    try testing.expectEqualStrings("/a?b=c", head.std.target);
    try testing.expectEqual(Framing{ .length = 0 }, head.framing);
    try testing.expectEqual(0, head.std.content_length.?);
    try testing.expect(head.std.keep_alive);
}

test "head: a POST with neither length nor coding has an empty body (RFC 9112 §6.3)" {
    const head = try parseText("POST / HTTP/1.1\r\nHost: x\r\n\r\n");
    try testing.expectEqual(Framing{ .length = 0 }, head.framing);
    try testing.expectEqual(0, head.std.content_length.?);
}

test "head: Content-Length: digits only, identical repeats, 64 bits" {
    const ok = try parseText("PUT / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n" ++
        "content-length: 5, 5\r\n\r\n");
    try testing.expectEqual(Framing{ .length = 5 }, ok.framing);
    const bad = [_][]const u8{ "+5", "-1", "5 5", "0x5", "", "5,6", "18446744073709551616" };
    for (bad) |value| {
        var buffer: [128]u8 = undefined;
        const text = try std.fmt.bufPrint(&buffer, "POST / HTTP/1.1\r\nHost: x\r\n" ++
            "Content-Length: {s}\r\n\r\n", .{value});
        try testing.expectError(error.ContentLengthInvalid, parseText(text));
    }
    try testing.expectError(error.ContentLengthInvalid, parseText("POST / HTTP/1.1\r\n" ++
        "Host: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n"));
}

test "head: Transfer-Encoding: chunked in any case, last and once; others refused" {
    const ok = try parseText("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: ChUnKeD\r\n\r\n");
    try testing.expectEqual(Framing.chunked, ok.framing);
    try testing.expectEqual(.chunked, ok.std.transfer_encoding);
    try testing.expectEqual(null, ok.std.content_length);
    const cases = [_]struct { []const u8, Error }{
        .{ "gzip", error.TransferEncodingInvalid },
        .{ "chunked, gzip", error.TransferEncodingInvalid },
        .{ "chunked, chunked", error.TransferEncodingInvalid },
        .{ "chunked,", error.TransferEncodingInvalid },
        .{ "gzip, chunked", error.TransferEncodingUnsupported },
        .{ "identity, chunked", error.TransferEncodingUnsupported },
    };
    for (cases) |case| {
        var buffer: [128]u8 = undefined;
        const text = try std.fmt.bufPrint(&buffer, "POST / HTTP/1.1\r\nHost: x\r\n" ++
            "Transfer-Encoding: {s}\r\n\r\n", .{case[0]});
        try testing.expectError(case[1], parseText(text));
    }
    // Repeated across lines.
    try testing.expectError(error.TransferEncodingInvalid, parseText("POST / HTTP/1.1\r\n" ++
        "Host: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n"));
    try testing.expectError(error.ContentLengthWithTransferEncoding, parseText("POST / " ++
        "HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"));
    try testing.expectError(error.TransferEncodingInvalid, parseText("POST / HTTP/1.0\r\n" ++
        "Transfer-Encoding: chunked\r\n\r\n"));
}

test "head: request line: token method, visible target, HTTP/d.d" {
    const cases = [_]struct { []const u8, Error }{
        .{ "GET /a b HTTP/1.1", error.VersionInvalid },
        .{ "GET /a\tb HTTP/1.1", error.TargetInvalid },
        .{ "GET  / HTTP/1.1", error.TargetInvalid },
        .{ "GET / HTTP/1.1 ", error.VersionInvalid },
        .{ "GET /", error.RequestLineInvalid },
        .{ "G(T / HTTP/1.1", error.MethodInvalid },
        .{ " GET / HTTP/1.1", error.RequestLineInvalid },
        .{ "BREW / HTTP/1.1", error.MethodUnknown },
        .{ "GET / HTTP/2.0", error.VersionUnsupported },
        .{ "GET / HTTP/1.2", error.VersionUnsupported },
        .{ "GET / HTTP/x.1", error.VersionInvalid },
        .{ "GET / http/1.1", error.VersionInvalid },
        .{ "GET /\x00 HTTP/1.1", error.TargetInvalid },
        .{ "GET /\xc3\xa9 HTTP/1.1", error.TargetInvalid },
        .{ "GET * HTTP/1.1", error.TargetInvalid },
        .{ "GET x:443 HTTP/1.1", error.TargetInvalid },
        .{ "GET a HTTP/1.1", error.TargetInvalid },
        .{ "GET ://x/ HTTP/1.1", error.TargetInvalid },
        .{ "GET 1http://x/ HTTP/1.1", error.TargetInvalid },
        .{ "CONNECT x:443 HTTP/1.1", error.MethodUnknown },
    };
    for (cases) |case| {
        var buffer: [128]u8 = undefined;
        const text = try std.fmt.bufPrint(&buffer, "{s}\r\nHost: x\r\n\r\n", .{case[0]});
        try testing.expectError(case[1], parseText(text));
    }
}

test "head: field lines: colon, token name, no space before the colon, no folding, no CTL" {
    const cases = [_]struct { []const u8, Error }{
        .{ "NoColon", error.FieldInvalid },
        .{ ": empty", error.FieldInvalid },
        .{ "Bad Name: x", error.FieldInvalid },
        .{ "Content-Length : 0", error.FieldInvalid },
        .{ " folded", error.FieldInvalid },
        // A folded line with a colon is a smuggling shape: taken for a field of its own, it
        // would frame the body by a coding a front proxy that unfolds it never saw.
        .{ " Transfer-Encoding: chunked", error.FieldInvalid },
        .{ "\tContent-Length: 5", error.FieldInvalid },
        .{ "X: a\x00b", error.LineInvalid },
        .{ "X: a\rb", error.LineInvalid },
        .{ "X: a\x7fb", error.LineInvalid },
        .{ "X: a\x1bb", error.LineInvalid },
        .{ "Expect: 200-ok", error.ExpectationUnsupported },
        .{ "Content-Encoding: br", error.ContentEncodingUnsupported },
        .{ "Content-Encoding: compress", error.ContentEncodingUnsupported },
    };
    for (cases) |case| {
        var buffer: [128]u8 = undefined;
        const text = try std.fmt.bufPrint(&buffer, "GET / HTTP/1.1\r\nHost: x\r\n{s}\r\n\r\n", .{
            case[0],
        });
        try testing.expectError(case[1], parseText(text));
    }
    const ok = try parseText("GET / HTTP/1.1\r\nHost: x\r\nX-Tab:\ta\tb \r\nX-Utf8: \xc3\xa9\r\n" ++
        "Expect: 100-Continue\r\nContent-Encoding: gzip\r\n\r\n");
    try testing.expectEqualStrings("100-continue", ok.std.expect.?);
    try testing.expectEqual(.gzip, ok.std.transfer_compression);
}

test "head: targets in origin, absolute or (OPTIONS) asterisk form" {
    const lines = [_][]const u8{ "GET /", "GET http://x/a?b", "OPTIONS *", "GET h+s-1.x://y" };
    for (lines) |line| {
        var buffer: [128]u8 = undefined;
        const text = try std.fmt.bufPrint(&buffer, "{s} HTTP/1.1\r\nHost: x\r\n\r\n", .{line});
        _ = try parseText(text);
    }
}

test "head: Host is host[:port]" {
    for ([_][]const u8{ "a b", "a/b", "u@a", "a, b", "a:x", "[::1", "[::1]x", "a:1:2" }) |value| {
        var buffer: [128]u8 = undefined;
        const text = try std.fmt.bufPrint(&buffer, "GET / HTTP/1.1\r\nHost: {s}\r\n\r\n", .{
            value,
        });
        try testing.expectError(error.HostInvalid, parseText(text));
    }
    for ([_][]const u8{ "", "a", "a.b-c_d~e:8080", "[::1]:80", "10.0.0.1", "%41" }) |value| {
        var buffer: [128]u8 = undefined;
        const text = try std.fmt.bufPrint(&buffer, "GET / HTTP/1.1\r\nHost: {s}\r\n\r\n", .{
            value,
        });
        _ = try parseText(text);
    }
}

test "head: Host: one in HTTP/1.1, at most one in HTTP/1.0" {
    try testing.expectError(error.HostInvalid, parseText("GET / HTTP/1.1\r\n\r\n"));
    try testing.expectError(error.HostInvalid, parseText("GET / HTTP/1.1\r\nHost: a\r\n" ++
        "Host: b\r\n\r\n"));
    const old = try parseText("GET / HTTP/1.0\r\n\r\n");
    try testing.expect(!old.std.keep_alive);
    const kept = try parseText("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n");
    try testing.expect(kept.std.keep_alive);
    const closed = try parseText("GET / HTTP/1.1\r\nHost: a\r\nConnection: foo, close\r\n\r\n");
    try testing.expect(!closed.std.keep_alive);
    // 100-continue is ignored in HTTP/1.0 (RFC 9110 §10.1.1).
    const expect_old = try parseText("POST / HTTP/1.0\r\nExpect: 100-continue\r\n\r\n");
    try testing.expectEqual(null, expect_old.std.expect);
}

test "head: findEnd: CRLF only, leading empty lines skipped, split reads resume" {
    var scan: Scan = .{};
    try testing.expectError(error.LineInvalid, findEnd("GET / HTTP/1.1\nHost: x\n\n", &scan));
    scan = .{};
    try testing.expectError(error.LineInvalid, findEnd("\n", &scan));
    const text = "\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\nnext";
    scan = .{};
    const span = (try findEnd(text, &scan)).?;
    try testing.expectEqual(4, span.start);
    try testing.expectEqual(text.len - 4, span.end);
    // Byte by byte, as a trickling client sends it.
    scan = .{};
    for (1..text.len + 1) |len| {
        const found = try findEnd(text[0..len], &scan) orelse continue;
        try testing.expectEqual(span, found);
        try testing.expectEqual(text.len - 4, len);
        break;
    } else return error.TestExpectedComplete;
}
