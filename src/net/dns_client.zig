//! The exchange with name servers: send a set of queries for one name, collect one reply per
//! query, with resolv.conf(5)'s timeout and attempts, over UDP and, for a reply that did not
//! fit a datagram, over TCP. The sends and receives are loop operations
//! (`sched/io_wait.zig`), so a lookup parks only its own fiber, is a cancelation point that
//! cancels the pending operation, and on a thread weft does not run waits in poll(2).
//!
//! Order, as resolv.conf(5) describes it: the servers are asked one after another; each gets
//! `timeout_ns` to answer before the next one is asked; the list is walked `attempts` times.
//! A server that answers a query with SERVFAIL, REFUSED, NOTIMP or FORMERR is done for that
//! query in this round (the next server is asked at once, not after the timeout). A UDP reply
//! is taken only when it comes from the server just asked, carries the query's random id, and
//! repeats the query's question; anything else on the socket is dropped (rejected: taking the
//! first packet with a matching id, which lets any host on the path answer).
//!
//! TCP (RFC 1035 §4.2.2, RFC 7766 §5): a UDP reply with the TC bit set ends the UDP exchange
//! with that server, and every query it has not answered yet is sent to the same server over
//! one TCP connection (`dns_tcp.zig`), within what is left of the same `timeout_ns`. The
//! truncated reply itself is not used (RFC 2181 §9: its records may be an incomplete set).
//! From then on the exchange stays on TCP for the other servers and rounds, since the answer
//! is known not to fit a datagram (glibc does the same); with resolv.conf's `use-vc` it starts
//! there. Over TCP the connection is the server's alone, so a reply that does not parse or
//! answers no query fails that server for the queries still waiting (no waiting for a better
//! packet, as on UDP). A server that closes the connection after some replies (RFC 7766
//! allows it) gets a new connection for the rest; one that refuses, resets, cuts a reply or
//! lets the time run out is done for this round, like a silent UDP server. When no server
//! answered a query, the caller reports it (`lookup.zig`: `error.NameServerFailure`).
//! A TCP reply longer than `config.dns_tcp_message_bytes_max` is cut after its last whole
//! answer record (`dns.keepWholeAnswers`).
const std = @import("std");
const builtin = @import("builtin");
const linux = if (builtin.os.tag == .linux) std.os.linux else struct {};
const posix = std.posix;
const assert = std.debug.assert;
const net = std.Io.net;
const IpAddress = net.IpAddress;
const weft_config = @import("../config.zig");
const dns = @import("dns.zig");
const dns_tcp = @import("dns_tcp.zig");
const socket = @import("socket.zig");
const os = @import("../os/linux.zig");
const io_wait = @import("../sched/io_wait.zig");
const Op = @import("../loop/Completion.zig").Op;

/// Queries of one exchange at most: one per address family (A and AAAA).
pub const queries_max = 2;

comptime {
    assert(weft_config.dns_tcp_message_bytes_max >= dns.udp_message_bytes_max);
    assert(queries_max <= dns_tcp.messages_max);
}

pub const Query = struct {
    record_type: dns.Type,
    id: u16 = undefined,
    message: []const u8 = &.{},
    message_buffer: [dns.query_bytes_max]u8 = undefined,
    /// Replies are received here while the query waits (UDP or TCP alike), so a reply that
    /// answers it is already in place; one that answers the other query is copied there.
    reply_buffer: [weft_config.dns_tcp_message_bytes_max]u8 = undefined,
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

pub const Transport = enum {
    /// UDP, and TCP once a reply came back truncated.
    udp,
    /// TCP for every query (resolv.conf's `use-vc`).
    tcp,
};

pub const Servers = struct {
    addresses: []const IpAddress,
    timeout_ns: u64,
    attempts: u8,
    transport: Transport = .udp,
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
/// `io.random` draws the query ids. Cancelation point. Every socket it opens is closed before
/// it returns, on every path.
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
    var transport = servers.transport;
    const endpoint: ?Endpoint = switch (transport) {
        .udp => try Endpoint.open(servers.addresses),
        .tcp => null,
    };
    defer if (endpoint) |e| os.closeFd(e.fd);
    for (0..servers.attempts) |_| {
        for (servers.addresses) |*server| {
            if (transport == .udp and !endpoint.?.reaches(server)) continue;
            if (restartPending(queries) == 0) return;
            const deadline_ns = os.monotonicNs() +| servers.timeout_ns;
            if (transport == .udp) {
                const outcome = try askOverUdp(endpoint.?, server, name, queries, deadline_ns);
                switch (outcome) {
                    .done => continue,
                    .truncated => transport = .tcp, // this server first, within its time
                }
            }
            try askOverTcp(server, name, queries, deadline_ns);
        }
    }
}

/// Makes the queries a server failed pending again (for the next one); returns how many of
/// the queries are unanswered.
fn restartPending(queries: []Query) usize {
    var pending: usize = 0;
    for (queries) |*query| switch (query.state) {
        .answered => {},
        .pending, .server_failed => {
            query.state = .pending;
            pending += 1;
        },
    };
    return pending;
}

fn countPending(queries: []const Query) usize {
    var pending: usize = 0;
    for (queries) |*query| pending += @intFromBool(query.state == .pending);
    return pending;
}

/// The first query still waiting: replies are received into its buffer.
fn firstPending(queries: []Query) *Query {
    for (queries) |*query| {
        if (query.state == .pending) return query;
    }
    unreachable; // callers receive only while a query waits
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
        const flags = socket.flags_nonblocking; // internal (`socket.zig`)
        return socket.open(domain, .dgram, .udp, flags) catch |err| switch (err) {
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

const UdpOutcome = enum {
    /// Every query is answered or failed by this server, or its time is up.
    done,
    /// A reply came back truncated: ask this server again over TCP.
    truncated,
};

/// Sends every pending query to `server`, then takes its replies until each query is answered
/// or failed by it, a reply is truncated, or `deadline_ns` passed.
fn askOverUdp(
    endpoint: Endpoint,
    server: *const IpAddress,
    name: []const u8,
    queries: []Query,
    deadline_ns: u64,
) Error!UdpOutcome {
    const peer = endpoint.peer(server);
    for (queries) |*query| {
        if (query.state != .pending) continue;
        send(endpoint.fd, &peer, query.message, deadline_ns) catch |err| switch (err) {
            error.Canceled, error.SystemResources => |e| return e,
            error.ServerUnreachable, error.Timeout => return .done, // next server
        };
    }
    // Bounded by the deadline: every round waits for a datagram or ends the exchange.
    while (countPending(queries) > 0) {
        const slot = firstPending(queries);
        const received = receive(endpoint.fd, &slot.reply_buffer, deadline_ns) catch |err|
            switch (err) {
                error.Canceled, error.SystemResources => |e| return e,
                error.Timeout, error.ServerUnreachable => return .done, // next server
            };
        if (!received.from.eql(&peer)) continue;
        switch (fileReply(queries, name, slot, received.len, .udp)) {
            .answered, .failed, .unusable => {},
            .truncated => return .truncated,
        }
    }
    return .done;
}

/// Asks `server` over TCP for every pending query, by `deadline_ns`. Queries it leaves
/// pending were not answered in time; those it failed are `server_failed`.
fn askOverTcp(
    server: *const IpAddress,
    name: []const u8,
    queries: []Query,
    deadline_ns: u64,
) Error!void {
    // Bounded: a connection that settles no query fails the server, so each one but the
    // last settles at least one, and there are at most `queries_max` to settle.
    for (0..queries_max) |_| {
        if (countPending(queries) == 0) return;
        switch (try askOverConnection(server, name, queries, deadline_ns)) {
            .progress => continue, // closed by the server after some replies: reconnect
            .timeout => return,
            .failed => {
                for (queries) |*query| {
                    if (query.state == .pending) query.state = .server_failed;
                }
                return;
            },
        }
    }
    assert(countPending(queries) == 0);
}

const ConnectionOutcome = enum { progress, timeout, failed };

/// One TCP connection: sends the pending queries, files replies until none is pending or the
/// connection ends. The connection is closed before it returns, on every path.
fn askOverConnection(
    server: *const IpAddress,
    name: []const u8,
    queries: []Query,
    deadline_ns: u64,
) Error!ConnectionOutcome {
    var connection = dns_tcp.Connection.open(server, deadline_ns) catch |err|
        return tcpOutcome(err);
    defer connection.close();
    var messages_buffer: [queries_max][]const u8 = undefined;
    var messages_len: usize = 0;
    for (queries) |*query| {
        if (query.state != .pending) continue;
        messages_buffer[messages_len] = query.message;
        messages_len += 1;
    }
    assert(messages_len > 0);
    connection.send(messages_buffer[0..messages_len], deadline_ns) catch |err|
        return tcpOutcome(err);
    var settled: usize = 0;
    // Bounded: every round settles a query or ends the connection.
    while (countPending(queries) > 0) {
        const slot = firstPending(queries);
        const received = connection.receive(&slot.reply_buffer, deadline_ns) catch |err|
            switch (err) {
                error.ConnectionClosed => return if (settled > 0) .progress else .failed,
                else => return tcpOutcome(err),
            };
        var len = received.message.len;
        if (received.cut) {
            len = (dns.keepWholeAnswers(received.message) catch return .failed).len;
        }
        switch (fileReply(queries, name, slot, len, .tcp)) {
            .answered, .failed => settled += 1,
            .unusable => return .failed,
            .truncated => unreachable, // TC is not looked at over TCP
        }
    }
    return .progress;
}

/// What a failed TCP step means for the exchange: errors of this host end it, errors of the
/// server end the server's turn.
fn tcpOutcome(err: dns_tcp.Error) Error!ConnectionOutcome {
    return switch (err) {
        error.Canceled,
        error.SystemResources,
        error.ProcessFdQuotaExceeded,
        error.SystemFdQuotaExceeded,
        error.Unexpected,
        => |e| e,
        error.Timeout => .timeout,
        error.ServerUnreachable,
        error.ConnectionClosed,
        error.MessageCut,
        error.InvalidLength,
        => .failed,
    };
}

const Filing = enum {
    /// The reply answered a query (NOERROR or NXDOMAIN).
    answered,
    /// The server said it cannot answer the query: `server_failed`.
    failed,
    /// A UDP reply to a waiting query with TC set: nothing filed, ask over TCP.
    truncated,
    /// Not a usable reply to any waiting query: garbage, another question or id, a cut
    /// record, an unknown rcode.
    unusable,
};

/// Files the reply of `len` bytes in `slot`'s reply buffer under the waiting query it
/// answers, if any (copying it there when that is not `slot`).
fn fileReply(
    queries: []Query,
    name: []const u8,
    slot: *Query,
    len: usize,
    transport: Transport,
) Filing {
    assert(slot.state == .pending);
    assert(len <= slot.reply_buffer.len);
    const packet = slot.reply_buffer[0..len];
    const response = dns.Response.parse(packet) catch return .unusable;
    const query = for (queries) |*query| {
        if (query.state != .pending) continue;
        if (response.answersQuery(query.id, name, query.record_type)) break query;
    } else return .unusable;
    if (transport == .udp and response.header.truncated) return .truncated;
    response.checkAnswers() catch return .unusable; // cut or garbled
    switch (response.header.rcode) {
        .no_error, .name_error => {
            if (query != slot) @memcpy(query.reply_buffer[0..len], packet);
            query.state = .{ .answered = len };
            return .answered;
        },
        // The server cannot answer: do not wait for it (RFC 1035 §4.1.1 rcodes 1, 2, 4, 5).
        .format_error, .server_failure, .not_implemented, .refused => {
            query.state = .server_failed;
            return .failed;
        },
        _ => return .unusable, // unknown: over UDP, keep waiting for a usable reply
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
    const result = try socket.receiveOnLoop(fd, buffer, &storage, deadline_ns);
    if (result >= 0) {
        // A datagram longer than the buffer is cut (the kernel drops the rest); the parser
        // then sees a short packet and drops it.
        const len: usize = @intCast(result);
        return .{ .len = len, .from = socket.ipFromPosix(&storage) };
    }
    return switch (@as(os.E, @enumFromInt(-result))) {
        .NOBUFS, .NOMEM => error.SystemResources,
        // An ICMP error queued for this socket: the server is not there.
        else => error.ServerUnreachable,
    };
}
