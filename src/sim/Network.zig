//! weft.Sim's network: TCP and Unix streams, UDP datagrams and name lookups, in memory, on
//! the simulation's virtual time.
//!
//! Hosts: every task lives on a host, an IP address (127.0.0.1 unless `Sim.setHost` says
//! otherwise; a task starts on its spawner's host), and a socket belongs to its creator's host.
//! Links between two hosts carry `Options.latency_ns` plus a seeded jitter up to `jitter_ns`;
//! `Sim.partition(io, a, b)` cuts the link between two hosts and `Sim.heal(io)` mends every
//! cut. Any address may be bound or listened on, loopback or not: the simulation has no
//! interfaces to check against.
//!
//! Streams (TCP, Unix, socket pairs): each direction is a queue of segments, each delivered
//! at its send time plus the link's delay and never before the one ahead of it, so bytes
//! arrive in order and once. A reader sees a segment once its time has come and the link is
//! up: a segment sent or in flight across a cut waits for the heal, as TCP retransmits. A
//! writer waits while the peer holds `stream_buffer_bytes` unread (backpressure); `shutdown`
//! of the send side and `close` queue an end of stream behind the data; writing to a closed
//! peer fails with `ConnectionResetByPeer`. A connect waits a round trip, then finds the
//! listener at the address (or at the wildcard address of its family) and queues the new
//! connection on its backlog; with no listener it is refused, with a full backlog or a cut
//! link it waits until its timeout (`connect_timeout_ns` without one), as SYNs are retried.
//!
//! Datagrams (UDP): each message is lost with `loss_percent` chance and duplicated with
//! `duplicate_percent` chance, both drawn from the seed; jitter reorders them; a cut link
//! drops them. Messages to an address nobody bound vanish.
//!
//! Lookups answer from `Options.hosts` (and numeric addresses and "localhost"); any other
//! name is `UnknownHostName`.
//!
//! Handles count up from `handle_base`, far above any real descriptor, and are never reused,
//! so a stale handle never reaches another socket. A handle the network does not know (a
//! real descriptor, or one closed already) is a bug in the program: it panics, naming it.
const Network = @This();

const std = @import("std");
const assert = std.debug.assert;
const Io = std.Io;
const net = Io.net;
const Allocator = std.mem.Allocator;
const State = @import("State.zig");
const handles = @import("handles.zig");

pub const Handle = net.Socket.Handle;
const handle_base: u32 = 1 << 28;

/// How a link between two hosts behaves; `Options.link` for every link, `Sim.setLink` for one
/// pair of hosts.
pub const Link = struct {
    /// One-way delay.
    latency_ns: u64 = 100 * std.time.ns_per_us,
    /// A seeded extra delay of up to this much, per segment or datagram.
    jitter_ns: u64 = 0,
    /// Datagrams only: the chance that one is lost, or arrives twice.
    loss_percent: u7 = 0,
    duplicate_percent: u7 = 0,
    /// Streams only: the chance that a write resets its connection (both ends then see
    /// `ConnectionResetByPeer`, as after a middlebox's RST).
    reset_percent: u7 = 0,

    pub fn valid(link: Link) bool {
        return link.loss_percent <= 100 and link.duplicate_percent <= 100 and
            link.reset_percent <= 100;
    }
};

pub const Options = struct {
    /// Every link not given one of its own (`Sim.setLink`).
    link: Link = .{},
    /// Unread bytes a stream's receiver holds before its sender waits.
    stream_buffer_bytes: usize = 64 * 1024,
    /// How long a connect waits for a cut link or a full backlog without a timeout of its own
    /// (Linux's SYN retries give up after about 127 s).
    connect_timeout_ns: u64 = 127 * std.time.ns_per_s,
    /// Names `netLookup` answers, beside numeric addresses and "localhost".
    hosts: []const HostEntry = &.{},
};

pub const HostEntry = struct { name: []const u8, address: net.IpAddress };

/// An IP address without its port: a host.
pub const Host = struct {
    family: net.IpAddress.Family,
    bytes: [16]u8,

    pub const loopback: Host = of(.{ .ip4 = .loopback(0) });

    pub fn of(address: net.IpAddress) Host {
        var host: Host = .{ .family = address, .bytes = @splat(0) };
        switch (address) {
            .ip4 => |ip4| @memcpy(host.bytes[0..4], &ip4.bytes),
            .ip6 => |ip6| host.bytes = ip6.bytes,
        }
        return host;
    }

    /// The host's address with `port`.
    pub fn at(host: Host, port: u16) net.IpAddress {
        return switch (host.family) {
            .ip4 => .{ .ip4 = .{ .bytes = host.bytes[0..4].*, .port = port } },
            .ip6 => .{ .ip6 = .{ .bytes = host.bytes, .port = port } },
        };
    }

    fn eql(a: Host, b: Host) bool {
        return a.family == b.family and std.mem.eql(u8, &a.bytes, &b.bytes);
    }
};

const Segment = struct {
    /// Owned; `consumed` of them already read.
    bytes: []u8,
    consumed: usize = 0,
    deliver_ns: u64,
    /// The end of the stream, behind every byte before it.
    end: bool = false,
};

const Datagram = struct {
    from: net.IpAddress,
    bytes: []u8,
    deliver_ns: u64,
};

const Kind = enum { listener, stream, datagram };

pub const Socket = struct {
    handle: Handle,
    kind: Kind,
    host: Host,
    /// The address it is bound to (the listener's, or the local end of a stream).
    address: net.IpAddress,
    /// Unix sockets: the path listened on or connected to (owned by listeners).
    unix_path: ?[]u8 = null,
    /// Tasks blocked on this socket; each one re-checks when woken.
    waiters: std.ArrayList(*State.Task) = .empty,
    // Listeners.
    backlog: std.ArrayList(*Socket) = .empty,
    backlog_max: usize = 0,
    /// Cleared by a shutdown or close.
    listening: bool = true,
    // Streams.
    peer: ?*Socket = null,
    inbound: std.ArrayList(Segment) = .empty,
    /// Bytes of `inbound` not yet read, delivered or not.
    inbound_bytes: usize = 0,
    /// The last delivery time queued, so that segments never overtake each other.
    last_deliver_ns: u64 = 0,
    send_shut: bool = false,
    receive_shut: bool = false,
    /// The peer closed with unread data here, or the listener closed before the accept.
    reset: bool = false,
    /// Closed: its handle is gone, and a task still blocked on it sees this when it wakes.
    closed: bool = false,
    // Datagrams.
    datagrams: std.ArrayList(Datagram) = .empty,
};

gpa: Allocator,
options: Options,
/// By handle - handle_base, closed ones included (freed by `deinit`): a task blocked on a
/// socket that another task closes still looks at it when it wakes, and a batch finds it by
/// handle.
sockets: std.ArrayList(*Socket) = .empty,
cuts: std.ArrayList([2]Host) = .empty,
/// Links given their own behaviour (`setLink`), by pair of hosts.
links: std.ArrayList(struct { a: Host, b: Host, link: Link }) = .empty,
/// Tasks waiting to connect, woken by a heal or a listener's accept.
connect_waiters: std.ArrayList(*State.Task) = .empty,
port_next: u16 = 49152,

pub fn init(gpa: Allocator, options: Options) Network {
    return .{ .gpa = gpa, .options = options };
}

pub fn deinit(network: *Network) void {
    for (network.sockets.items) |socket| network.free(socket);
    network.sockets.deinit(network.gpa);
    network.cuts.deinit(network.gpa);
    network.links.deinit(network.gpa);
    network.connect_waiters.deinit(network.gpa);
    network.* = undefined;
}

fn stateOf(network: *Network) *State {
    return @fieldParentPtr("network", network);
}

fn free(network: *Network, socket: *Socket) void {
    network.freeBuffers(socket);
    socket.backlog.deinit(network.gpa);
    socket.waiters.deinit(network.gpa);
    if (socket.unix_path) |path| network.gpa.free(path);
    network.gpa.destroy(socket);
}

fn freeBuffers(network: *Network, socket: *Socket) void {
    const gpa = network.gpa;
    for (socket.inbound.items) |segment| gpa.free(segment.bytes);
    socket.inbound.clearAndFree(gpa);
    socket.inbound_bytes = 0;
    for (socket.datagrams.items) |datagram| gpa.free(datagram.bytes);
    socket.datagrams.clearAndFree(gpa);
}

/// The open socket behind `handle`; panics for any other handle (see the file doc).
pub fn get(network: *Network, handle: Handle) *Socket {
    const socket = network.find(handle) orelse unknown(handle);
    if (socket.closed) unknown(handle);
    return socket;
}

/// The simulated socket behind `handle`, closed or not, or null for a real descriptor (below
/// the handles the network gives out).
pub fn find(network: *Network, handle: Handle) ?*Socket {
    const value = handles.number(handle) orelse return null;
    if (value < handle_base) return null;
    const index = value - handle_base;
    if (index >= network.sockets.items.len) unknown(handle);
    return network.sockets.items[index];
}

/// What a task blocked on `socket` waits for, in its report.
fn socketWait(socket: *const Socket) State.Wait {
    return .{ .socket = handles.number(socket.handle).? };
}

fn unknown(handle: Handle) noreturn {
    std.debug.panic("weft.Sim: socket handle {any} is not an open simulated socket (closed " ++
        "already, or a real descriptor)", .{handle});
}

fn create(network: *Network, kind: Kind, address: net.IpAddress) error{OutOfMemory}!*Socket {
    const state = network.stateOf();
    try network.sockets.ensureUnusedCapacity(network.gpa, 1);
    const socket = try network.gpa.create(Socket);
    socket.* = .{
        .handle = handles.fromNumber(handle_base + @as(u32, @intCast(network.sockets.items.len))),
        .kind = kind,
        .host = state.currentTask().host,
        .address = address,
    };
    network.sockets.appendAssumeCapacity(socket);
    return socket;
}

const ephemeral_first: u16 = 49152;

/// The next ephemeral port that no open socket of `kind` on `host` holds (as Linux, from
/// 49152 up, wrapping); null when all 16,384 are taken.
fn ephemeralPort(network: *Network, kind: Kind, host: Host) ?u16 {
    const ports = std.math.maxInt(u16) - ephemeral_first + 1;
    // Bounded by the range.
    for (0..ports) |_| {
        const port = network.port_next;
        network.port_next = if (port == std.math.maxInt(u16)) ephemeral_first else port + 1;
        if (!network.portHeld(kind, host, port)) return port;
    }
    return null;
}

fn portHeld(network: *Network, kind: Kind, host: Host, port: u16) bool {
    for (network.sockets.items) |socket| {
        if (socket.closed or socket.kind != kind or socket.unix_path != null) continue;
        if (socket.host.eql(host) and portOf(socket.address) == port) return true;
    }
    return false;
}

fn withPort(address: net.IpAddress, port: u16) net.IpAddress {
    var copy = address;
    switch (copy) {
        inline else => |*ip| ip.port = port,
    }
    return copy;
}

fn portOf(address: net.IpAddress) u16 {
    return switch (address) {
        inline else => |ip| ip.port,
    };
}

fn isUnspecified(address: net.IpAddress) bool {
    return switch (address) {
        .ip4 => |ip4| std.mem.allEqual(u8, &ip4.bytes, 0),
        .ip6 => |ip6| std.mem.allEqual(u8, &ip6.bytes, 0),
    };
}

fn isLoopback(address: net.IpAddress) bool {
    return switch (address) {
        .ip4 => |ip4| ip4.bytes[0] == 127,
        .ip6 => |ip6| std.mem.eql(u8, &ip6.bytes, &net.Ip6Address.loopback(0).bytes),
    };
}

/// Whether `socket` (a listener, or a bound datagram socket) receives what a task on `from`
/// sends to `destination`. Addresses belong to hosts: a loopback address is its own host's
/// (reached from that host only), a wildcard address stands for its host's own address and
/// loopback, any other address is reached from anywhere.
fn receivesFor(socket: *const Socket, from: Host, destination: net.IpAddress) bool {
    const bound = socket.address;
    if (@as(net.IpAddress.Family, bound) != @as(net.IpAddress.Family, destination)) return false;
    if (portOf(bound) != portOf(destination)) return false;
    if (isLoopback(destination)) {
        if (!from.eql(socket.host)) return false;
        return isUnspecified(bound) or Host.of(bound).eql(Host.of(destination));
    }
    if (isUnspecified(bound)) return socket.host.eql(Host.of(destination));
    return Host.of(bound).eql(Host.of(destination));
}

fn findBound(network: *Network, kind: Kind, from: Host, destination: net.IpAddress) ?*Socket {
    for (network.sockets.items) |socket| {
        if (socket.closed or socket.kind != kind or socket.unix_path != null) continue;
        if (kind == .listener and !socket.listening) continue;
        if (receivesFor(socket, from, destination)) return socket;
    }
    return null;
}

fn findUnix(network: *Network, path: []const u8) ?*Socket {
    for (network.sockets.items) |socket| {
        if (socket.closed or socket.kind != .listener or !socket.listening) continue;
        if (std.mem.eql(u8, socket.unix_path orelse continue, path)) return socket;
    }
    return null;
}

/// Whether binding `address` (of `kind`) on `host` clashes with an open socket: the same port
/// on the same host, where either address is the wildcard or both are the same.
fn portInUse(network: *Network, kind: Kind, host: Host, address: net.IpAddress) bool {
    for (network.sockets.items) |socket| {
        if (socket.closed or socket.kind != kind or socket.unix_path != null) continue;
        if (!socket.host.eql(host) or portOf(socket.address) != portOf(address)) continue;
        if (isUnspecified(socket.address) or isUnspecified(address)) return true;
        if (Host.of(socket.address).eql(Host.of(address))) return true;
    }
    return false;
}

// ---------------------------------------------------------------------------------------------
// Links.

pub fn linkUp(network: *const Network, a: Host, b: Host) bool {
    for (network.cuts.items) |cut| {
        if ((cut[0].eql(a) and cut[1].eql(b)) or (cut[0].eql(b) and cut[1].eql(a))) return false;
    }
    return true;
}

pub fn partition(network: *Network, a: Host, b: Host) error{OutOfMemory}!void {
    if (!network.linkUp(a, b)) return;
    try network.cuts.append(network.gpa, .{ a, b });
}

/// Mends every cut and wakes every task waiting on the network to look again.
pub fn heal(network: *Network) void {
    network.cuts.clearRetainingCapacity();
    for (network.sockets.items) |socket| network.wakeAll(socket);
    network.wakeConnectors();
}

/// Gives the link between hosts `a` and `b` its own behaviour (both ways).
pub fn setLink(network: *Network, a: Host, b: Host, link: Link) error{OutOfMemory}!void {
    for (network.links.items) |*entry| {
        if ((entry.a.eql(a) and entry.b.eql(b)) or (entry.a.eql(b) and entry.b.eql(a))) {
            entry.link = link;
            return;
        }
    }
    try network.links.append(network.gpa, .{ .a = a, .b = b, .link = link });
}

/// How the link between hosts `a` and `b` behaves.
fn linkOf(network: *const Network, a: Host, b: Host) Link {
    for (network.links.items) |entry| {
        if ((entry.a.eql(a) and entry.b.eql(b)) or (entry.a.eql(b) and entry.b.eql(a))) {
            return entry.link;
        }
    }
    return network.options.link;
}

/// A one-way delay from `a` to `b`: the link's latency plus a seeded jitter.
fn delayNs(network: *Network, a: Host, b: Host) u64 {
    const state = network.stateOf();
    const link = network.linkOf(a, b);
    const jitter = link.jitter_ns;
    const extra = if (jitter == 0) 0 else state.schedule_prng.random().uintAtMost(u64, jitter);
    return link.latency_ns +| extra;
}

fn chance(network: *Network, percent: u7) bool {
    if (percent == 0) return false;
    return network.stateOf().schedule_prng.random().uintLessThan(u8, 100) < percent;
}

// ---------------------------------------------------------------------------------------------
// Waiting.

fn wakeAll(network: *Network, socket: *Socket) void {
    const state = network.stateOf();
    for (socket.waiters.items) |task| _ = state.wakeTask(task, .woken);
    socket.waiters.clearRetainingCapacity();
}

fn wakeConnectors(network: *Network) void {
    const state = network.stateOf();
    for (network.connect_waiters.items) |task| _ = state.wakeTask(task, .woken);
    network.connect_waiters.clearRetainingCapacity();
}

fn removeWaiter(list: *std.ArrayList(*State.Task), task: *State.Task) void {
    for (list.items, 0..) |waiter, index| {
        if (waiter == task) {
            _ = list.orderedRemove(index);
            return;
        }
    }
}

/// Blocks the running task on `list` until a wake, the deadline or (if `cancelable`) a
/// cancel request.
fn waitOn(
    network: *Network,
    list: *std.ArrayList(*State.Task),
    wait: State.Wait,
    cancelable: bool,
    deadline_ns: ?u64,
) error{OutOfMemory}!State.Wake {
    const state = network.stateOf();
    const task = state.currentTask();
    try list.append(network.gpa, task);
    const wake = state.park(wait, cancelable, deadline_ns);
    removeWaiter(list, task);
    return wake;
}

// ---------------------------------------------------------------------------------------------
// Streams.

pub const ListenError = error{ AddressInUse, SystemResources };

/// `address` with an ephemeral port if it asks for port 0; `AddressInUse` if the port is
/// taken on the running task's host.
fn bindable(
    network: *Network,
    kind: Kind,
    address: net.IpAddress,
) error{AddressInUse}!net.IpAddress {
    const host = network.stateOf().currentTask().host;
    if (portOf(address) == 0) {
        const port = network.ephemeralPort(kind, host) orelse return error.AddressInUse;
        return withPort(address, port);
    }
    if (network.portInUse(kind, host, address)) return error.AddressInUse;
    return address;
}

pub fn listen(
    network: *Network,
    address: net.IpAddress,
    backlog_max: usize,
) ListenError!*Socket {
    const bound = try network.bindable(.listener, address);
    const socket = network.create(.listener, bound) catch return error.SystemResources;
    socket.backlog_max = @max(backlog_max, 1);
    return socket;
}

pub fn listenUnix(network: *Network, path: []const u8, backlog_max: usize) ListenError!*Socket {
    if (network.findUnix(path) != null) return error.AddressInUse;
    const owned = network.gpa.dupe(u8, path) catch return error.SystemResources;
    errdefer network.gpa.free(owned);
    const socket = network.create(.listener, .{ .ip4 = .loopback(0) }) catch
        return error.SystemResources;
    socket.unix_path = owned;
    socket.backlog_max = @max(backlog_max, 1);
    return socket;
}

pub const ConnectError = error{
    ConnectionRefused,
    Timeout,
    SystemResources,
} || Io.Cancelable;

/// A stream to `destination` (an IP address, or a Unix path when `unix_path` is set), after
/// a round trip; `deadline_ns` null: `connect_timeout_ns` from now. See the file doc for
/// refusals and waits.
pub fn connect(
    network: *Network,
    destination: net.IpAddress,
    unix_path: ?[]const u8,
    deadline_ns: ?u64,
) ConnectError!*Socket {
    const state = network.stateOf();
    const me = state.currentTask();
    const deadline = deadline_ns orelse state.now_ns +| network.options.connect_timeout_ns;
    // The SYN's way there, then the answer's way back.
    // The host the SYN goes to: a loopback or Unix destination is on the caller's own.
    const there: Host = if (unix_path != null or isLoopback(destination))
        me.host
    else
        Host.of(destination);
    try state.sleepUntil(state.now_ns +| network.delayNs(me.host, there));
    // Bounded by the deadline: each turn waits for a heal or room in the backlog.
    while (true) {
        const found = network.findListener(me.host, destination, unix_path) orelse
            return error.ConnectionRefused;
        if (network.linkUp(me.host, found.host) and found.backlog.items.len < found.backlog_max) {
            try state.sleepUntil(state.now_ns +| network.delayNs(me.host, found.host));
            // The listener may have closed during the answer's way back.
            if (network.findListener(me.host, destination, unix_path) != found) {
                return error.ConnectionRefused;
            }
            return network.establish(found, destination);
        }
        const wait = socketWait(found);
        const wake = network.waitOn(&network.connect_waiters, wait, true, deadline) catch
            return error.SystemResources;
        switch (wake) {
            .woken => {},
            .timeout => return error.Timeout,
            .canceled => {
                try state.checkCancel();
                return error.Canceled;
            },
        }
    }
}

fn findListener(
    network: *Network,
    from: Host,
    destination: net.IpAddress,
    unix_path: ?[]const u8,
) ?*Socket {
    if (unix_path) |path| return network.findUnix(path);
    return network.findBound(.listener, from, destination);
}

fn establish(
    network: *Network,
    listener: *Socket,
    destination: net.IpAddress,
) ConnectError!*Socket {
    const state = network.stateOf();
    listener.backlog.ensureUnusedCapacity(network.gpa, 1) catch return error.SystemResources;
    const local_host = state.currentTask().host;
    const port = network.ephemeralPort(.stream, local_host) orelse return error.SystemResources;
    const local = local_host.at(port);
    const client = network.create(.stream, local) catch return error.SystemResources;
    const server = network.create(.stream, destination) catch {
        network.discard(client);
        return error.SystemResources;
    };
    server.host = listener.host;
    client.peer = server;
    server.peer = client;
    if (listener.unix_path) |path| {
        client.unix_path = network.gpa.dupe(u8, path) catch null;
    }
    listener.backlog.appendAssumeCapacity(server);
    network.wakeAll(listener);
    return client;
}

/// A connected pair on the running task's host.
pub fn pair(network: *Network) error{SystemResources}![2]*Socket {
    const a = network.create(.stream, .{ .ip4 = .loopback(0) }) catch return error.SystemResources;
    const b = network.create(.stream, .{ .ip4 = .loopback(0) }) catch {
        network.discard(a);
        return error.SystemResources;
    };
    a.peer = b;
    b.peer = a;
    return .{ a, b };
}

pub const AcceptError = error{ SocketNotListening, SystemResources } || Io.Cancelable;

pub fn accept(network: *Network, listener: *Socket) AcceptError!*Socket {
    if (listener.kind != .listener or !listener.listening) return error.SocketNotListening;
    const state = network.stateOf();
    // Bounded by the connections that arrive; a cancelation point while none waits.
    while (listener.backlog.items.len == 0) {
        const wait = socketWait(listener);
        const wake = network.waitOn(&listener.waiters, wait, true, null) catch
            return error.SystemResources;
        if (wake == .canceled) {
            try state.checkCancel();
            return error.Canceled;
        }
        // Shut down or closed meanwhile, by another task: how std lets a close stop an accept.
        if (!listener.listening) return error.SocketNotListening;
    }
    const server = listener.backlog.orderedRemove(0);
    network.wakeConnectors(); // room in the backlog
    return server;
}

pub const WriteError = error{ ConnectionResetByPeer, SystemResources, SocketUnconnected };

/// Queues up to the peer's free buffer of `data` (the header first); waits (not cancelably,
/// as std's stream writes are not cancelation points) while the peer's buffer is full.
pub fn write(network: *Network, socket: *Socket, parts: []const []const u8) WriteError!usize {
    if (socket.kind != .stream) return error.SocketUnconnected;
    var total: usize = 0;
    for (parts) |part| total += part.len;
    if (total == 0) return 0;
    // Bounded by the peer's reads: each turn waits for room.
    while (true) {
        if (socket.closed) return error.SocketUnconnected;
        if (socket.send_shut) return error.ConnectionResetByPeer;
        const peer = socket.peer orelse return error.ConnectionResetByPeer;
        if (peer.reset) return error.ConnectionResetByPeer;
        if (peer.receive_shut) return total; // dropped, as Linux drops it (`shutdown`)
        if (network.chance(network.linkOf(socket.host, peer.host).reset_percent)) {
            network.resetConnection(socket, peer);
            return error.ConnectionResetByPeer;
        }
        const room = network.options.stream_buffer_bytes -| peer.inbound_bytes;
        if (room > 0) {
            const length = @min(room, total);
            const bytes = network.gpa.alloc(u8, length) catch return error.SystemResources;
            var filled: usize = 0;
            for (parts) |part| {
                const chunk = @min(part.len, length - filled);
                @memcpy(bytes[filled..][0..chunk], part[0..chunk]);
                filled += chunk;
                if (filled == length) break;
            }
            network.queueSegment(socket, peer, bytes, false) catch {
                network.gpa.free(bytes);
                return error.SystemResources;
            };
            return length;
        }
        _ = network.waitOn(&socket.waiters, socketWait(socket), false, null) catch
            return error.SystemResources;
    }
}

fn queueSegment(
    network: *Network,
    from: *Socket,
    to: *Socket,
    bytes: []u8,
    end: bool,
) error{OutOfMemory}!void {
    const state = network.stateOf();
    const delay_ns = network.delayNs(from.host, to.host);
    const deliver_ns = @max(state.now_ns +| delay_ns, to.last_deliver_ns);
    try to.inbound.append(network.gpa, .{ .bytes = bytes, .deliver_ns = deliver_ns, .end = end });
    to.last_deliver_ns = deliver_ns;
    to.inbound_bytes += bytes.len;
    state.traceEvent(.delivery, handles.number(to.handle).?, deliver_ns);
    network.wakeAll(to);
}

pub const ReadError = error{ ConnectionResetByPeer, SocketUnconnected, SystemResources } ||
    Io.Cancelable;

/// Reads what has arrived into `buffers`, waiting (cancelably) until something has; 0 at the
/// end of the stream.
pub fn read(network: *Network, socket: *Socket, buffers: []const []u8) ReadError!usize {
    const state = network.stateOf();
    if (socket.kind != .stream) return error.SocketUnconnected;
    // Bounded by the segments that arrive.
    while (true) {
        if (socket.closed) return error.SocketUnconnected;
        if (socket.reset) return error.ConnectionResetByPeer;
        if (socket.receive_shut) return 0;
        const up = if (socket.peer) |peer| network.linkUp(socket.host, peer.host) else true;
        var next_ns: ?u64 = null;
        if (socket.inbound.items.len > 0) {
            const first = socket.inbound.items[0];
            if (up and first.deliver_ns <= state.now_ns) {
                if (first.end and first.bytes.len == first.consumed) return 0;
                return network.take(socket, buffers);
            }
            if (up) next_ns = first.deliver_ns;
        } else if (socket.peer == null) {
            return 0; // the peer is gone and everything it sent was read
        }
        const wait: State.Wait = socketWait(socket);
        const wake = network.waitOn(&socket.waiters, wait, true, next_ns) catch
            return error.SystemResources;
        if (wake == .canceled) {
            try state.checkCancel();
            return error.Canceled;
        }
    }
}

/// Copies delivered bytes out of the first segments (those due now, in order).
fn take(network: *Network, socket: *Socket, buffers: []const []u8) usize {
    const state = network.stateOf();
    var copied: usize = 0;
    var buffer_index: usize = 0;
    var buffer_offset: usize = 0;
    // Bounded by the delivered segments and the buffers' room.
    while (socket.inbound.items.len > 0 and buffer_index < buffers.len) {
        const segment = &socket.inbound.items[0];
        if (segment.deliver_ns > state.now_ns) break;
        if (segment.end) break; // left for the next read, which returns 0
        const buffer = buffers[buffer_index];
        const length = @min(buffer.len - buffer_offset, segment.bytes.len - segment.consumed);
        @memcpy(buffer[buffer_offset..][0..length], segment.bytes[segment.consumed..][0..length]);
        segment.consumed += length;
        buffer_offset += length;
        copied += length;
        socket.inbound_bytes -= length;
        if (segment.consumed == segment.bytes.len) {
            network.gpa.free(segment.bytes);
            _ = socket.inbound.orderedRemove(0);
        }
        if (buffer_offset == buffer.len) {
            buffer_index += 1;
            buffer_offset = 0;
        }
    }
    if (socket.peer) |peer| network.wakeAll(peer); // room for the writer
    return copied;
}

pub const ShutdownHow = net.ShutdownHow;

pub fn shutdown(
    network: *Network,
    socket: *Socket,
    how: ShutdownHow,
) error{SocketUnconnected}!void {
    // A listener stops listening, as shutdown(2) makes Linux's: accepts fail, connects are
    // refused, the backlog is reset (how `weft.Server.stop` ends an accept loop).
    if (socket.kind == .listener) return network.stopListening(socket);
    if (socket.kind != .stream) return error.SocketUnconnected;
    if (how != .recv) network.endSending(socket);
    if (how != .send) {
        // As on Linux: what arrives from now on is dropped, unread data with it, and the
        // peer's writes (a blocked one too) succeed without reaching anyone.
        socket.receive_shut = true;
        network.freeBuffers(socket);
        network.wakeAll(socket);
        if (socket.peer) |peer| network.wakeAll(peer);
    }
}

fn endSending(network: *Network, socket: *Socket) void {
    if (socket.send_shut) return;
    socket.send_shut = true;
    const peer = socket.peer orelse return;
    // No memory for the end marker: the peer sees the end when this socket is freed.
    network.queueSegment(socket, peer, &.{}, true) catch {};
}

/// Closes `socket`: a stream ends its sending (the peer reads what was sent, then the end)
/// and, if it leaves data unread, resets the peer; a listener resets the connections on its
/// backlog and wakes its accepters.
pub fn close(network: *Network, socket: *Socket) void {
    assert(!socket.closed); // `get` refuses a closed handle
    socket.closed = true;
    switch (socket.kind) {
        .stream => {
            network.endSending(socket);
            if (socket.peer) |peer| {
                if (socket.inbound_bytes > 0) peer.reset = true;
                peer.peer = null;
                network.wakeAll(peer);
            }
        },
        .listener => network.stopListening(socket),
        .datagram => {},
    }
    network.wakeAll(socket);
    // The socket itself stays in `sockets` until `deinit` (see there).
    network.freeBuffers(socket);
}

/// Resets both ends of a stream, as a RST from the middle of the network would.
fn resetConnection(network: *Network, a: *Socket, b: *Socket) void {
    for ([_]*Socket{ a, b }) |end| {
        end.reset = true;
        end.peer = null;
        network.freeBuffers(end);
        network.wakeAll(end);
    }
}

/// Drops a socket `create` made for a call that then failed.
fn discard(network: *Network, socket: *Socket) void {
    socket.closed = true;
    network.freeBuffers(socket);
}

/// Resets the connections on `listener`'s backlog and makes it refuse connects and fail
/// accepts; wakes whoever waits on it.
fn stopListening(network: *Network, listener: *Socket) void {
    listener.listening = false;
    for (listener.backlog.items) |server| {
        if (server.peer) |client| {
            client.reset = true;
            client.peer = null;
            network.wakeAll(client);
        }
        network.discard(server);
    }
    listener.backlog.clearRetainingCapacity();
    network.wakeAll(listener);
    network.wakeConnectors();
}

// ---------------------------------------------------------------------------------------------
// Datagrams.

pub const BindError = error{ AddressInUse, SystemResources };

pub fn bindDatagram(network: *Network, address: net.IpAddress) BindError!*Socket {
    const bound = try network.bindable(.datagram, address);
    return network.create(.datagram, bound) catch error.SystemResources;
}

/// Sends each message to its address (see the file doc for loss, duplicates and cuts).
/// Returns how many were sent.
pub fn send(
    network: *Network,
    socket: *Socket,
    messages: []net.OutgoingMessage,
) error{SystemResources}!usize {
    const state = network.stateOf();
    for (messages, 0..) |*message, index| {
        const destination = message.address.*;
        const data = message.data_ptr[0..message.data_len];
        const receiver = network.findBound(.datagram, socket.host, destination);
        const to = receiver orelse continue;
        const link = network.linkOf(socket.host, to.host);
        const copies: usize = if (network.chance(link.loss_percent))
            0
        else if (network.chance(link.duplicate_percent)) 2 else 1;
        if (network.linkUp(socket.host, to.host)) for (0..copies) |_| {
            const bytes = network.gpa.dupe(u8, data) catch
                return if (index == 0) error.SystemResources else index;
            // A wildcard sender is seen from its host's address (or loopback's, locally).
            const from = if (!isUnspecified(socket.address))
                socket.address
            else if (isLoopback(destination))
                withPort(destination, portOf(socket.address))
            else
                socket.host.at(portOf(socket.address));
            to.datagrams.append(network.gpa, .{
                .from = from,
                .bytes = bytes,
                .deliver_ns = state.now_ns +| network.delayNs(socket.host, to.host),
            }) catch {
                network.gpa.free(bytes);
                return if (index == 0) error.SystemResources else index;
            };
            const queued = to.datagrams.items[to.datagrams.items.len - 1];
            state.traceEvent(.delivery, handles.number(to.handle).?, queued.deliver_ns);
            network.wakeAll(to);
        };
    }
    return messages.len;
}

/// Receives the datagrams that have arrived into `messages` (their data in `data_buffer`),
/// waiting (cancelably) for the first; in arrival order. `peek` leaves them to be received
/// again.
pub fn receive(
    network: *Network,
    socket: *Socket,
    messages: []net.IncomingMessage,
    data_buffer: []u8,
    peek: bool,
) Io.Operation.NetReceive.Result {
    const state = network.stateOf();
    if (socket.kind != .datagram) return .{ error.SocketUnconnected, 0 };
    // Bounded by the datagrams that arrive.
    while (true) {
        if (socket.closed) return .{ error.SocketUnconnected, 0 };
        const next_ns = network.nextArrival(socket);
        if (next_ns) |due| if (due <= state.now_ns) {
            return .{ null, network.takeDatagrams(socket, messages, data_buffer, peek) };
        };
        const wait: State.Wait = socketWait(socket);
        const wake = network.waitOn(&socket.waiters, wait, true, next_ns) catch
            return .{ error.SystemResources, 0 };
        if (wake == .canceled) {
            state.checkCancel() catch {};
            return .{ error.Canceled, 0 };
        }
    }
}

/// Whether a receive on `socket` would return at once.
pub fn receiveReady(network: *Network, socket: *Socket) bool {
    if (socket.kind != .datagram or socket.closed) return true;
    const now_ns = network.stateOf().now_ns;
    for (socket.datagrams.items) |datagram| if (datagram.deliver_ns <= now_ns) return true;
    return false;
}

/// When the next datagram reaches `socket`, if one is on its way.
pub fn nextArrival(network: *Network, socket: *Socket) ?u64 {
    _ = network;
    var next_ns: ?u64 = null;
    for (socket.datagrams.items) |datagram| {
        next_ns = @min(next_ns orelse datagram.deliver_ns, datagram.deliver_ns);
    }
    return next_ns;
}

/// Blocks the running task on all of `sockets` at once (cancelably) until one of them is
/// woken or `deadline_ns` passes.
pub fn waitAny(network: *Network, sockets: []const *Socket, deadline_ns: ?u64) State.Wake {
    const state = network.stateOf();
    const task = state.currentTask();
    var listed: usize = 0;
    for (sockets) |socket| {
        socket.waiters.append(network.gpa, task) catch break;
        listed += 1;
    }
    const first: u32 = if (sockets.len > 0) handles.number(sockets[0].handle).? else 0;
    const wake = state.park(.{ .socket = first }, true, deadline_ns);
    for (sockets[0..listed]) |socket| removeWaiter(&socket.waiters, task);
    return wake;
}

fn takeDatagrams(
    network: *Network,
    socket: *Socket,
    messages: []net.IncomingMessage,
    data_buffer: []u8,
    peek: bool,
) usize {
    const now_ns = network.stateOf().now_ns;
    var count: usize = 0;
    var offset: usize = 0;
    var skipped: usize = 0; // peeked: the first `skipped` of arrival order are taken already
    // Bounded by the datagrams held and the messages' room.
    while (count < messages.len and offset < data_buffer.len) {
        const index = nextArrived(socket, now_ns, skipped) orelse break;
        const datagram = socket.datagrams.items[index];
        const length = @min(data_buffer.len - offset, datagram.bytes.len);
        @memcpy(data_buffer[offset..][0..length], datagram.bytes[0..length]);
        messages[count] = .{
            .from = datagram.from,
            .data = data_buffer[offset..][0..length],
            .control = &.{},
            .flags = .{
                .eor = false,
                .trunc = length < datagram.bytes.len,
                .ctrunc = false,
                .oob = false,
                .errqueue = false,
            },
        };
        offset += length;
        count += 1;
        if (peek) {
            skipped += 1;
        } else {
            network.gpa.free(datagram.bytes);
            _ = socket.datagrams.orderedRemove(index);
        }
    }
    assert(count > 0);
    return count;
}

/// The index of the datagram that arrived first (by delivery time, then sending order) of
/// those arrived by `now_ns`, after passing over the first `skip` such.
fn nextArrived(socket: *const Socket, now_ns: u64, skip: usize) ?usize {
    var passed: usize = 0;
    var floor_ns: u64 = 0;
    var floor_index: usize = 0;
    // Bounded: `skip` + 1 scans of the held datagrams.
    while (true) {
        var best: ?usize = null;
        for (socket.datagrams.items, 0..) |datagram, index| {
            if (datagram.deliver_ns > now_ns) continue;
            const after_floor = passed == 0 or datagram.deliver_ns > floor_ns or
                (datagram.deliver_ns == floor_ns and index > floor_index);
            if (!after_floor) continue;
            if (best) |b| {
                if (datagram.deliver_ns >= socket.datagrams.items[b].deliver_ns) continue;
            }
            best = index;
        }
        const found = best orelse return null;
        if (passed == skip) return found;
        floor_ns = socket.datagrams.items[found].deliver_ns;
        floor_index = found;
        passed += 1;
    }
}

// ---------------------------------------------------------------------------------------------
// Lookups.

/// The addresses `name` has: numeric, "localhost", or from `Options.hosts`, in that order.
pub fn lookup(
    network: *Network,
    name: []const u8,
    port: u16,
    family: ?net.IpAddress.Family,
    out: []net.IpAddress,
) usize {
    if (net.IpAddress.parse(name, port)) |address| {
        out[0] = address;
        return 1;
    } else |_| {}
    var count: usize = 0;
    if (std.ascii.eqlIgnoreCase(name, "localhost")) {
        if (family != .ip6) {
            out[count] = .{ .ip4 = .loopback(port) };
            count += 1;
        }
        if (family != .ip4) {
            out[count] = .{ .ip6 = .loopback(port) };
            count += 1;
        }
        return count;
    }
    for (network.options.hosts) |entry| {
        if (count == out.len) break;
        if (!std.ascii.eqlIgnoreCase(entry.name, name)) continue;
        if (family) |wanted| if (@as(net.IpAddress.Family, entry.address) != wanted) continue;
        out[count] = withPort(entry.address, port);
        count += 1;
    }
    return count;
}
