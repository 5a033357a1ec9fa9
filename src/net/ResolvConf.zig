//! The resolver's configuration (resolv.conf(5)): name servers, search domains and options.
//! Pure: the resolver feeds the file in line by line (`lookup.zig`), then calls `finish`.
//!
//! Honoured: `nameserver` (IPv4 or IPv6, port 53; at most `name_servers_max`, later ones
//! ignored), `search` and `domain` (the last such line wins, as resolv.conf(5) says),
//! `options ndots:n timeout:n attempts:n` (capped at glibc's limits: 15, 30 s, 5) and
//! `options use-vc` (every query over TCP, as glibc's RES_USEVC). Other directives and options
//! are ignored. Not honoured: the LOCALDOMAIN and RES_OPTIONS
//! environment variables, `rotate`, IPv6 name servers with a scope (`%eth0`).
const ResolvConf = @This();

const std = @import("std");
const assert = std.debug.assert;
const IpAddress = std.Io.net.IpAddress;

name_servers_buffer: [name_servers_max]IpAddress = undefined,
name_servers_len: usize = 0,
/// Search domains separated by spaces or tabs.
search_buffer: [search_bytes_max]u8 = undefined,
search_len: usize = 0,
/// Names with at least this many dots are tried as absolute names first.
ndots: u8 = 1,
/// Wait for a reply from one server before trying the next.
timeout_s: u8 = 5,
/// Rounds over the list of servers.
attempts: u8 = 2,
/// `use-vc`: ask over TCP from the start instead of UDP (which falls back to TCP only for a
/// truncated reply).
use_vc: bool = false,

/// resolv.conf(5): "Up to MAXNS (currently 3) name servers may be listed".
pub const name_servers_max = 3;
/// Bytes of the search list kept; a longer list is cut at the last whole domain.
pub const search_bytes_max = 256;
pub const ndots_max = 15;
pub const timeout_s_max = 30;
pub const attempts_max = 5;
pub const dns_port = 53;

pub fn nameServers(conf: *const ResolvConf) []const IpAddress {
    return conf.name_servers_buffer[0..conf.name_servers_len];
}

pub fn searchDomains(conf: *const ResolvConf) std.mem.TokenIterator(u8, .any) {
    return std.mem.tokenizeAny(u8, conf.search_buffer[0..conf.search_len], " \t");
}

/// Applies one line of the file (without its newline).
pub fn parseLine(conf: *ResolvConf, line: []const u8) void {
    const end = std.mem.indexOfAny(u8, line, "#;") orelse line.len;
    var tokens = std.mem.tokenizeAny(u8, line[0..end], " \t\r");
    const keyword = tokens.next() orelse return;
    if (std.mem.eql(u8, keyword, "nameserver")) {
        const text = tokens.next() orelse return;
        if (conf.name_servers_len == name_servers_max) return;
        const address = IpAddress.parse(text, dns_port) catch return;
        conf.name_servers_buffer[conf.name_servers_len] = address;
        conf.name_servers_len += 1;
    } else if (std.mem.eql(u8, keyword, "search") or std.mem.eql(u8, keyword, "domain")) {
        conf.search_len = 0;
        while (tokens.next()) |domain| {
            const separator: usize = @intFromBool(conf.search_len != 0);
            if (conf.search_len + separator + domain.len > search_bytes_max) break;
            if (separator == 1) conf.search_buffer[conf.search_len] = ' ';
            @memcpy(conf.search_buffer[conf.search_len + separator ..][0..domain.len], domain);
            conf.search_len += separator + domain.len;
        }
    } else if (std.mem.eql(u8, keyword, "options")) {
        while (tokens.next()) |option| conf.parseOption(option);
    }
}

fn parseOption(conf: *ResolvConf, option: []const u8) void {
    const colon = std.mem.indexOfScalar(u8, option, ':') orelse {
        if (std.mem.eql(u8, option, "use-vc")) conf.use_vc = true;
        return;
    };
    const name = option[0..colon];
    const value = std.fmt.parseInt(u32, option[colon + 1 ..], 10) catch |err| switch (err) {
        error.Overflow => std.math.maxInt(u32),
        error.InvalidCharacter => return,
    };
    if (std.mem.eql(u8, name, "ndots")) {
        conf.ndots = @intCast(@min(value, ndots_max));
    } else if (std.mem.eql(u8, name, "timeout")) {
        conf.timeout_s = @intCast(@min(@max(value, 1), timeout_s_max));
    } else if (std.mem.eql(u8, name, "attempts")) {
        conf.attempts = @intCast(@min(@max(value, 1), attempts_max));
    }
}

/// After the last line: without any `nameserver` line the local host is asked, as glibc does.
pub fn finish(conf: *ResolvConf) void {
    if (conf.name_servers_len == 0) {
        conf.name_servers_buffer[0] = .{ .ip4 = .loopback(dns_port) };
        conf.name_servers_len = 1;
    }
    assert(conf.attempts >= 1 and conf.timeout_s >= 1);
    assert(conf.name_servers_len <= name_servers_max);
}

fn testParse(text: []const u8) ResolvConf {
    var conf: ResolvConf = .{};
    var lines = std.mem.splitScalar(u8, text, '\n');
    while (lines.next()) |line| conf.parseLine(line);
    conf.finish();
    return conf;
}

test "ResolvConf: name servers, search list and options" {
    const conf = testParse(
        \\# generated
        \\nameserver 10.0.0.53
        \\nameserver ::1 # local
        \\domain old.example
        \\search corp.example   lab.example
        \\options ndots:2 timeout:1 attempts:9 rotate edns0 use-vc
        \\nameserver 10.0.0.54
        \\nameserver 10.0.0.55
    );
    try std.testing.expectEqual(@as(usize, 3), conf.nameServers().len);
    try std.testing.expectEqual([4]u8{ 10, 0, 0, 53 }, conf.nameServers()[0].ip4.bytes);
    try std.testing.expectEqual(@as(u16, 53), conf.nameServers()[1].getPort());
    try std.testing.expect(conf.nameServers()[1] == .ip6);
    var domains = conf.searchDomains();
    try std.testing.expectEqualStrings("corp.example", domains.next().?);
    try std.testing.expectEqualStrings("lab.example", domains.next().?);
    try std.testing.expect(domains.next() == null);
    try std.testing.expectEqual(@as(u8, 2), conf.ndots);
    try std.testing.expectEqual(@as(u8, 1), conf.timeout_s);
    try std.testing.expectEqual(@as(u8, attempts_max), conf.attempts);
    try std.testing.expect(conf.use_vc);
}

test "ResolvConf: an empty or garbled file means the local name server and defaults" {
    const conf = testParse("nameserver not-an-address\noptions ndots:x timeout:0 bogus\nsearch");
    try std.testing.expectEqual(@as(usize, 1), conf.nameServers().len);
    try std.testing.expect(conf.nameServers()[0].eql(&.{ .ip4 = .loopback(53) }));
    try std.testing.expectEqual(@as(u8, 1), conf.ndots);
    try std.testing.expectEqual(@as(u8, 1), conf.timeout_s); // 0 is raised to 1
    try std.testing.expect(!conf.use_vc);
    var domains = conf.searchDomains();
    try std.testing.expect(domains.next() == null);
}

test "ResolvConf: a search list longer than the buffer keeps whole domains" {
    const domain = "d" ** 60 ++ ".example"; // 68 bytes
    const conf = testParse("search " ++ (domain ++ " ") ** 5);
    var domains = conf.searchDomains();
    var count: usize = 0;
    while (domains.next()) |d| : (count += 1) try std.testing.expectEqualStrings(domain, d);
    try std.testing.expectEqual(@as(usize, 3), count); // 3 * 68 + 2 spaces fit in 256
}
