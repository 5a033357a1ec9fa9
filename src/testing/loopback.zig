//! Test helper: a connected TCP pair over loopback, the shape most socket tests start from.
const std = @import("std");
const Io = std.Io;
const net = Io.net;

const any_port: net.IpAddress = .{ .ip4 = .loopback(0) };

/// A listener, a stream connected to it, and the stream it accepted.
pub const Pair = struct {
    server: net.Server,
    client: net.Stream,
    peer: net.Stream,

    pub fn open(io: Io) !Pair {
        var server = try any_port.listen(io, .{ .reuse_address = true });
        errdefer server.deinit(io);
        const client = try server.socket.address.connect(io, .{ .mode = .stream });
        errdefer client.close(io);
        const peer = try server.accept(io);
        return .{ .server = server, .client = client, .peer = peer };
    }

    /// Closes the three. A test that closed one end itself closes the rest by field.
    pub fn close(pair: *Pair, io: Io) void {
        pair.peer.close(io);
        pair.client.close(io);
        pair.server.deinit(io);
    }
};
