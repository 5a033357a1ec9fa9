//! "Hello, world" over HTTP/1.1 with std.http.Server on weft, keep-alive, one task per
//! connection.
//!
//!   zig build examples && ./zig-out/bin/example-http_hello --port 8080
//!   curl http://127.0.0.1:8080/        wrk -t1 -c50 -d5s http://127.0.0.1:8080/
//!
//! `--port N` (default 8080), `--connections N`: exit after N connections (default 0: serve
//! until killed).
const std = @import("std");
const Io = std.Io;
const net = Io.net;
const weft = @import("weft");

pub fn main(init: std.process.Init) !void {
    const args = try init.minimal.args.toSlice(init.arena.allocator());
    const port = try flagNumber(u16, args, "--port", 8080);
    const connections_max = try flagNumber(u32, args, "--connections", 0);

    var rt = try weft.Runtime.init(init.gpa, .{});
    defer rt.deinit();
    const io = rt.io();

    const address: net.IpAddress = .{ .ip4 = .loopback(port) };
    var server = try address.listen(io, .{ .reuse_address = true });
    defer server.deinit(io);
    std.debug.print("http_hello: listening on http://127.0.0.1:{d}/\n", .{
        server.socket.address.getPort(),
    });

    var group: Io.Group = .init;
    defer group.cancel(io);
    var served: u32 = 0;
    while (connections_max == 0 or served < connections_max) : (served += 1) {
        const stream = try server.accept(io);
        group.concurrent(io, serve, .{ io, stream }) catch |err| {
            std.debug.print("http_hello: no task for a connection: {t}\n", .{err});
            stream.close(io);
        };
    }
    try group.await(io);
}

/// Answers every request of one connection until the client closes it.
fn serve(io: Io, stream: net.Stream) Io.Cancelable!void {
    defer stream.close(io);
    var read_buffer: [4096]u8 = undefined;
    var write_buffer: [4096]u8 = undefined;
    var reader = stream.reader(io, &read_buffer);
    var writer = stream.writer(io, &write_buffer);
    var http_server = std.http.Server.init(&reader.interface, &writer.interface);
    while (true) {
        var request = http_server.receiveHead() catch break;
        request.respond("Hello, world!\n", .{
            .extra_headers = &.{.{ .name = "content-type", .value = "text/plain" }},
        }) catch break;
    }
    if (reader.err) |err| if (err == error.Canceled) return error.Canceled;
    if (writer.err) |err| if (err == error.Canceled) return error.Canceled;
}

fn flagNumber(comptime T: type, args: []const [:0]const u8, name: []const u8, default: T) !T {
    for (args, 0..) |arg, i| {
        if (std.mem.eql(u8, arg, name) and i + 1 < args.len) {
            return std.fmt.parseInt(T, args[i + 1], 10);
        }
    }
    return default;
}
