//! DNS messages (RFC 1035): a query is encoded, a response is decoded and its addresses are
//! extracted. Pure functions over byte slices, no I/O: the exchange with name servers lives in
//! `dns_client.zig`.
//!
//! A response comes from the network, so nothing in it is trusted: every length and offset is
//! checked against the packet before use, and every loop is bounded by the packet's size. A
//! malformed packet is `error.Malformed`, never a crash (see the fuzz-style tests below).
//!
//! Name compression (RFC 1035 §4.1.4) may only point to a *prior* occurrence of a name. The
//! decoder requires each pointer to land strictly before the start of the labels it is
//! currently reading, so the positions it jumps to strictly decrease and no packet can make it
//! loop (rejected: counting jumps up to a limit, which accepts loops and bounds them late).
const std = @import("std");
const assert = std.debug.assert;
const IpAddress = std.Io.net.IpAddress;

pub const Type = enum(u16) {
    a = 1,
    cname = 5,
    aaaa = 28,
    _,
};

pub const Rcode = enum(u4) {
    no_error = 0,
    format_error = 1,
    server_failure = 2,
    /// NXDOMAIN: the name does not exist.
    name_error = 3,
    not_implemented = 4,
    refused = 5,
    _,
};

/// The Internet class (IN).
pub const class_in: u16 = 1;
pub const header_bytes = 12;
/// Largest message over UDP without EDNS0 (RFC 1035 §4.2.1); weft sends no EDNS0 option, so
/// servers truncate longer answers to this and set TC.
pub const udp_message_bytes_max = 512;
/// A name on the wire: at most 255 octets, labels of at most 63 (RFC 1035 §2.3.4).
pub const name_wire_bytes_max = 255;
pub const label_bytes_max = 63;
/// A name as text, without its trailing dot: the wire form less its length octets.
pub const name_text_bytes_max = name_wire_bytes_max - 2;
/// A query: header, one question (name, type, class).
pub const query_bytes_max = header_bytes + name_wire_bytes_max + 4;

/// Buffer for a decoded name.
pub const NameBuffer = [name_text_bytes_max]u8;

pub const EncodeError = error{
    /// Empty, an empty label, a label over 63 bytes, or over 255 bytes on the wire.
    InvalidName,
};

/// Writes a recursive query (RD set) for `name` and `record_type` into `buffer` and returns
/// the message. `name` is text; one trailing dot is allowed (an absolute name).
pub fn encodeQuery(
    buffer: *[query_bytes_max]u8,
    id: u16,
    name: []const u8,
    record_type: Type,
) EncodeError![]const u8 {
    const text = if (std.mem.endsWith(u8, name, ".")) name[0 .. name.len - 1] else name;
    if (text.len == 0 or text.len > name_text_bytes_max) return error.InvalidName;
    std.mem.writeInt(u16, buffer[0..2], id, .big);
    buffer[2] = 0x01; // QR = 0 (query), opcode 0 (standard), RD = 1 (recursion desired)
    buffer[3] = 0x00;
    std.mem.writeInt(u16, buffer[4..6], 1, .big); // one question
    @memset(buffer[6..12], 0); // no answer, authority or additional records
    var end: usize = header_bytes;
    var labels = std.mem.splitScalar(u8, text, '.');
    while (labels.next()) |label| {
        if (label.len == 0 or label.len > label_bytes_max) return error.InvalidName;
        buffer[end] = @intCast(label.len);
        @memcpy(buffer[end + 1 ..][0..label.len], label);
        end += 1 + label.len;
    }
    buffer[end] = 0; // the root label
    end += 1;
    assert(end - header_bytes <= name_wire_bytes_max);
    std.mem.writeInt(u16, buffer[end..][0..2], @intFromEnum(record_type), .big);
    std.mem.writeInt(u16, buffer[end + 2 ..][0..2], class_in, .big);
    end += 4;
    return buffer[0..end];
}

pub const ParseError = error{
    /// The packet is shorter than its contents claim, or a name in it is invalid.
    Malformed,
};

pub const Header = struct {
    id: u16,
    /// QR: a response, not a query.
    response: bool,
    /// TC: the answer did not fit and was cut.
    truncated: bool,
    rcode: Rcode,
    question_count: u16,
    answer_count: u16,

    pub fn parse(packet: []const u8) ParseError!Header {
        if (packet.len < header_bytes) return error.Malformed;
        return .{
            .id = std.mem.readInt(u16, packet[0..2], .big),
            .response = packet[2] & 0x80 != 0,
            .truncated = packet[2] & 0x02 != 0,
            .rcode = @enumFromInt(@as(u4, @truncate(packet[3]))),
            .question_count = std.mem.readInt(u16, packet[4..6], .big),
            .answer_count = std.mem.readInt(u16, packet[6..8], .big),
        };
    }
};

/// Decodes the name at `offset` into `buffer` (text, lower and upper case kept, no trailing
/// dot; the root name is empty). Returns the text and the offset just past the name where it
/// is stored at `offset` (a compressed name ends after its first pointer).
pub fn readName(
    packet: []const u8,
    offset: usize,
    buffer: *NameBuffer,
) ParseError!struct { text: []const u8, end: usize } {
    var position = offset;
    var run_start = offset; // where the labels being read began: pointers must land before it
    var end: ?usize = null;
    var len: usize = 0;
    // Each step consumes a label (adding to `len`, bounded) or jumps strictly backwards.
    while (true) {
        if (position >= packet.len) return error.Malformed;
        const length_octet = packet[position];
        switch (length_octet >> 6) {
            0b11 => {
                if (position + 1 >= packet.len) return error.Malformed;
                const target = (@as(usize, length_octet & 0x3f) << 8) | packet[position + 1];
                if (target >= run_start) return error.Malformed;
                if (end == null) end = position + 2;
                position = target;
                run_start = target;
            },
            0b00 => {
                const label_len: usize = length_octet;
                if (label_len == 0) {
                    return .{ .text = buffer[0..len], .end = end orelse position + 1 };
                }
                if (position + 1 + label_len > packet.len) return error.Malformed;
                const dot: usize = @intFromBool(len != 0);
                if (len + dot + label_len > buffer.len) return error.Malformed;
                if (dot == 1) buffer[len] = '.';
                @memcpy(buffer[len + dot ..][0..label_len], packet[position + 1 ..][0..label_len]);
                len += dot + label_len;
                position += 1 + label_len;
            },
            else => return error.Malformed, // extended label types (0b01, 0b10): obsolete
        }
    }
}

/// Whether the name at `offset` is `text` (ASCII case ignored, one trailing dot ignored).
pub fn nameEql(packet: []const u8, offset: usize, text: []const u8) ParseError!bool {
    var buffer: NameBuffer = undefined;
    const name = try readName(packet, offset, &buffer);
    return std.ascii.eqlIgnoreCase(name.text, trimDot(text));
}

fn trimDot(text: []const u8) []const u8 {
    return if (std.mem.endsWith(u8, text, ".")) text[0 .. text.len - 1] else text;
}

pub const Question = struct {
    name_offset: usize,
    record_type: Type,
    class: u16,
};

/// A resource record of the answer section; `data` lies within the packet.
pub const Record = struct {
    owner_offset: usize,
    record_type: Type,
    class: u16,
    data_offset: usize,
    data: []const u8,
};

/// A response whose header and question section were checked.
pub const Response = struct {
    packet: []const u8,
    header: Header,
    /// The first question (a response to weft's query has exactly one).
    question: ?Question,
    answers_offset: usize,

    pub fn parse(packet: []const u8) ParseError!Response {
        const header = try Header.parse(packet);
        var question: ?Question = null;
        var offset: usize = header_bytes;
        var buffer: NameBuffer = undefined;
        for (0..header.question_count) |_| {
            const name = try readName(packet, offset, &buffer);
            if (name.end + 4 > packet.len) return error.Malformed;
            if (question == null) question = .{
                .name_offset = offset,
                .record_type = @enumFromInt(std.mem.readInt(u16, packet[name.end..][0..2], .big)),
                .class = std.mem.readInt(u16, packet[name.end + 2 ..][0..2], .big),
            };
            offset = name.end + 4;
        }
        return .{
            .packet = packet,
            .header = header,
            .question = question,
            .answers_offset = offset,
        };
    }

    pub fn answers(response: *const Response) AnswerIterator {
        return .{
            .packet = response.packet,
            .offset = response.answers_offset,
            .remaining = response.header.answer_count,
        };
    }

    /// Checks that every answer record announced lies within the packet (a reply cut short
    /// or padded with garbage fails here instead of halfway through its use).
    pub fn checkAnswers(response: *const Response) ParseError!void {
        var it = response.answers();
        while (try it.next()) |_| {}
    }

    /// Whether this answers a query with `id` for `name` and `record_type`.
    pub fn answersQuery(
        response: *const Response,
        id: u16,
        name: []const u8,
        record_type: Type,
    ) bool {
        if (!response.header.response or response.header.id != id) return false;
        if (response.header.question_count != 1) return false;
        const question = response.question.?;
        if (question.record_type != record_type or question.class != class_in) return false;
        return nameEql(response.packet, question.name_offset, name) catch false;
    }
};

/// Makes whole a response cut after `packet.len` bytes (a TCP reply longer than the resolver
/// keeps): keeps the header, the question and the answer records that fit entirely, lowers the
/// answer count to them and drops the authority and additional sections (their counts become
/// 0). Returns the message, a prefix of `packet`, which `Response.parse` and `checkAnswers`
/// accept. The TC bit is left as the server sent it. `error.Malformed` when even the header
/// or the question section does not fit.
///
/// Rejected: parsing a cut message leniently wherever it is read, which would spread the
/// question "is this record really there?" over every reader of a response.
pub fn keepWholeAnswers(packet: []u8) ParseError![]u8 {
    const response = try Response.parse(packet);
    var it = response.answers();
    var kept: u16 = 0;
    // Bounded by the answer count; the first record that does not lie whole within the
    // packet ends the kept part (an error here is the cut, or garbage after it).
    while (it.next() catch null) |_| kept += 1;
    assert(kept <= response.header.answer_count);
    assert(it.offset <= packet.len);
    std.mem.writeInt(u16, packet[6..8], kept, .big);
    @memset(packet[8..header_bytes], 0); // authority and additional counts
    return packet[0..it.offset];
}

pub const AnswerIterator = struct {
    packet: []const u8,
    offset: usize,
    remaining: u16,

    /// The next record, or null after the last one the header announced.
    pub fn next(it: *AnswerIterator) ParseError!?Record {
        if (it.remaining == 0) return null;
        var buffer: NameBuffer = undefined;
        const owner = try readName(it.packet, it.offset, &buffer);
        const fixed = owner.end; // type, class, ttl, data length: 10 bytes
        if (fixed + 10 > it.packet.len) return error.Malformed;
        const data_len = std.mem.readInt(u16, it.packet[fixed + 8 ..][0..2], .big);
        const data_offset = fixed + 10;
        if (data_offset + data_len > it.packet.len) return error.Malformed;
        const record: Record = .{
            .owner_offset = it.offset,
            .record_type = @enumFromInt(std.mem.readInt(u16, it.packet[fixed..][0..2], .big)),
            .class = std.mem.readInt(u16, it.packet[fixed + 2 ..][0..2], .big),
            .data_offset = data_offset,
            .data = it.packet[data_offset..][0..data_len],
        };
        it.remaining -= 1;
        it.offset = data_offset + data_len;
        assert(it.offset <= it.packet.len);
        return record;
    }
};

pub const ExtractError = ParseError || error{
    /// An A record whose data is not 4 bytes, or an AAAA record whose data is not 16.
    InvalidAddressRecord,
    /// A CNAME whose target is not a valid host name.
    InvalidCname,
};

pub const Extracted = struct {
    addresses_len: usize,
    /// The end of the CNAME chain that starts at the queried name, in the caller's buffer;
    /// null when the name has no CNAME.
    canonical_name: ?[]const u8,
};

/// Appends to `addresses` (with `port`) the `record_type` records (A or AAAA) that answer
/// `name`, following the CNAME chain that starts at `name`: an answer counts only when its
/// owner is the chain's end. Records beyond `addresses.len` are dropped.
pub fn extractAddresses(
    response: *const Response,
    name: []const u8,
    record_type: Type,
    port: u16,
    addresses: []IpAddress,
    canonical_buffer: *NameBuffer,
) ExtractError!Extracted {
    assert(record_type == .a or record_type == .aaaa);
    const canonical = try followCnames(response, name, canonical_buffer);
    const owner = canonical orelse trimDot(name);
    var len: usize = 0;
    var it = response.answers();
    while (try it.next()) |record| {
        if (record.record_type != record_type or record.class != class_in) continue;
        if (!try nameEql(response.packet, record.owner_offset, owner)) continue;
        if (len == addresses.len) break;
        addresses[len] = switch (record_type) {
            .a => .{ .ip4 = .{
                .bytes = (try fixedData(4, record.data)).*,
                .port = port,
            } },
            .aaaa => .{ .ip6 = .{
                .bytes = (try fixedData(16, record.data)).*,
                .port = port,
            } },
            else => unreachable, // asserted above
        };
        len += 1;
    }
    return .{ .addresses_len = len, .canonical_name = canonical };
}

fn fixedData(comptime n: usize, data: []const u8) ExtractError!*const [n]u8 {
    if (data.len != n) return error.InvalidAddressRecord;
    return data[0..n];
}

/// The end of the CNAME chain from `name`, or null without one. A chain is at most as long
/// as the answer section, so one pass per record bounds it even when the records loop.
fn followCnames(
    response: *const Response,
    name: []const u8,
    buffer: *NameBuffer,
) ExtractError!?[]const u8 {
    var current: ?[]const u8 = null;
    var scratch: NameBuffer = undefined;
    for (0..response.header.answer_count) |_| {
        var advanced = false;
        var it = response.answers();
        while (try it.next()) |record| {
            if (record.record_type != .cname or record.class != class_in) continue;
            const owner = current orelse trimDot(name);
            if (!try nameEql(response.packet, record.owner_offset, owner)) continue;
            const target = readName(response.packet, record.data_offset, &scratch) catch
                return error.InvalidCname;
            if (target.end > record.data_offset + record.data.len) return error.InvalidCname;
            std.Io.net.HostName.validate(target.text) catch return error.InvalidCname;
            @memcpy(buffer[0..target.text.len], target.text);
            current = buffer[0..target.text.len];
            advanced = true;
            break;
        }
        if (!advanced) break;
    }
    return current;
}

/// Test support: builds responses the way a name server would (and malformed ones).
pub const testing = struct {
    pub const Answer = struct {
        /// Owner: null for the question's name (a compression pointer to it).
        owner: ?[]const u8 = null,
        record_type: Type,
        data: []const u8,
    };

    /// Writes a response to `query` (as sent by `encodeQuery`) with `rcode` and `answers`.
    pub fn encodeResponse(
        buffer: []u8,
        query: []const u8,
        rcode: Rcode,
        answers: []const Answer,
    ) error{NoSpaceLeft}![]u8 {
        if (buffer.len < query.len) return error.NoSpaceLeft;
        @memcpy(buffer[0..query.len], query);
        buffer[2] |= 0x80; // QR: response
        buffer[3] = 0x80 | @as(u8, @intFromEnum(rcode)); // RA, rcode
        std.mem.writeInt(u16, buffer[6..8], @intCast(answers.len), .big);
        var end = query.len;
        for (answers) |answer| {
            end = try appendName(buffer, end, answer.owner);
            const fixed_len = 10 + answer.data.len;
            if (end + fixed_len > buffer.len) return error.NoSpaceLeft;
            std.mem.writeInt(u16, buffer[end..][0..2], @intFromEnum(answer.record_type), .big);
            std.mem.writeInt(u16, buffer[end + 2 ..][0..2], class_in, .big);
            std.mem.writeInt(u32, buffer[end + 4 ..][0..4], 300, .big); // TTL
            std.mem.writeInt(u16, buffer[end + 8 ..][0..2], @intCast(answer.data.len), .big);
            @memcpy(buffer[end + 10 ..][0..answer.data.len], answer.data);
            end += fixed_len;
        }
        return buffer[0..end];
    }

    fn appendName(buffer: []u8, start: usize, name: ?[]const u8) error{NoSpaceLeft}!usize {
        const text = name orelse {
            if (start + 2 > buffer.len) return error.NoSpaceLeft;
            buffer[start..][0..2].* = .{ 0xc0, header_bytes }; // pointer to the question
            return start + 2;
        };
        var end = start;
        var labels = std.mem.splitScalar(u8, text, '.');
        while (labels.next()) |label| {
            if (end + 1 + label.len >= buffer.len) return error.NoSpaceLeft;
            buffer[end] = @intCast(label.len);
            @memcpy(buffer[end + 1 ..][0..label.len], label);
            end += 1 + label.len;
        }
        buffer[end] = 0;
        return end + 1;
    }

    /// The data of a CNAME record pointing at `target`, uncompressed.
    pub fn cnameData(buffer: []u8, target: []const u8) error{NoSpaceLeft}![]u8 {
        const end = try appendName(buffer, 0, target);
        return buffer[0..end];
    }
};

const expect = std.testing.expect;
const expectEqual = std.testing.expectEqual;
const expectEqualStrings = std.testing.expectEqualStrings;
const expectError = std.testing.expectError;

test "dns: a query encodes name, type and class, and parses back" {
    var buffer: [query_bytes_max]u8 = undefined;
    const query = try encodeQuery(&buffer, 0xbeef, "www.Example.org.", .aaaa);
    try expectEqual(@as(usize, 12 + 17 + 4), query.len);
    try expectEqualStrings("\x03www\x07Example\x03org\x00", query[12..29]);
    const parsed = try Response.parse(query);
    try expectEqual(@as(u16, 0xbeef), parsed.header.id);
    try expect(!parsed.header.response);
    try expectEqual(Type.aaaa, parsed.question.?.record_type);
    try expect(try nameEql(query, parsed.question.?.name_offset, "www.example.ORG"));
}

test "dns: names that cannot be encoded are InvalidName" {
    var buffer: [query_bytes_max]u8 = undefined;
    try expectError(error.InvalidName, encodeQuery(&buffer, 1, "", .a));
    try expectError(error.InvalidName, encodeQuery(&buffer, 1, ".", .a));
    try expectError(error.InvalidName, encodeQuery(&buffer, 1, "a..b", .a));
    try expectError(error.InvalidName, encodeQuery(&buffer, 1, "a" ** 64 ++ ".org", .a));
    const long = ("a" ** 63 ++ ".") ** 4; // 256 characters
    try expectError(error.InvalidName, encodeQuery(&buffer, 1, long, .a));
    const longest = ("a" ** 63 ++ ".") ** 3 ++ "a" ** 61; // 253: 255 on the wire
    const query = try encodeQuery(&buffer, 1, longest, .a);
    try expectEqual(@as(usize, query_bytes_max), query.len);
}

test "dns: addresses follow the CNAME chain and ignore other owners" {
    var query_buffer: [query_bytes_max]u8 = undefined;
    const query = try encodeQuery(&query_buffer, 7, "alias.test", .a);
    var cname_buffer: [64]u8 = undefined;
    const cname = try testing.cnameData(&cname_buffer, "real.test");
    var response_buffer: [udp_message_bytes_max]u8 = undefined;
    const packet = try testing.encodeResponse(&response_buffer, query, .no_error, &.{
        .{ .record_type = .cname, .data = cname },
        .{ .owner = "other.test", .record_type = .a, .data = &.{ 10, 0, 0, 9 } },
        .{ .owner = "REAL.test", .record_type = .a, .data = &.{ 10, 0, 0, 1 } },
        .{ .owner = "real.test", .record_type = .a, .data = &.{ 10, 0, 0, 2 } },
    });
    const response = try Response.parse(packet);
    try expect(response.answersQuery(7, "ALIAS.test.", .a));
    try expect(!response.answersQuery(8, "alias.test", .a));
    try expect(!response.answersQuery(7, "alias.test", .aaaa));
    var addresses: [4]IpAddress = undefined;
    var canonical: NameBuffer = undefined;
    const got = try extractAddresses(&response, "alias.test", .a, 443, &addresses, &canonical);
    try expectEqual(@as(usize, 2), got.addresses_len);
    try expectEqualStrings("real.test", got.canonical_name.?);
    try expectEqual([4]u8{ 10, 0, 0, 1 }, addresses[0].ip4.bytes);
    try expectEqual(@as(u16, 443), addresses[1].getPort());
}

test "dns: a CNAME loop ends, bad record data is a named error" {
    var query_buffer: [query_bytes_max]u8 = undefined;
    const query = try encodeQuery(&query_buffer, 7, "a.test", .aaaa);
    var b_buffer: [64]u8 = undefined;
    var a_buffer: [64]u8 = undefined;
    var response_buffer: [udp_message_bytes_max]u8 = undefined;
    const looping = try testing.encodeResponse(&response_buffer, query, .no_error, &.{
        .{ .record_type = .cname, .data = try testing.cnameData(&b_buffer, "b.test") },
        .{
            .owner = "b.test",
            .record_type = .cname,
            .data = try testing.cnameData(&a_buffer, "a.test"),
        },
    });
    var addresses: [4]IpAddress = undefined;
    var canonical: NameBuffer = undefined;
    const response = try Response.parse(looping);
    const got = try extractAddresses(&response, "a.test", .aaaa, 0, &addresses, &canonical);
    try expectEqual(@as(usize, 0), got.addresses_len);

    const short = try testing.encodeResponse(&response_buffer, query, .no_error, &.{
        .{ .record_type = .aaaa, .data = &.{ 1, 2, 3, 4 } },
    });
    const bad = try Response.parse(short);
    try expectError(
        error.InvalidAddressRecord,
        extractAddresses(&bad, "a.test", .aaaa, 0, &addresses, &canonical),
    );
}

test "dns: compression pointers must point backwards" {
    var buffer: NameBuffer = undefined;
    // A pointer to itself, a pointer forwards, and a label run that points back into itself.
    const self_loop = [_]u8{0} ** 12 ++ [_]u8{ 0xc0, 12 };
    try expectError(error.Malformed, readName(&self_loop, 12, &buffer));
    const forward = [_]u8{0} ** 12 ++ [_]u8{ 0xc0, 14, 1, 'a', 0 };
    try expectError(error.Malformed, readName(&forward, 12, &buffer));
    const run_loop = [_]u8{0} ** 12 ++ [_]u8{ 1, 'a', 0xc0, 12 };
    try expectError(error.Malformed, readName(&run_loop, 12, &buffer));
    const fine = [_]u8{0} ** 12 ++ [_]u8{ 1, 'b', 0, 1, 'a', 0xc0, 12 };
    const name = try readName(&fine, 15, &buffer);
    try expectEqualStrings("a.b", name.text);
    try expectEqual(@as(usize, 19), name.end);
}

test "dns: a reply cut short keeps its whole answers and drops the rest" {
    var query_buffer: [query_bytes_max]u8 = undefined;
    const query = try encodeQuery(&query_buffer, 9, "many.test", .a);
    var answers: [300]testing.Answer = undefined;
    var data: [300][4]u8 = undefined;
    for (&answers, &data, 0..) |*answer, *bytes, i| {
        bytes.* = .{ 10, 2, @intCast(i >> 8), @intCast(i & 0xff) };
        answer.* = .{ .record_type = .a, .data = bytes };
    }
    var full_buffer: [8192]u8 = undefined;
    const full = try testing.encodeResponse(&full_buffer, query, .no_error, &answers);
    try expect(full.len > 2048);
    // Cut where a real TCP reader would, and in the middle of a record.
    for ([_]usize{ 2048, query.len + 16 * 7 + 5 }) |cut_at| {
        const kept = try keepWholeAnswers(full[0..cut_at]);
        const response = try Response.parse(kept);
        try response.checkAnswers();
        const records = (cut_at - query.len) / 16; // each record: pointer, fixed part, 4 bytes
        try expectEqual(@as(u16, @intCast(records)), response.header.answer_count);
        try expectEqual(query.len + records * 16, kept.len);
        var addresses: [4]IpAddress = undefined;
        var canonical: NameBuffer = undefined;
        const got = try extractAddresses(&response, "many.test", .a, 53, &addresses, &canonical);
        try expectEqual(@as(usize, 4), got.addresses_len);
        try expectEqual([4]u8{ 10, 2, 0, 3 }, addresses[3].ip4.bytes);
    }
    // Not even the question: nothing to keep.
    try expectError(error.Malformed, keepWholeAnswers(full[0 .. query.len - 1]));
}

/// Parses `packet` and extracts its addresses as the resolver would; any error is fine, a
/// crash or an out-of-bounds access (a safety panic in tests) is not.
fn parseAnything(packet: []const u8) void {
    const response = Response.parse(packet) catch return;
    _ = response.answersQuery(1, "a.test", .a);
    response.checkAnswers() catch return;
    var addresses: [8]IpAddress = undefined;
    var canonical: NameBuffer = undefined;
    const got = extractAddresses(&response, "a.test", .a, 0, &addresses, &canonical) catch return;
    assert(got.addresses_len <= addresses.len);
}

test "dns: random and mutated packets never crash the parser" {
    var prng: std.Random.DefaultPrng = .init(0x5eed_d115);
    const random = prng.random();
    var query_buffer: [query_bytes_max]u8 = undefined;
    const query = try encodeQuery(&query_buffer, 1, "a.test", .a);
    var cname_buffer: [64]u8 = undefined;
    var seed_buffer: [udp_message_bytes_max]u8 = undefined;
    const seed = try testing.encodeResponse(&seed_buffer, query, .no_error, &.{
        .{ .record_type = .cname, .data = try testing.cnameData(&cname_buffer, "b.test") },
        .{ .owner = "b.test", .record_type = .a, .data = &.{ 1, 2, 3, 4 } },
        .{ .record_type = .a, .data = &.{ 5, 6, 7, 8 } },
    });
    var packet: [udp_message_bytes_max]u8 = undefined;
    for (0..20_000) |round| {
        var len: usize = undefined;
        if (round % 4 == 0) { // pure noise, often with a plausible header
            len = random.uintAtMost(usize, packet.len);
            random.bytes(packet[0..len]);
        } else { // the valid response with a few bytes changed and maybe cut short
            len = seed.len;
            @memcpy(packet[0..len], seed);
            for (0..random.uintAtMost(usize, 4) + 1) |_| {
                packet[random.uintLessThan(usize, len)] = random.int(u8);
            }
            if (random.boolean()) len = random.uintAtMost(usize, len);
        }
        parseAnything(packet[0..len]);
        keepAnything(packet[0..len]);
    }
    // Every prefix of the valid response, too, and each made whole again.
    for (0..seed.len + 1) |len| {
        parseAnything(seed[0..len]);
        @memcpy(packet[0..len], seed[0..len]);
        keepAnything(packet[0..len]);
    }
}

/// Whatever `packet` holds, what `keepWholeAnswers` keeps of it parses and its answers check.
fn keepAnything(packet: []u8) void {
    const kept = keepWholeAnswers(packet) catch return;
    const response = Response.parse(kept) catch unreachable;
    response.checkAnswers() catch unreachable;
}
