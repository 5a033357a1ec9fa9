//! weft.Registry in one small program: fibers share two "connections" that only one caller
//! at a time may use.
//!
//! Twelve fibers each run a few transactions on one of the two connections; a busy connection
//! queues its callers in a FIFO line. Then one connection is destroyed: its id turns stale
//! (`error.Stale`, even once the slot is reused), and its teardown runs exactly once. `deinit`
//! tears down the other.
//!
//! Usage: ./zigw build examples && zig-out/bin/example-registry
const std = @import("std");
const Io = std.Io;
const weft = @import("weft");

const Connection = struct {
    name: []const u8,
    queries: u32 = 0,

    const QueryError = error{Empty} || Io.Cancelable;

    fn query(connection: *Connection, io: Io, sql: []const u8) QueryError!u32 {
        if (sql.len == 0) return error.Empty;
        try io.sleep(.fromMicroseconds(100), .awake); // the round trip of a real one
        connection.queries += 1;
        return connection.queries;
    }

    fn close(io: Io, connection: *Connection) void {
        _ = io;
        std.debug.print("closing {s} after {d} queries\n", .{ connection.name, connection.queries });
    }
};

const Connections = weft.Registry(Connection);

fn client(io: Io, registry: *Connections, id: Connections.Id) Io.Cancelable!void {
    for (0..5) |_| {
        _ = registry.transaction(io, id, Connection.query, .{ io, "select 1" }) catch |err|
            switch (err) {
                error.Canceled => return error.Canceled,
                error.Empty, error.NotFound, error.Stale, error.WaitersFull => return,
                error.DeadlineExceeded, error.ShutdownInProgress, error.Deadlock => return,
            };
    }
}

pub fn main(init: std.process.Init) !void {
    var rt = try weft.Runtime.init(init.gpa, .{});
    defer rt.deinit();
    const io = rt.io();

    const registry = try Connections.init(init.gpa, .{
        .resources_max = 4,
        .waiters_max = 16,
        .teardown = Connection.close,
    });
    defer registry.deinit(io);
    const primary = try registry.register(.{ .name = "primary" });
    const replica = try registry.register(.{ .name = "replica" });

    var group: Io.Group = .init;
    for (0..12) |index| {
        const id = if (index % 2 == 0) primary else replica;
        try group.concurrent(io, client, .{ io, registry, id });
    }
    try group.await(io);

    _ = try registry.destroy(io, replica);
    _ = registry.transaction(io, replica, Connection.query, .{ io, "select 1" }) catch |err| {
        std.debug.print("replica after destroy: error.{t}\n", .{err});
    };
    const stats = registry.stats();
    std.debug.print("transactions: {d}, callers that waited in line: {d}\n", .{
        stats.transactions,
        stats.waited,
    });
}
