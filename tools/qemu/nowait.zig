//! qemu-user (7.2, Debian 12's, checked) emulates neither `preadv2` nor `openat2`: ENOSYS for
//! both. The kernel has had them since 4.6 and 5.6. weft's file fast path (src/fs/nowait.zig)
//! then falls back to the loop or the lane and remembers the refusal, which is right, but the
//! tests that check a cached read or open takes the fast path are skipped under qemu; the
//! fallback itself is tested by simulated refusals on every run. The epoll loop's reads and
//! writes ask `preadv2`/`pwritev2` not to wait (src/loop/backend/epoll.zig) and fall back to
//! the plain calls too, which may block on a blocking socket: that test is skipped as well.
//!
//!   exit 0: both calls answered a cached file at once; exit 1: one failed (errno printed).
const std = @import("std");
const linux = std.os.linux;

pub fn main() void {
    // Opened once here first, so its dentries are cached.
    const path = "/etc/passwd";
    const fd_rc = linux.open(path, .{ .ACCMODE = .RDONLY, .CLOEXEC = true }, 0);
    if (linux.errno(fd_rc) != .SUCCESS) linux.exit_group(2);
    const fd: linux.fd_t = @intCast(fd_rc);
    var buffer: [64]u8 = undefined;
    _ = linux.pread(fd, &buffer, buffer.len, 0); // now cached
    var iov = [_]std.posix.iovec{.{ .base = &buffer, .len = buffer.len }};
    const read_rc = linux.preadv2(fd, &iov, 1, 0, linux.RWF.NOWAIT);
    std.debug.print("preadv2(RWF_NOWAIT) of a cached file: {t}\n", .{linux.errno(read_rc)});
    // struct open_how { u64 flags, mode, resolve }, with RESOLVE_CACHED (0x20).
    const how = [3]u64{ 0, 0, 0x20 };
    const open_rc = linux.syscall4(
        .openat2,
        @bitCast(@as(isize, linux.AT.FDCWD)),
        @intFromPtr(path),
        @intFromPtr(&how),
        @sizeOf(@TypeOf(how)),
    );
    std.debug.print("openat2(RESOLVE_CACHED) of a cached path: {t}\n", .{linux.errno(open_rc)});
    const ok = linux.errno(read_rc) == .SUCCESS and linux.errno(open_rc) == .SUCCESS;
    linux.exit_group(if (ok) 0 else 1);
}
