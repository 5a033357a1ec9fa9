//! qemu-user 7.2 (Debian 12's, checked) does not emulate `execveat`: ENOSYS. The kernel has
//! had it since 3.19. weft's `process.spawnPath` and `process.replacePath` run `argv[0]`
//! relative to a directory with it (std.Io.Threaded 0.16 has neither: "TODO"), so their tests
//! are skipped under qemu.
//!
//!   exit 0: execveat ran /bin/true; exit 1: execveat returned (its errno is printed).
const std = @import("std");
const linux = std.os.linux;

pub fn main() void {
    const dir_rc = linux.open("/bin", .{ .DIRECTORY = true, .CLOEXEC = true }, 0);
    if (linux.errno(dir_rc) != .SUCCESS) linux.exit_group(2);
    const argv = [_:null]?[*:0]const u8{"true"};
    const envp = [_:null]?[*:0]const u8{};
    const rc = linux.execveat(@intCast(dir_rc), "true", &argv, &envp, .{
        .SYMLINK_NOFOLLOW = false,
        .EMPTY_PATH = false,
    });
    std.debug.print("execveat(/bin, \"true\"): {t}\n", .{linux.errno(rc)});
    linux.exit_group(1);
}
