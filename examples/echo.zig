//! A TCP echo server on weft: one task per connection, written against std.Io only.
//!
//!   zig build examples && ./zig-out/bin/example-echo --port 7000 --connections 3
//!
//! `--port N` (default 7000; 0 picks a free port, printed at start), `--connections N`: exit
//! after serving N connections (default 0: serve until killed). Each connection runs in its
//! own task of one `Io.Group`; the accept loop is the main task.
const std = @import("std");
const Io = std.Io;
const net = Io.net;
const weft = @import("weft");

pub fn main(init: std.process.Init) !void {
    const args = try init.minimal.args.toSlice(init.arena.allocator());
    const port = try flagNumber(u16, args, "--port", 7000);
    const connections_max = try flagNumber(u32, args, "--connections", 0);

    var rt = try weft.Runtime.init(init.gpa, .{});
    defer rt.deinit();
    const io = rt.io();

    const address: net.IpAddress = .{ .ip4 = .loopback(port) };
    var server = try address.listen(io, .{ .reuse_address = true });
    defer server.deinit(io);
    std.debug.print("echo: listening on 127.0.0.1:{d}\n", .{server.socket.address.getPort()});

    var group: Io.Group = .init;
    defer group.cancel(io);
    var served: u32 = 0;
    while (connections_max == 0 or served < connections_max) : (served += 1) {
        const stream = try server.accept(io);
        group.concurrent(io, echo, .{ io, stream }) catch |err| {
            std.debug.print("echo: no task for a connection: {t}\n", .{err});
            stream.close(io);
        };
    }
    try group.await(io);
    std.debug.print("echo: served {d} connections\n", .{served});
}

/// Copies everything the peer sends back to it until end of stream, then closes.
fn echo(io: Io, stream: net.Stream) Io.Cancelable!void {
    defer stream.close(io);
    var read_buffer: [4096]u8 = undefined;
    var write_buffer: [4096]u8 = undefined;
    var reader = stream.reader(io, &read_buffer);
    var writer = stream.writer(io, &write_buffer);
    // Whatever has arrived goes back at once, so an interactive peer sees its echo.
    while (true) {
        reader.interface.fillMore() catch break; // end of stream, or the peer is gone
        const bytes = reader.interface.buffered();
        writer.interface.writeAll(bytes) catch break;
        reader.interface.toss(bytes.len);
        writer.interface.flush() catch break;
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
