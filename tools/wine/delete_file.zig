//! Wine 8 (Debian 12's) does not implement FileDispositionInformationEx, which std.Io.Threaded's
//! `deleteFile` on Windows sets through NtSetInformationFile: under Wine this program fails
//! with `error.Unexpected NTSTATUS=0xc0000002 (NOT_IMPLEMENTED)`; on Windows 10 1709 and later
//! it prints "deleted". weft's tests that make and clean a temporary directory through it skip
//! themselves under Wine (src/testing/wine.zig).
//!
//!   zig build-exe -target x86_64-windows tools/wine/delete_file.zig && wine delete_file.exe
const std = @import("std");

pub fn main(init: std.process.Init) !void {
    const io = init.io;
    const dir = std.Io.Dir.cwd();
    try dir.writeFile(io, .{ .sub_path = "weft-wine-delete.txt", .data = "x" });
    try dir.deleteFile(io, "weft-wine-delete.txt");
    std.debug.print("deleted\n", .{});
}
