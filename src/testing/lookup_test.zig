//! `netLookup` on weft: numeric addresses, a hosts file, `localhost`, and DNS against a
//! responder the test runs on 127.0.0.1 (the runtime's `Options.resolver` points at it). No
//! test depends on the machine's own /etc/hosts, resolv.conf or network.
const std = @import("std");
const builtin = @import("builtin");
const Io = std.Io;
const net = Io.net;
const HostName = net.HostName;
const testing = std.testing;
const Runtime = @import("../Runtime.zig");
const dns = @import("../net/dns.zig");
const weft_config = @import("../config.zig");
const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};
const fd_test = @import("fd_test.zig");

/// What one lookup put into its queue.
const Collected = struct {
    addresses: [16]net.IpAddress = undefined,
    len: usize = 0,
    canonical_names: usize = 0,
    canonical_buffer: [HostName.max_len]u8 = undefined,
    canonical: []const u8 = "",

    fn has(collected: *const Collected, text: []const u8) bool {
        const wanted = net.IpAddress.parse(text, 80) catch unreachable;
        for (collected.addresses[0..collected.len]) |a| {
            if (a.eql(&wanted)) return true;
        }
        return false;
    }
};

/// Looks `name` up into a queue of 16 without reading it meanwhile (std's contract: that must
/// not block), then checks the queue was closed and holds exactly one canonical name.
fn resolve(io: Io, name: []const u8, family: ?net.IpAddress.Family) !Collected {
    var collected: Collected = .{};
    var buffer: [16]HostName.LookupResult = undefined;
    var queue: Io.Queue(HostName.LookupResult) = .init(&buffer);
    const outcome = HostName.lookup(.{ .bytes = name }, io, &queue, .{
        .port = 80,
        .family = family,
        .canonical_name_buffer = &collected.canonical_buffer,
    });
    while (queue.getOne(io)) |result| switch (result) {
        .address => |address| {
            collected.addresses[collected.len] = address;
            collected.len += 1;
        },
        .canonical_name => |canonical| {
            collected.canonical_names += 1;
            collected.canonical = canonical.bytes;
        },
    } else |err| switch (err) {
        error.Closed => {}, // closed even on error
        error.Canceled => return err,
    }
    try outcome;
    try testing.expectEqual(@as(usize, 1), collected.canonical_names);
    try testing.expect(collected.len > 0);
    return collected;
}

/// A file under /tmp with `contents`, removed by `deinit`.
const TempFile = struct {
    path_buffer: [64]u8 = undefined,
    path: []const u8 = "",

    fn create(file: *TempFile, io: Io, contents: []const u8) !void {
        var suffix: [8]u8 = undefined;
        io.random(&suffix);
        file.path = try std.fmt.bufPrint(&file.path_buffer, "/tmp/weft-lookup-{x}", .{suffix});
        try Io.Dir.cwd().writeFile(io, .{ .sub_path = file.path, .data = contents });
    }

    fn deinit(file: *TempFile, io: Io) void {
        Io.Dir.cwd().deleteFile(io, file.path) catch {};
    }
};

const hosts_contents =
    \\# test hosts file
    \\10.9.8.7   db.test   db   # the database
    \\fd00::7    db.test
    \\10.9.8.8   other.test
    \\127.0.0.1  svc.test
    \\
;

test "netLookup: a numeric address is its own answer" {
    var rt = try Runtime.init(testing.allocator, .{
        .resolver = .{ .hosts_path = "/nonexistent/hosts" },
    });
    defer rt.deinit();
    const io = rt.io();
    const ip4 = try resolve(io, "127.0.0.1", null);
    try testing.expect(ip4.len == 1 and ip4.has("127.0.0.1"));
    try testing.expectEqualStrings("127.0.0.1", ip4.canonical);
    const ip6 = try resolve(io, "::1", null);
    try testing.expect(ip6.len == 1 and ip6.has("::1"));
    const scoped = try resolve(io, "fe80::1%lo", .ip6);
    try testing.expect(scoped.addresses[0].ip6.interface.index != 0);
    try testing.expectError(error.UnknownHostName, resolve(io, "127.0.0.1", .ip6));
}

test "netLookup: names from the hosts file, by alias, family and case" {
    var rt = try Runtime.init(testing.allocator, .{});
    defer rt.deinit();
    var hosts: TempFile = .{};
    try hosts.create(rt.io(), hosts_contents);
    defer hosts.deinit(rt.io());
    rt.state.resolver.hosts_path = hosts.path;
    const io = rt.io();

    const both = try resolve(io, "DB", null);
    try testing.expectEqual(@as(usize, 1), both.len); // "db" is on the first line only
    try testing.expect(both.has("10.9.8.7"));
    try testing.expectEqualStrings("db.test", both.canonical);
    const all = try resolve(io, "db.test.", null);
    try testing.expectEqual(@as(usize, 2), all.len);
    try testing.expect(all.has("10.9.8.7") and all.has("fd00::7"));
    const ip6 = try resolve(io, "db.test", .ip6);
    try testing.expect(ip6.len == 1 and ip6.has("fd00::7"));
}

test "netLookup: localhost is the loopback addresses without a hosts entry" {
    var rt = try Runtime.init(testing.allocator, .{
        .resolver = .{ .hosts_path = "/nonexistent/hosts" },
    });
    defer rt.deinit();
    const io = rt.io();
    const local = try resolve(io, "localhost", null);
    try testing.expectEqual(@as(usize, 2), local.len);
    try testing.expect(local.has("127.0.0.1") and local.has("::1"));
    try testing.expectEqualStrings("localhost", local.canonical);
    const sub = try resolve(io, "app.localhost", .ip4);
    try testing.expect(sub.len == 1 and sub.has("127.0.0.1"));
}

fn acceptOne(io: Io, server: *net.Server) !void {
    const stream = try server.accept(io);
    stream.close(io);
}

test "netLookup: HostName.connect reaches a name from the hosts file" {
    var rt = try Runtime.init(testing.allocator, .{});
    defer rt.deinit();
    var hosts: TempFile = .{};
    try hosts.create(rt.io(), hosts_contents);
    defer hosts.deinit(rt.io());
    rt.state.resolver.hosts_path = hosts.path;
    const io = rt.io();
    const loopback: net.IpAddress = .{ .ip4 = .loopback(0) };
    var server = try loopback.listen(io, .{});
    defer server.deinit(io);
    var accepting = try io.concurrent(acceptOne, .{ io, &server });
    const host: HostName = try .init("svc.test");
    const stream = try host.connect(io, server.socket.address.getPort(), .{ .mode = .stream });
    stream.close(io);
    try accepting.await(io);
}

/// A name server for the tests, on 127.0.0.1, over UDP and over TCP on the same port (RFC 7766:
/// a server answers both). What it answers depends on the name asked:
/// - `www.test`: A 10.0.0.1 and AAAA fd00::1; `alias.test`: a CNAME to www.test and its A;
/// - `nx.test` (or any other): NXDOMAIN; `empty.test`: no records; `fail.test`: SERVFAIL;
/// - `retry.test`: drops the first query of each type, answers the retry with A 10.0.0.2;
/// - `noisy.test`: first sends garbage, a reply with a wrong id and one from the wrong
///   question, then the real answer (A 10.0.0.3);
/// - `host.corp.test`: A 10.0.0.4 (reached through the search list);
/// - the names of `tcp_names`: over UDP a reply with TC set (for `big.test`'s A query it holds
///   one record, 10.0.0.5, which must not be used); over TCP see `tcpAnswers` and
///   `serveConnection`;
/// - `tcponly.test`: no UDP reply; over TCP A 10.0.0.9 (for `use-vc`).
/// Over TCP, names outside these two groups are NXDOMAIN. TCP connections are served one at
/// a time; `closed` is posted after each is closed, so a test knows the responder's side of
/// it is gone before it counts descriptors or reads the counters. `received` is posted after
/// each UDP query is counted: a lookup goes on over TCP after the first truncated reply,
/// without waiting for the responder to take its other datagram.
const Responder = struct {
    socket: net.Socket,
    /// Listening on the UDP socket's port; or bound to it without listening, so that a
    /// connection to it is refused.
    tcp: net.Socket,
    /// UDP queries received. Atomic: a test reads it once it has waited for the queries it
    /// expects (`received`), while the responder may still count a later datagram; TSan saw
    /// such a late increment (after a test had read 2) race the plain read.
    queries: std.atomic.Value(usize) = .init(0),
    received: Io.Semaphore = .{},
    dropped: [2]bool = .{ false, false },
    /// TCP connections accepted. Atomic for the same reason as `queries`: the test's read is
    /// ordered after the increment only through the socket, which TSan cannot see.
    tcp_connections: std.atomic.Value(usize) = .init(0),
    closed: Io.Semaphore = .{},
    /// Posted when a `hang.test` query arrived over TCP (it is never answered).
    hanging: Io.Semaphore = .{},

    fn serve(responder: *Responder, io: Io) !void {
        var query_buffer: [dns.udp_message_bytes_max]u8 = undefined;
        while (true) {
            const message = try responder.socket.receive(io, &query_buffer);
            _ = responder.queries.fetchAdd(1, .monotonic);
            responder.received.post(io);
            try responder.answer(io, message.data, &message.from);
        }
    }

    fn answer(responder: *Responder, io: Io, query: []const u8, from: *const net.IpAddress) !void {
        const parsed = dns.Response.parse(query) catch return;
        var name_buffer: dns.NameBuffer = undefined;
        const name = (try dns.readName(query, parsed.question.?.name_offset, &name_buffer)).text;
        const record_type = parsed.question.?.record_type;
        const a = record_type == .a;
        var reply_buffer: [dns.udp_message_bytes_max]u8 = undefined;
        var cname_buffer: [64]u8 = undefined;
        var answers: []const Answer = &.{};
        var rcode: dns.Rcode = .no_error;
        if (std.mem.eql(u8, name, "www.test")) {
            answers = if (a)
                &.{.{ .record_type = .a, .data = &.{ 10, 0, 0, 1 } }}
            else
                &.{.{ .record_type = .aaaa, .data = &(.{0xfd} ++ .{0} ** 14 ++ .{1}) }};
        } else if (std.mem.eql(u8, name, "alias.test") and a) {
            answers = &.{
                .{
                    .record_type = .cname,
                    .data = try dns.testing.cnameData(&cname_buffer, "www.test"),
                },
                .{ .owner = "www.test", .record_type = .a, .data = &.{ 10, 0, 0, 1 } },
            };
        } else if (std.mem.eql(u8, name, "empty.test") or std.mem.eql(u8, name, "alias.test")) {
            // no records of this type
        } else if (std.mem.eql(u8, name, "fail.test")) {
            rcode = .server_failure;
        } else if (std.mem.eql(u8, name, "retry.test")) {
            const index = @intFromBool(a);
            if (!responder.dropped[index]) {
                responder.dropped[index] = true;
                return;
            }
            if (a) answers = &.{.{ .record_type = .a, .data = &.{ 10, 0, 0, 2 } }};
        } else if (std.mem.eql(u8, name, "noisy.test")) {
            try responder.sendNoise(io, query, from);
            if (a) answers = &.{.{ .record_type = .a, .data = &.{ 10, 0, 0, 3 } }};
        } else if (std.mem.eql(u8, name, "host.corp.test")) {
            if (a) answers = &.{.{ .record_type = .a, .data = &.{ 10, 0, 0, 4 } }};
        } else if (isTcpName(name)) {
            if (a and std.mem.eql(u8, name, "big.test")) {
                answers = &.{.{ .record_type = .a, .data = &.{ 10, 0, 0, 5 } }};
            }
            const reply = try dns.testing.encodeResponse(&reply_buffer, query, rcode, answers);
            reply[2] |= 0x02; // TC: the rest did not fit
            return responder.socket.send(io, from, reply);
        } else if (std.mem.eql(u8, name, "tcponly.test")) {
            return; // only over TCP
        } else {
            rcode = .name_error;
        }
        const reply = try dns.testing.encodeResponse(&reply_buffer, query, rcode, answers);
        try responder.socket.send(io, from, reply);
    }

    fn sendNoise(
        responder: *Responder,
        io: Io,
        query: []const u8,
        from: *const net.IpAddress,
    ) !void {
        try responder.socket.send(io, from, "\xde\xad");
        var reply_buffer: [dns.udp_message_bytes_max]u8 = undefined;
        const wrong_id = try dns.testing.encodeResponse(&reply_buffer, query, .no_error, &.{
            .{ .record_type = .a, .data = &.{ 6, 6, 6, 6 } },
        });
        wrong_id[0] +%= 1;
        try responder.socket.send(io, from, wrong_id);
        var other_buffer: [dns.query_bytes_max]u8 = undefined;
        const id = std.mem.readInt(u16, query[0..2], .big);
        const other_query = try dns.encodeQuery(&other_buffer, id, "evil.test", .a);
        const evil: []const dns.testing.Answer = &.{
            .{ .record_type = .a, .data = &.{ 6, 6, 6, 6 } },
        };
        const wrong_question =
            try dns.testing.encodeResponse(&reply_buffer, other_query, .no_error, evil);
        try responder.socket.send(io, from, wrong_question);
        // A reply cut in the middle of its answer: rejected on arrival.
        const cut = try dns.testing.encodeResponse(&reply_buffer, query, .no_error, &.{
            .{ .record_type = .a, .data = &.{ 6, 6, 6, 6 } },
        });
        try responder.socket.send(io, from, cut[0 .. cut.len - 3]);
    }

    /// Serves TCP connections one after another until canceled.
    fn serveTcp(responder: *Responder, io: Io) !void {
        var listener: net.Server = .{ .socket = responder.tcp, .options = {} };
        while (true) {
            const stream = try listener.accept(io);
            _ = responder.tcp_connections.fetchAdd(1, .monotonic);
            const served = responder.serveConnection(io, stream);
            stream.close(io);
            responder.closed.post(io);
            served catch |err| switch (err) {
                error.Canceled => |e| return e,
                else => {}, // the client went away mid-message: next connection
            };
        }
    }

    /// Answers the queries of one connection until the client closes it, or the name asks
    /// for something else:
    /// - `big.test`: A 10.1.0.1 to 10.1.0.40, AAAA fd00::1:1 to fd00::1:20 (over 512 bytes);
    /// - `pair.test`: A 10.0.0.6, AAAA fd00::6; `oneshot.test`: the same, but the connection
    ///   is closed after one reply;
    /// - `huge.test`: the A query waits for the AAAA one; then the AAAA reply (200 records,
    ///   5.6 KiB, longer than the resolver keeps) goes first, the A reply (10.0.0.7) after it;
    /// - `short.test`: a length of 100, then 10 bytes, then the connection is closed;
    /// - `garbled.test`: a 20-byte message of noise; `hang.test`: no reply at all.
    fn serveConnection(responder: *Responder, io: Io, stream: net.Stream) !void {
        var read_buffer: [dns.udp_message_bytes_max]u8 = undefined;
        var stream_reader = stream.reader(io, &read_buffer);
        const reader = &stream_reader.interface;
        var write_buffer: [256]u8 = undefined;
        var stream_writer = stream.writer(io, &write_buffer);
        const writer = &stream_writer.interface;
        var held_buffer: [dns.query_bytes_max]u8 = undefined;
        var held: ?[]const u8 = null;
        while (true) {
            var query_buffer: [dns.query_bytes_max]u8 = undefined;
            const len = reader.takeInt(u16, .big) catch |err| switch (err) {
                error.EndOfStream => return,
                error.ReadFailed => return stream_reader.err.?,
            };
            if (len > query_buffer.len) return error.QueryTooLong;
            reader.readSliceAll(query_buffer[0..len]) catch |err| switch (err) {
                error.EndOfStream => return,
                error.ReadFailed => return stream_reader.err.?,
            };
            const query = query_buffer[0..len];
            var name_buffer: dns.NameBuffer = undefined;
            const parsed = try dns.Response.parse(query);
            const question = parsed.question.?;
            const name = (try dns.readName(query, question.name_offset, &name_buffer)).text;
            const a = question.record_type == .a;
            if (std.mem.eql(u8, name, "short.test")) {
                try writer.writeAll("\x00\x64" ++ "0123456789");
                writer.flush() catch return stream_writer.err.?;
                return;
            } else if (std.mem.eql(u8, name, "garbled.test")) {
                var noise: [20]u8 = undefined;
                io.random(&noise);
                try writer.writeAll("\x00\x14");
                try writer.writeAll(&noise);
            } else if (std.mem.eql(u8, name, "hang.test")) {
                responder.hanging.post(io);
            } else if (std.mem.eql(u8, name, "huge.test") and a) {
                @memcpy(held_buffer[0..query.len], query);
                held = held_buffer[0..query.len];
            } else {
                try writeReply(writer, name, query);
                if (held) |held_query| try writeReply(writer, name, held_query);
                held = null;
            }
            writer.flush() catch return stream_writer.err.?;
            if (std.mem.eql(u8, name, "oneshot.test")) return;
        }
    }
};

const Answer = dns.testing.Answer;

/// Names whose answers do not fit a datagram: over UDP the responder sends them truncated.
const tcp_names = [_][]const u8{
    "big.test",  "pair.test", "oneshot.test", "huge.test", "short.test", "garbled.test",
    "hang.test",
};

fn isTcpName(name: []const u8) bool {
    for (tcp_names) |tcp_name| {
        if (std.mem.eql(u8, name, tcp_name)) return true;
    }
    return false;
}

/// Room for the records of the largest TCP reply.
const TcpRecords = struct {
    answers: [200]Answer = undefined,
    data: [200][16]u8 = undefined,

    /// `count` records of `record_type`: 10.`tag`.0.i, or fd00::`tag`:i, i from 1.
    fn numbered(records: *TcpRecords, record_type: dns.Type, tag: u8, count: usize) []Answer {
        for (records.answers[0..count], records.data[0..count], 1..) |*answer, *data, i| {
            const high: u8 = @intCast(i >> 8);
            const low: u8 = @truncate(i);
            data.* = .{0xfd} ++ .{0} ** 11 ++ .{ 0, tag, high, low };
            if (record_type == .a) data[0..4].* = .{ 10, tag, high, low };
            const len: usize = if (record_type == .a) 4 else 16;
            answer.* = .{ .record_type = record_type, .data = data[0..len] };
        }
        return records.answers[0..count];
    }
};

/// The records the responder serves over TCP for `name`.
fn tcpAnswers(name: []const u8, record_type: dns.Type, records: *TcpRecords) ?[]const Answer {
    const a = record_type == .a;
    const eql = std.mem.eql;
    if (eql(u8, name, "big.test")) {
        return if (a) records.numbered(.a, 1, 40) else records.numbered(.aaaa, 1, 20);
    }
    if (eql(u8, name, "pair.test") or eql(u8, name, "oneshot.test")) {
        return if (a)
            &.{.{ .record_type = .a, .data = &.{ 10, 0, 0, 6 } }}
        else
            &.{.{ .record_type = .aaaa, .data = &(.{0xfd} ++ .{0} ** 14 ++ .{6}) }};
    }
    if (eql(u8, name, "huge.test")) {
        return if (a)
            &.{.{ .record_type = .a, .data = &.{ 10, 0, 0, 7 } }}
        else
            records.numbered(.aaaa, 2, 200);
    }
    if (eql(u8, name, "tcponly.test")) {
        return if (a) &.{.{ .record_type = .a, .data = &.{ 10, 0, 0, 9 } }} else &.{};
    }
    return null;
}

/// Writes the TCP reply to `query` (for `name`), its length first.
fn writeReply(writer: *Io.Writer, name: []const u8, query: []const u8) !void {
    const parsed = try dns.Response.parse(query);
    var records: TcpRecords = .{};
    const answers = tcpAnswers(name, parsed.question.?.record_type, &records);
    var reply_buffer: [8192]u8 = undefined;
    const rcode: dns.Rcode = if (answers == null) .name_error else .no_error;
    const reply = try dns.testing.encodeResponse(&reply_buffer, query, rcode, answers orelse &.{});
    try writer.writeInt(u16, @intCast(reply.len), .big);
    try writer.writeAll(reply);
}

const ResponderOptions = struct {
    /// The resolv.conf the resolver reads (search list and options).
    resolv_conf: []const u8 = "",
    /// The wait for one server (per round), short where the responder answers at once.
    timeout_ms: u64 = 50,
    /// `.refuse`: nothing listens on the TCP port, so every connection is refused.
    tcp: enum { listen, refuse } = .listen,
};

/// Binds the responder's UDP socket to a free port of 127.0.0.1 and its TCP socket to the
/// same port. Bounded retries: the port the kernel picks for UDP may be taken for TCP.
fn bindResponder(io: Io, tcp: @FieldType(ResponderOptions, "tcp")) !Responder {
    const loopback: net.IpAddress = .{ .ip4 = .loopback(0) };
    for (0..16) |_| {
        const udp = try loopback.bind(io, .{ .mode = .dgram });
        errdefer udp.close(io);
        const stream = switch (tcp) {
            .listen => (udp.address.listen(io, .{}) catch |err| switch (err) {
                error.AddressInUse => {
                    udp.close(io);
                    continue;
                },
                else => |e| return e,
            }).socket,
            .refuse => udp.address.bind(io, .{ .mode = .stream }) catch |err| switch (err) {
                error.AddressInUse => {
                    udp.close(io);
                    continue;
                },
                else => |e| return e,
            },
        };
        return .{ .socket = udp, .tcp = stream };
    }
    return error.AddressInUse;
}

/// Runs `body` on a runtime whose resolver asks only the test's responder, with a resolv.conf
/// and timeout of `options`.
fn withResponder(
    options: ResponderOptions,
    comptime body: fn (Io, *Responder) anyerror!void,
) !void {
    var servers: [1]net.IpAddress = undefined;
    var rt = try Runtime.init(testing.allocator, .{ .resolver = .{
        .hosts_path = "/nonexistent/hosts",
        .name_servers = &servers,
        .timeout_ns = options.timeout_ms * std.time.ns_per_ms,
    } });
    defer rt.deinit();
    const io = rt.io();
    var conf: TempFile = .{};
    try conf.create(io, options.resolv_conf);
    defer conf.deinit(io);
    rt.state.resolver.resolv_conf_path = conf.path;
    var responder = try bindResponder(io, options.tcp);
    defer responder.socket.close(io);
    defer responder.tcp.close(io);
    servers[0] = responder.socket.address;
    var serving = try io.concurrent(Responder.serve, .{ &responder, io });
    defer serving.cancel(io) catch {};
    var serving_tcp = if (options.tcp == .listen)
        try io.concurrent(Responder.serveTcp, .{ &responder, io })
    else
        null;
    defer if (serving_tcp) |*future| future.cancel(io) catch {};
    try body(io, &responder);
}

test "netLookup: DNS answers A and AAAA from a local responder" {
    try withResponder(.{}, struct {
        fn body(io: Io, _: *Responder) !void {
            const both = try resolve(io, "www.test", null);
            try testing.expectEqual(@as(usize, 2), both.len);
            try testing.expect(both.addresses[0] == .ip4); // IPv4 first
            try testing.expect(both.has("10.0.0.1") and both.has("fd00::1"));
            try testing.expectEqualStrings("www.test", both.canonical);
            const ip6 = try resolve(io, "www.test", .ip6);
            try testing.expect(ip6.len == 1 and ip6.has("fd00::1"));
            const alias = try resolve(io, "alias.test", null);
            try testing.expect(alias.len == 1 and alias.has("10.0.0.1"));
            try testing.expectEqualStrings("www.test", alias.canonical);
        }
    }.body);
}

test "netLookup: names that do not resolve are clear errors" {
    try withResponder(.{}, struct {
        fn body(io: Io, _: *Responder) !void {
            try testing.expectError(error.UnknownHostName, resolve(io, "nx.test", null));
            try testing.expectError(error.NoAddressReturned, resolve(io, "empty.test", null));
            try testing.expectError(error.NameServerFailure, resolve(io, "fail.test", null));
        }
    }.body);
}

test "netLookup: a dropped query is retried, noise on the socket is ignored" {
    try withResponder(.{ .resolv_conf = "options attempts:3\n" }, struct {
        fn body(io: Io, responder: *Responder) !void {
            const retried = try resolve(io, "retry.test", .ip4);
            try testing.expect(retried.len == 1 and retried.has("10.0.0.2"));
            try testing.expect(responder.dropped[1]);
            const noisy = try resolve(io, "noisy.test", .ip4);
            try testing.expect(noisy.len == 1 and noisy.has("10.0.0.3"));
        }
    }.body);
}

test "netLookup: the search list and ndots" {
    try withResponder(.{ .resolv_conf = "search corp.test\noptions ndots:1\n" }, struct {
        fn body(io: Io, _: *Responder) !void {
            const short = try resolve(io, "host", .ip4);
            try testing.expect(short.len == 1 and short.has("10.0.0.4"));
            try testing.expectEqualStrings("host.corp.test", short.canonical);
            // A trailing dot: absolute only, the search list is not tried.
            try testing.expectError(error.UnknownHostName, resolve(io, "host.", .ip4));
        }
    }.body);
}

test "netLookup: a name server that never answers is NameServerFailure" {
    var servers: [1]net.IpAddress = undefined;
    var rt = try Runtime.init(testing.allocator, .{ .resolver = .{
        .hosts_path = "/nonexistent/hosts",
        .resolv_conf_path = "/nonexistent/resolv.conf",
        .name_servers = &servers,
        .timeout_ns = 20 * std.time.ns_per_ms,
    } });
    defer rt.deinit();
    const io = rt.io();
    const loopback: net.IpAddress = .{ .ip4 = .loopback(0) };
    const silent = try loopback.bind(io, .{ .mode = .dgram });
    defer silent.close(io);
    servers[0] = silent.address;
    try testing.expectError(error.NameServerFailure, resolve(io, "www.test", null));
}

fn lookupForever(io: Io, queue: *Io.Queue(HostName.LookupResult)) HostName.LookupError!void {
    return lookupName(io, queue, "www.test");
}

fn lookupName(
    io: Io,
    queue: *Io.Queue(HostName.LookupResult),
    name: []const u8,
) HostName.LookupError!void {
    return HostName.lookup(.{ .bytes = name }, io, queue, .{ .port = 0 });
}

test "netLookup: cancel a lookup waiting for a name server; the queue is closed" {
    var servers: [1]net.IpAddress = undefined;
    var rt = try Runtime.init(testing.allocator, .{ .resolver = .{
        .hosts_path = "/nonexistent/hosts",
        .resolv_conf_path = "/nonexistent/resolv.conf",
        .name_servers = &servers,
        .timeout_ns = std.time.ns_per_min,
    } });
    defer rt.deinit();
    const io = rt.io();
    const loopback: net.IpAddress = .{ .ip4 = .loopback(0) };
    const silent = try loopback.bind(io, .{ .mode = .dgram });
    defer silent.close(io);
    servers[0] = silent.address;
    var buffer: [16]HostName.LookupResult = undefined;
    var queue: Io.Queue(HostName.LookupResult) = .init(&buffer);
    var future = try io.concurrent(lookupForever, .{ io, &queue });
    var datagram: [dns.udp_message_bytes_max]u8 = undefined;
    _ = try silent.receive(io, &datagram); // the lookup is now waiting for a reply
    try testing.expectError(error.Canceled, future.cancel(io));
    try testing.expectError(error.Closed, queue.getOne(io));
}

test "netLookup: a truncated UDP reply is asked again over TCP, both queries on one connection" {
    try withResponder(.{ .timeout_ms = 1000 }, struct {
        fn body(io: Io, responder: *Responder) !void {
            const pair = try resolve(io, "pair.test", null);
            try testing.expectEqual(@as(usize, 2), pair.len);
            try testing.expect(pair.addresses[0] == .ip4); // IPv4 first, as over UDP
            try testing.expect(pair.has("10.0.0.6") and pair.has("fd00::6"));
            try testing.expectEqualStrings("pair.test", pair.canonical);
            try responder.closed.wait(io);
            try testing.expectEqual(@as(usize, 1), responder.tcp_connections.load(.monotonic));
            try responder.received.wait(io);
            try responder.received.wait(io);
            // A and AAAA, over UDP.
            try testing.expectEqual(@as(usize, 2), responder.queries.load(.monotonic));

            // Over 512 bytes of answers; the record the truncated reply held is not used.
            const big4 = try resolve(io, "big.test", .ip4);
            try testing.expectEqual(@as(usize, weft_config.dns_addresses_max), big4.len);
            try testing.expect(big4.has("10.1.0.1") and big4.has("10.1.0.15"));
            try testing.expect(!big4.has("10.0.0.5"));
            const big6 = try resolve(io, "big.test", .ip6);
            try testing.expectEqual(@as(usize, weft_config.dns_addresses_max), big6.len);
            try testing.expect(big6.has("fd00::1:1") and big6.has("fd00::1:f"));
            try responder.closed.wait(io);
            try responder.closed.wait(io);
        }
    }.body);
}

test "netLookup: TCP replies out of order, one longer than kept, a server that closes early" {
    // One round: a query the first connection left unanswered is not asked again by a
    // second round, only by a second connection in the same one.
    try withResponder(.{ .resolv_conf = "options attempts:1\n", .timeout_ms = 1000 }, struct {
        fn body(io: Io, responder: *Responder) !void {
            // The AAAA reply (5.6 KiB) comes first: its whole records are kept, the rest is
            // skipped, and the A reply behind it on the same connection is read.
            const huge = try resolve(io, "huge.test", null);
            try testing.expectEqual(@as(usize, weft_config.dns_addresses_max), huge.len);
            try testing.expect(huge.addresses[0] == .ip4 and huge.has("10.0.0.7"));
            try testing.expect(huge.has("fd00::2:1") and huge.has("fd00::2:e"));
            try responder.closed.wait(io);
            try testing.expectEqual(@as(usize, 1), responder.tcp_connections.load(.monotonic));
            // One reply per connection: the resolver connects again for the other query.
            const oneshot = try resolve(io, "oneshot.test", null);
            try testing.expect(oneshot.len == 2 and oneshot.has("fd00::6"));
            try responder.closed.wait(io);
            try responder.closed.wait(io);
            try testing.expectEqual(@as(usize, 3), responder.tcp_connections.load(.monotonic));
        }
    }.body);
}

test "netLookup: use-vc asks over TCP only" {
    try withResponder(.{ .resolv_conf = "options use-vc\n", .timeout_ms = 1000 }, struct {
        fn body(io: Io, responder: *Responder) !void {
            const found = try resolve(io, "tcponly.test", null);
            try testing.expect(found.len == 1 and found.has("10.0.0.9"));
            try responder.closed.wait(io);
            // Nothing over UDP.
            try testing.expectEqual(@as(usize, 0), responder.queries.load(.monotonic));
            try testing.expectError(error.UnknownHostName, resolve(io, "nx.test", .ip4));
            try responder.closed.wait(io);
        }
    }.body);
}

/// Open files of this process, from /proc/self/fd, with the descriptors of one socket counted
/// once and /proc files left out (`fd_test.isProcfs`). Why not every descriptor: the epoll
/// backend registers a `dup` of a socket for each operation in flight, so the responder's
/// fibers, parked in `receive` and `accept` or running between them on another executor, add 0
/// to 2 descriptors depending on the moment of the count, but never a socket. A socket the
/// resolver leaked still counts, even if only a dup of it is left open.
fn openFileCount() !usize {
    const Count = struct {
        socket_inodes: [256]u64 = undefined,
        sockets: usize = 0,
        others: usize = 0,

        fn add(count: *@This(), fd: i32) error{Unexpected}!void {
            var stat: linux.Statx = undefined;
            const mask: linux.STATX = .{ .TYPE = true, .INO = true };
            switch (linux.errno(linux.statx(fd, "", linux.AT.EMPTY_PATH, mask, &stat))) {
                .SUCCESS => {},
                .BADF => return, // a dup closed since the listing was read
                else => return error.Unexpected,
            }
            if (!linux.S.ISSOCK(stat.mode)) {
                if (!fd_test.isProcfs(fd)) count.others += 1;
            } else if (std.mem.indexOfScalar(
                u64,
                count.socket_inodes[0..count.sockets],
                stat.ino,
            ) == null) {
                // Bounded: far more sockets than a lookup test opens.
                if (count.sockets == count.socket_inodes.len) return error.Unexpected;
                count.socket_inodes[count.sockets] = stat.ino;
                count.sockets += 1;
            }
        }
    };
    var count: Count = .{};
    try fd_test.forEachOpenFd(&count, Count.add);
    return count.others + count.sockets;
}

/// Resolves `name`, which must fail with `error.NameServerFailure` after one TCP connection
/// the responder served, and checks no descriptor was left open by it.
fn expectTcpFailure(io: Io, responder: *Responder, name: []const u8) !void {
    const before = try openFileCount();
    try testing.expectError(error.NameServerFailure, resolve(io, name, .ip4));
    try responder.closed.wait(io);
    try testing.expectEqual(before, try openFileCount());
}

test "netLookup: a TCP reply cut short, garbled or never sent fails the server; no fd leaks" {
    // 500 ms: room for the warm-up on a loaded machine; `hang.test` waits all of it.
    try withResponder(.{ .resolv_conf = "options attempts:1\n", .timeout_ms = 500 }, struct {
        fn body(io: Io, responder: *Responder) !void {
            _ = try resolve(io, "pair.test", null); // warm up: lanes and pools stay
            try responder.closed.wait(io);
            try expectTcpFailure(io, responder, "short.test");
            try expectTcpFailure(io, responder, "garbled.test");
            try expectTcpFailure(io, responder, "hang.test"); // the timeout
        }
    }.body);
}

test "netLookup: a refused TCP connection is NameServerFailure; no fd leaks" {
    try withResponder(.{ .tcp = .refuse }, struct {
        fn body(io: Io, responder: *Responder) !void {
            _ = try resolve(io, "www.test", .ip4); // warm up: lanes and pools stay
            const before = try openFileCount();
            try testing.expectError(error.NameServerFailure, resolve(io, "big.test", null));
            try testing.expectError(error.NameServerFailure, resolve(io, "pair.test", .ip6));
            try testing.expectEqual(before, try openFileCount());
            // Both rounds of both lookups reached the server over UDP first. A lookup goes on
            // over TCP after the first truncated reply, so the responder may still be counting
            // the other datagram: wait for each count before reading them (TSan saw the read
            // race the responder's increment).
            for (0..1 + 2 + 1) |_| try responder.received.wait(io);
            try testing.expectEqual(@as(usize, 1 + 2 + 1), responder.queries.load(.monotonic));
        }
    }.body);
}

test "netLookup: cancel during the TCP exchange; the queue is closed, no fd leaks" {
    try withResponder(.{ .resolv_conf = "options attempts:1\n", .timeout_ms = 60_000 }, struct {
        fn body(io: Io, responder: *Responder) !void {
            _ = try resolve(io, "pair.test", null); // warm up: lanes and pools stay
            try responder.closed.wait(io);
            const before = try openFileCount();
            var buffer: [16]HostName.LookupResult = undefined;
            var queue: Io.Queue(HostName.LookupResult) = .init(&buffer);
            var future = try io.concurrent(lookupName, .{ io, &queue, "hang.test" });
            try responder.hanging.wait(io); // the lookup now waits for the TCP reply
            try testing.expectError(error.Canceled, future.cancel(io));
            try testing.expectError(error.Closed, queue.getOne(io));
            try responder.closed.wait(io);
            try testing.expectEqual(before, try openFileCount());
        }
    }.body);
}
