//! `netLookup` on weft: numeric addresses, a hosts file, `localhost`, and DNS against a
//! responder the test runs on 127.0.0.1 (the runtime's `Options.resolver` points at it). No
//! test depends on the machine's own /etc/hosts, resolv.conf or network.
const std = @import("std");
const Io = std.Io;
const net = Io.net;
const HostName = net.HostName;
const testing = std.testing;
const Runtime = @import("../Runtime.zig");
const dns = @import("../net/dns.zig");

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
    rt.state.options.resolver.hosts_path = hosts.path;
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
    rt.state.options.resolver.hosts_path = hosts.path;
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

/// A name server for the tests, on 127.0.0.1. What it answers depends on the name asked:
/// - `www.test`: A 10.0.0.1 and AAAA fd00::1; `alias.test`: a CNAME to www.test and its A;
/// - `nx.test` (or any other): NXDOMAIN; `empty.test`: no records; `fail.test`: SERVFAIL;
/// - `retry.test`: drops the first query of each type, answers the retry with A 10.0.0.2;
/// - `noisy.test`: first sends garbage, a reply with a wrong id and one from the wrong
///   question, then the real answer (A 10.0.0.3);
/// - `host.corp.test`: A 10.0.0.4 (reached through the search list).
const Responder = struct {
    socket: net.Socket,
    queries: usize = 0,
    dropped: [2]bool = .{ false, false },

    fn serve(responder: *Responder, io: Io) !void {
        var query_buffer: [dns.udp_message_bytes_max]u8 = undefined;
        while (true) {
            const message = try responder.socket.receive(io, &query_buffer);
            responder.queries += 1;
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
        const Answer = dns.testing.Answer;
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
};

/// Runs `body` on a runtime whose resolver asks only the test's responder, with a short
/// timeout and a resolv.conf of `resolv_conf` (search list and options).
fn withResponder(resolv_conf: []const u8, comptime body: fn (Io, *Responder) anyerror!void) !void {
    var servers: [1]net.IpAddress = undefined;
    var rt = try Runtime.init(testing.allocator, .{ .resolver = .{
        .hosts_path = "/nonexistent/hosts",
        .name_servers = &servers,
        .timeout_ns = 50 * std.time.ns_per_ms,
    } });
    defer rt.deinit();
    const io = rt.io();
    var conf: TempFile = .{};
    try conf.create(io, resolv_conf);
    defer conf.deinit(io);
    rt.state.options.resolver.resolv_conf_path = conf.path;
    const loopback: net.IpAddress = .{ .ip4 = .loopback(0) };
    var responder: Responder = .{ .socket = try loopback.bind(io, .{ .mode = .dgram }) };
    defer responder.socket.close(io);
    servers[0] = responder.socket.address;
    var serving = try io.concurrent(Responder.serve, .{ &responder, io });
    defer serving.cancel(io) catch {};
    try body(io, &responder);
}

test "netLookup: DNS answers A and AAAA from a local responder" {
    try withResponder("", struct {
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
    try withResponder("", struct {
        fn body(io: Io, _: *Responder) !void {
            try testing.expectError(error.UnknownHostName, resolve(io, "nx.test", null));
            try testing.expectError(error.NoAddressReturned, resolve(io, "empty.test", null));
            try testing.expectError(error.NameServerFailure, resolve(io, "fail.test", null));
        }
    }.body);
}

test "netLookup: a dropped query is retried, noise on the socket is ignored" {
    try withResponder("options attempts:3\n", struct {
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
    try withResponder("search corp.test\noptions ndots:1\n", struct {
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
    return HostName.lookup(.{ .bytes = "www.test" }, io, queue, .{ .port = 0 });
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
