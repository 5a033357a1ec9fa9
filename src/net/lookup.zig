//! Host name lookup (`std.Io`'s `netLookup`): numeric addresses, the hosts file, `localhost`,
//! then DNS on weft's loop (UDP, and TCP for a truncated reply or with `use-vc`) with
//! resolv.conf's servers, search list and options.
//!
//! Order, first that answers wins:
//! 1. A numeric IPv4 or IPv6 address (a scope such as `%lo` resolved) is its own answer.
//! 2. The hosts file: every line that lists the name, in file order; the canonical name is
//!    the first name on the first such line.
//! 3. `localhost` and names under `.localhost` are the loopback addresses (RFC 6761 §6.3).
//! 4. DNS (`dns_client.zig`): A, then AAAA queries, sent together. A name with fewer dots than
//!    `ndots` is tried with each search domain appended before it is tried as is; a name with
//!    more is tried as is first; a name with a trailing dot only as is. NXDOMAIN or an empty
//!    answer moves on to the next candidate; a name no server answered is
//!    `error.NameServerFailure` at once (a server problem is not reported as an unknown name):
//!    every server silent, failing the query, refusing the TCP connection a truncated reply
//!    calls for, or sending a reply that does not parse.
//!
//! Results are collected first and then put into the caller's queue: the IPv4 addresses
//! before the IPv6 ones (as the queries are sent), then exactly one canonical name. On error
//! nothing is put. At most `config.dns_addresses_max` addresses are reported.
//!
//! The configuration files are read through the `io` given, so they go wherever that Io's
//! file operations go; the exchange with name servers uses the loop directly.
const std = @import("std");
const assert = std.debug.assert;
const Io = std.Io;
const net = Io.net;
const HostName = net.HostName;
const IpAddress = net.IpAddress;
const weft_config = @import("../config.zig");
const dns = @import("dns.zig");
const dns_client = @import("dns_client.zig");
const hosts = @import("hosts.zig");
const ResolvConf = @import("ResolvConf.zig");

/// Where the resolver looks (`Runtime.Options.resolver`).
pub const Config = @import("../options.zig").Resolver;

pub const Error = HostName.LookupError;

/// Lines longer than this in the hosts file or resolv.conf are skipped.
const line_bytes_max = 512;

const Results = struct {
    addresses: [weft_config.dns_addresses_max]IpAddress = undefined,
    len: usize = 0,
    canonical_buffer: [HostName.max_len]u8 = undefined,
    /// Null: the name asked for is its own canonical name.
    canonical_len: ?usize = null,

    fn add(results: *Results, address: IpAddress) void {
        if (results.len == results.addresses.len) return;
        results.addresses[results.len] = address;
        results.len += 1;
    }

    fn setCanonical(results: *Results, text: []const u8) void {
        if (results.canonical_len != null) return;
        if (text.len > results.canonical_buffer.len) return;
        @memcpy(results.canonical_buffer[0..text.len], text);
        results.canonical_len = text.len;
    }

    fn canonical(results: *const Results) ?[]const u8 {
        return results.canonical_buffer[0 .. results.canonical_len orelse return null];
    }
};

/// Resolves `host_name` and puts its addresses, then exactly one canonical name, into
/// `resolved`; puts nothing on error. Does not close `resolved` (the VTable entry does).
/// The canonical name is copied into `options.canonical_name_buffer` when one is given; else
/// it is `host_name` itself, whose memory the caller owns. Cancelation point.
pub fn lookup(
    io: Io,
    config: *const Config,
    host_name: HostName,
    resolved: *Io.Queue(HostName.LookupResult),
    options: HostName.LookupOptions,
) Error!void {
    var results: Results = .{};
    try resolve(io, config, host_name.bytes, options, &results);
    assert(results.len > 0);
    for (results.addresses[0..results.len]) |address| {
        try put(io, resolved, .{ .address = address });
    }
    const name = trimDot(host_name.bytes);
    const canonical: HostName = if (options.canonical_name_buffer) |buffer| copy: {
        const text = results.canonical() orelse name;
        @memcpy(buffer[0..text.len], text);
        break :copy .{ .bytes = buffer[0..text.len] };
    } else .{ .bytes = name };
    try put(io, resolved, .{ .canonical_name = canonical });
}

fn put(
    io: Io,
    resolved: *Io.Queue(HostName.LookupResult),
    result: HostName.LookupResult,
) Io.Cancelable!void {
    resolved.putOne(io, result) catch |err| switch (err) {
        error.Canceled => return error.Canceled,
        error.Closed => unreachable, // the contract: open until netLookup returns
    };
}

fn trimDot(text: []const u8) []const u8 {
    return if (std.mem.endsWith(u8, text, ".")) text[0 .. text.len - 1] else text;
}

fn resolve(
    io: Io,
    config: *const Config,
    name: []const u8,
    options: HostName.LookupOptions,
    results: *Results,
) Error!void {
    if (name.len == 0 or name.len > HostName.max_len) return error.UnknownHostName;
    if (try numeric(io, name, options, results)) return;
    if (try fromHostsFile(io, config.hosts_path, name, options, results)) return;
    if (isLocalhost(trimDot(name))) {
        if (options.family != .ip6) results.add(.{ .ip4 = .loopback(options.port) });
        if (options.family != .ip4) results.add(.{ .ip6 = .loopback(options.port) });
        results.setCanonical("localhost");
        return;
    }
    return fromDns(io, config, name, options, results);
}

/// Whether `name` is an address; a literal of the other family than asked for is unknown.
fn numeric(
    io: Io,
    name: []const u8,
    options: HostName.LookupOptions,
    results: *Results,
) Error!bool {
    const address = parseAddress(io, name, options.port) catch |err| switch (err) {
        error.NotAnAddress => return false,
        error.Canceled => |e| return e,
    };
    if (options.family) |family| {
        if (family != address) return error.UnknownHostName;
    }
    results.add(address);
    return true;
}

/// `text` as an address with `port`; an IPv6 scope (`fe80::1%eth0`) names an interface,
/// which must exist.
fn parseAddress(io: Io, text: []const u8, port: u16) error{ NotAnAddress, Canceled }!IpAddress {
    if (IpAddress.parseIp4(text, port)) |address| return address else |_| {}
    const ip6 = net.Ip6Address.resolve(io, text, port) catch |err| switch (err) {
        error.Canceled => |e| return e,
        else => return error.NotAnAddress,
    };
    return .{ .ip6 = ip6 };
}

fn isLocalhost(name: []const u8) bool {
    const suffix = ".localhost";
    if (std.ascii.eqlIgnoreCase(name, suffix[1..])) return true;
    return name.len > suffix.len and std.ascii.endsWithIgnoreCase(name, suffix);
}

const ReadError = error{ Canceled, DetectingNetworkConfigurationFailed };

/// Calls `onLine(context, line)` for each line of the file at `path`; returns false when the
/// file does not exist or may not be read (both mean "no such configuration").
fn forEachLine(
    io: Io,
    path: []const u8,
    context: anytype,
    comptime onLine: fn (@TypeOf(context), []const u8) Error!void,
) Error!bool {
    const file = Io.Dir.cwd().openFile(io, path, .{}) catch |err| switch (err) {
        error.FileNotFound, error.NotDir, error.AccessDenied, error.PermissionDenied => {
            return false;
        },
        error.Canceled => |e| return e,
        else => return error.DetectingNetworkConfigurationFailed,
    };
    defer file.close(io);
    var buffer: [line_bytes_max]u8 = undefined;
    var file_reader = file.reader(io, &buffer);
    const reader = &file_reader.interface;
    while (true) {
        const line = reader.takeDelimiter('\n') catch |err| switch (err) {
            error.StreamTooLong => { // skip the rest of an overlong line
                _ = reader.discardDelimiterInclusive('\n') catch |e| switch (e) {
                    error.EndOfStream => return true,
                    error.ReadFailed => return readFailed(file_reader.err),
                };
                continue;
            },
            error.ReadFailed => return readFailed(file_reader.err),
        } orelse return true;
        try onLine(context, line);
    }
}

fn readFailed(err: ?Io.File.Reader.Error) ReadError {
    return switch (err orelse return error.DetectingNetworkConfigurationFailed) {
        error.Canceled => error.Canceled,
        else => error.DetectingNetworkConfigurationFailed,
    };
}

const HostsSearch = struct {
    io: Io,
    name: []const u8,
    options: HostName.LookupOptions,
    results: *Results,
    found: bool = false,

    fn onLine(search: *HostsSearch, line: []const u8) Error!void {
        const match = hosts.matchLine(line, search.name) orelse return;
        const address = parseAddress(search.io, match.address_text, search.options.port) catch |err|
            switch (err) {
                error.NotAnAddress => return,
                error.Canceled => |e| return e,
            };
        if (search.options.family) |family| {
            if (family != address) return;
        }
        search.results.add(address);
        // The canonical name must itself be a valid host name to be reported.
        if (HostName.validate(match.canonical_name)) {
            search.results.setCanonical(match.canonical_name);
        } else |_| {}
        search.found = true;
    }
};

fn fromHostsFile(
    io: Io,
    path: []const u8,
    name: []const u8,
    options: HostName.LookupOptions,
    results: *Results,
) Error!bool {
    var search: HostsSearch = .{ .io = io, .name = name, .options = options, .results = results };
    _ = try forEachLine(io, path, &search, HostsSearch.onLine);
    return search.found;
}

fn parseResolvConfLine(conf: *ResolvConf, line: []const u8) Error!void {
    conf.parseLine(line);
}

const Outcome = enum { addresses, no_such_name, no_data };

fn fromDns(
    io: Io,
    config: *const Config,
    name: []const u8,
    options: HostName.LookupOptions,
    results: *Results,
) Error!void {
    var conf: ResolvConf = .{};
    _ = try forEachLine(io, config.resolv_conf_path, &conf, parseResolvConfLine);
    conf.finish();
    const servers: dns_client.Servers = .{
        .addresses = config.name_servers orelse conf.nameServers(),
        .timeout_ns = config.timeout_ns orelse @as(u64, conf.timeout_s) * std.time.ns_per_s,
        .attempts = conf.attempts,
        .transport = if (conf.use_vc) .tcp else .udp,
    };
    if (servers.addresses.len == 0) return error.NameServerFailure;
    const text = trimDot(name);
    if (text.len == 0 or std.mem.endsWith(u8, text, ".")) return error.UnknownHostName;
    var best: Outcome = .no_such_name;
    const absolute_first = text.len < name.len or std.mem.count(u8, text, ".") >= conf.ndots;
    if (absolute_first) {
        if (try ask(io, servers, text, options, results, &best)) return;
        if (text.len < name.len) return outcomeError(best); // a trailing dot: absolute only
    }
    var candidate_buffer: [dns.name_text_bytes_max]u8 = undefined;
    var domains = conf.searchDomains();
    while (domains.next()) |domain| {
        const candidate = std.fmt.bufPrint(&candidate_buffer, "{s}.{s}", .{ text, domain }) catch
            continue; // too long to be a name
        if (try ask(io, servers, candidate, options, results, &best)) return;
    }
    if (!absolute_first) {
        if (try ask(io, servers, text, options, results, &best)) return;
    }
    return outcomeError(best);
}

fn outcomeError(best: Outcome) Error {
    return switch (best) {
        .no_such_name => error.UnknownHostName,
        .no_data => error.NoAddressReturned,
        .addresses => unreachable, // a lookup that found addresses has returned
    };
}

/// Asks the servers for `candidate`; true when it has addresses (now in `results`). Else
/// `best` keeps the most telling outcome so far (an existing name without addresses).
fn ask(
    io: Io,
    servers: dns_client.Servers,
    candidate: []const u8,
    options: HostName.LookupOptions,
    results: *Results,
    best: *Outcome,
) Error!bool {
    var queries_buffer: [dns_client.queries_max]dns_client.Query = undefined;
    var queries_len: usize = 0;
    if (options.family != .ip6) {
        queries_buffer[queries_len] = .{ .record_type = .a };
        queries_len += 1;
    }
    if (options.family != .ip4) {
        queries_buffer[queries_len] = .{ .record_type = .aaaa };
        queries_len += 1;
    }
    const queries = queries_buffer[0..queries_len];
    dns_client.exchange(io, servers, candidate, queries) catch |err| switch (err) {
        error.InvalidName => return false, // no server can be asked about it: no such name
        error.Canceled, error.SystemResources, error.Unexpected => |e| return e,
        error.ProcessFdQuotaExceeded, error.SystemFdQuotaExceeded => |e| return e,
        error.AddressFamilyUnsupported => |e| return e,
    };
    const found_before = results.len;
    var unanswered = false;
    for (queries) |*query| {
        const reply = query.reply() orelse {
            unanswered = true;
            continue;
        };
        const outcome = try takeReply(query.record_type, reply, candidate, options.port, results);
        if (outcome == .no_data) best.* = .no_data;
    }
    if (results.len > found_before) {
        results.setCanonical(candidate);
        return true;
    }
    if (unanswered) return error.NameServerFailure;
    return false;
}

fn takeReply(
    record_type: dns.Type,
    reply: []const u8,
    candidate: []const u8,
    port: u16,
    results: *Results,
) Error!Outcome {
    // Parsed and its answers checked when it was accepted.
    const response = dns.Response.parse(reply) catch unreachable;
    if (response.header.rcode == .name_error) return .no_such_name;
    var canonical: dns.NameBuffer = undefined;
    const room = results.addresses[results.len..];
    const extracted = dns.extractAddresses(
        &response,
        candidate,
        record_type,
        port,
        room,
        &canonical,
    ) catch |err| return switch (err) {
        error.Malformed => unreachable, // its answers were checked
        error.InvalidCname => error.InvalidDnsCnameRecord,
        error.InvalidAddressRecord => switch (record_type) {
            .a => error.InvalidDnsARecord,
            else => error.InvalidDnsAAAARecord,
        },
    };
    if (extracted.addresses_len == 0) return .no_data;
    results.len += extracted.addresses_len;
    if (extracted.canonical_name) |text| results.setCanonical(text);
    return .addresses;
}

test "lookup: localhost names" {
    try std.testing.expect(isLocalhost("localhost"));
    try std.testing.expect(isLocalhost("LocalHost"));
    try std.testing.expect(isLocalhost("db.localhost"));
    try std.testing.expect(!isLocalhost(".localhost"));
    try std.testing.expect(!isLocalhost("mylocalhost"));
    try std.testing.expect(!isLocalhost("localhost.example"));
}
