//! The UDP exchange with name servers: send a set of queries for one name, collect one reply
//! per query, with resolv.conf(5)'s timeout and attempts. The sends and receives are loop
//! operations (`sched/io_wait.zig`), so a lookup parks only its own fiber, is a cancelation
//! point that cancels the pending receive, and on a thread weft does not run waits in poll(2).
//!
//! Order, as resolv.conf(5) describes it: the servers are asked one after another; each gets
//! `timeout_ns` to answer before the next one is asked; the list is walked `attempts` times.
//! A server that answers a query with SERVFAIL, REFUSED, NOTIMP or FORMERR is done for that
//! query in this round (the next server is asked at once, not after the timeout). A reply is
//! taken only when it comes from the server just asked, carries the query's random id, and
//! repeats the query's question; anything else on the socket is dropped (rejected: taking the
//! first packet with a matching id, which lets any host on the path answer).
//!
//! Not done: TCP fallback for a truncated (TC) reply; the records that did fit are used.
const std = @import("std");
const linux = std.os.linux;
const posix = std.posix;
const assert = std.debug.assert;
const net = std.Io.net;
const IpAddress = net.IpAddress;
const dns = @import("dns.zig");
const socket = @import("socket.zig");
const os = @import("../os/linux.zig");
const io_wait = @import("../sched/io_wait.zig");
const Op = @import("../loop/Completion.zig").Op;

/// Queries of one exchange at most: one per address family (A and AAAA).
pub const queries_max = 2;

pub const Query = struct {
    record_type: dns.Type,
    id: u16 = undefined,
    message: []const u8 = &.{},
    message_buffer: [dns.query_bytes_max]u8 = undefined,
    reply_buffer: [dns.udp_message_bytes_max]u8 = undefined,
    state: State = .pending,

    pub const State = union(enum) {
        pending,
        /// The current server gave up on this query; the next one will be asked.
        server_failed,
        /// A reply with NOERROR or NXDOMAIN, in `reply_buffer`.
        answered: usize,
    };

    /// The reply, once answered.
    pub fn reply(query: *const Query) ?[]const u8 {
        return switch (query.state) {
            .answered => |len| query.reply_buffer[0..len],
            .pending, .server_failed => null,
        };
    }
};

pub const Servers = struct {
    addresses: []const IpAddress,
    timeout_ns: u64,
    attempts: u8,
};

pub const Error = error{
    /// The name cannot be put in a query (an empty label, too long).
    InvalidName,
    Canceled,
    SystemResources,
    ProcessFdQuotaExceeded,
    SystemFdQuotaExceeded,
    /// No name server could be reached with a socket of its family.
    AddressFamilyUnsupported,
    Unexpected,
};

/// Asks `servers` for `name`, once per query in `queries` (whose `record_type` the caller set),
/// and leaves each query `answered` or not (when every server timed out or failed it).
/// `io.random` draws the query ids. Cancelation point.
pub fn exchange(io: std.Io, servers: Servers, name: []const u8, queries: []Query) Error!void {
    assert(queries.len > 0 and queries.len <= queries_max);
    assert(servers.addresses.len > 0 and servers.attempts > 0);
    for (queries) |*query| {
        var id_bytes: [2]u8 = undefined;
        io.random(&id_bytes);
        query.id = std.mem.readInt(u16, &id_bytes, .native);
        const buffer = &query.message_buffer;
        query.message = try dns.encodeQuery(buffer, query.id, name, query.record_type);
        query.state = .pending;
    }
    const endpoint = try Endpoint.open(servers.addresses);
    defer os.closeFd(endpoint.fd);
    for (0..servers.attempts) |_| {
        for (servers.addresses) |*server| {
            if (!endpoint.reaches(server)) continue;
            var pending: usize = 0;
            for (queries) |*query| switch (query.state) {
                .answered => {},
                .pending, .server_failed => {
                    query.state = .pending;
                    pending += 1;
                },
            };
            if (pending == 0) return;
            try askServer(endpoint, server, name, queries, servers.timeout_ns);
        }
    }
}

/// One UDP socket for the whole exchange. With any IPv6 server it is an IPv6 socket that also
/// reaches IPv4 servers through their IPv4-mapped addresses (rejected: a socket per family,
/// which would need two receives in flight at once).
const Endpoint = struct {
    fd: socket.fd_t,
    ip6: bool,

    fn open(addresses: []const IpAddress) Error!Endpoint {
        const any_ip6 = for (addresses) |a| {
            if (a == .ip6) break true;
        } else false;
        if (any_ip6) {
            if (openSocket(linux.AF.INET6)) |fd| {
                errdefer os.closeFd(fd);
                // Dual stack even where net.ipv6.bindv6only makes IPv6-only the default.
                socket.setOption(fd, linux.IPPROTO.IPV6, linux.IPV6.V6ONLY, 0) catch {};
                return .{ .fd = fd, .ip6 = true };
            } else |err| switch (err) {
                error.AddressFamilyUnsupported => {}, // no IPv6 here: IPv4 servers only
                else => |e| return e,
            }
        }
        for (addresses) |a| {
            if (a == .ip4) return .{ .fd = try openSocket(linux.AF.INET), .ip6 = false };
        }
        return error.AddressFamilyUnsupported;
    }

    fn openSocket(domain: u32) Error!socket.fd_t {
        return socket.open(domain, .dgram, .udp) catch |err| switch (err) {
            error.ProtocolUnsupportedBySystem,
            error.ProtocolUnsupportedByAddressFamily,
            error.SocketModeUnsupported,
            => error.AddressFamilyUnsupported,
            else => |e| e,
        };
    }

    fn reaches(endpoint: Endpoint, server: *const IpAddress) bool {
        return endpoint.ip6 or server.* == .ip4;
    }

    /// The server as this socket sees it (IPv4-mapped on an IPv6 socket).
    fn peer(endpoint: Endpoint, server: *const IpAddress) IpAddress {
        if (!endpoint.ip6) return server.*;
        return .{ .ip6 = .fromAny(server.*) };
    }
};

/// Sends every pending query to `server`, then takes its replies until each query is answered
/// or failed by it, or `timeout_ns` passed.
fn askServer(
    endpoint: Endpoint,
    server: *const IpAddress,
    name: []const u8,
    queries: []Query,
    timeout_ns: u64,
) Error!void {
    const peer = endpoint.peer(server);
    const deadline_ns = os.monotonicNs() +| timeout_ns;
    for (queries) |*query| {
        if (query.state != .pending) continue;
        send(endpoint.fd, &peer, query.message, deadline_ns) catch |err| switch (err) {
            error.Canceled, error.SystemResources => |e| return e,
            error.ServerUnreachable, error.Timeout => return, // next server
        };
    }
    var datagram: [dns.udp_message_bytes_max]u8 = undefined;
    while (true) {
        var pending: usize = 0;
        for (queries) |*query| pending += @intFromBool(query.state == .pending);
        if (pending == 0) return;
        const received = receive(endpoint.fd, &datagram, deadline_ns) catch |err| switch (err) {
            error.Canceled, error.SystemResources => |e| return e,
            error.Timeout, error.ServerUnreachable => return, // next server
        };
        if (!received.from.eql(&peer)) continue;
        accept(queries, name, datagram[0..received.len]);
    }
}

/// Files `packet` under the query it answers, if any.
fn accept(queries: []Query, name: []const u8, packet: []const u8) void {
    const response = dns.Response.parse(packet) catch return;
    response.checkAnswers() catch return; // cut or garbled: wait for a better one
    for (queries) |*query| {
        if (query.state != .pending) continue;
        if (!response.answersQuery(query.id, name, query.record_type)) continue;
        switch (response.header.rcode) {
            .no_error, .name_error => {
                @memcpy(query.reply_buffer[0..packet.len], packet);
                query.state = .{ .answered = packet.len };
            },
            // The server cannot answer: do not wait for it (RFC 1035 §4.1.1 rcodes 1, 2, 4, 5).
            .format_error, .server_failure, .not_implemented, .refused => {
                query.state = .server_failed;
            },
            _ => {}, // unknown: keep waiting for a usable reply
        }
        return;
    }
}

const ExchangeIoError = error{ Canceled, SystemResources, Timeout, ServerUnreachable };

fn send(
    fd: socket.fd_t,
    peer: *const IpAddress,
    message: []const u8,
    deadline_ns: u64,
) ExchangeIoError!void {
    var storage: socket.IpStorage = undefined;
    const iovec: posix.iovec_const = .{ .base = message.ptr, .len = message.len };
    const msg: linux.msghdr_const = .{
        .name = &storage.any,
        .namelen = socket.ipToPosix(peer, &storage),
        .iov = (&iovec)[0..1],
        .iovlen = 1,
        .control = null,
        .controllen = 0,
        .flags = 0,
    };
    const op: Op = .{ .sendmsg = .{ .fd = fd, .msg = &msg, .flags = linux.MSG.NOSIGNAL } };
    const result = try io_wait.perform(op, deadline_ns);
    if (result >= 0) return;
    return switch (@as(os.E, @enumFromInt(-result))) {
        .NOBUFS, .NOMEM => error.SystemResources,
        // No route, the interface down, a refusal reported for an earlier datagram, a
        // firewall, an address this socket cannot use: another server may still be asked.
        else => error.ServerUnreachable,
    };
}

fn receive(
    fd: socket.fd_t,
    buffer: []u8,
    deadline_ns: u64,
) ExchangeIoError!struct { len: usize, from: IpAddress } {
    var storage: socket.IpStorage = undefined;
    var iovec: posix.iovec = .{ .base = buffer.ptr, .len = buffer.len };
    var msg: linux.msghdr = .{
        .name = &storage.any,
        .namelen = @sizeOf(socket.IpStorage),
        .iov = (&iovec)[0..1],
        .iovlen = 1,
        .control = null,
        .controllen = 0,
        .flags = 0,
    };
    const op: Op = .{ .recvmsg = .{ .fd = fd, .msg = &msg, .flags = 0 } };
    const result = try io_wait.perform(op, deadline_ns);
    if (result >= 0) {
        // A datagram longer than the buffer is cut (MSG_TRUNC in msg.flags); the parser
        // then sees a short packet and drops it.
        const len = @min(@as(usize, @intCast(result)), buffer.len);
        return .{ .len = len, .from = socket.ipFromPosix(&storage) };
    }
    return switch (@as(os.E, @enumFromInt(-result))) {
        .NOBUFS, .NOMEM => error.SystemResources,
        // An ICMP error queued for this socket: the server is not there.
        else => error.ServerUnreachable,
    };
}
