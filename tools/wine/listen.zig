//! Wine 8 (Debian 12's) does not implement the AFD ioctls through which std.Io.Threaded's
//! Windows networking binds a socket: under Wine this program fails with `error.Unexpected
//! NTSTATUS=0xc00000cb (BAD_DEVICE_TYPE)` in `bindSocketIpAfd`; on Windows it prints
//! "listening on 127.0.0.1:N". weft's tests that serve over loopback skip themselves under
//! Wine (src/testing/wine.zig).
//!
//!   zig build-exe -target x86_64-windows tools/wine/listen.zig && wine listen.exe
const std = @import("std");

pub fn main(init: std.process.Init) !void {
    const io = init.io;
    var address = try std.Io.net.IpAddress.parse("127.0.0.1", 0);
    var server = try address.listen(io, .{});
    defer server.deinit(io);
    std.debug.print("listening on {f}\n", .{server.socket.address});
}
