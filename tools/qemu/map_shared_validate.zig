//! qemu-user 7.2 (Debian 12's, checked) refuses `mmap` with the MAP_SHARED_VALIDATE type
//! (0x03, Linux 4.15) with EINVAL, while it maps the same file with MAP_SHARED; the kernel maps
//! it with either. std.Io.Threaded and weft both map files with MAP_SHARED_VALIDATE (so that an
//! unknown flag fails instead of being ignored), and both take EINVAL for a programming error
//! (`errnoBug`, a panic in Debug): weft's memory-map tests are skipped under qemu.
//!
//!   exit 0: MAP_SHARED_VALIDATE mapped the file; exit 1: it failed (MAP_SHARED is tried too).
const std = @import("std");
const linux = std.os.linux;

const page_size = std.heap.page_size_min;

fn map(fd: i32, kind: linux.MAP_TYPE) linux.E {
    const rc = linux.mmap(null, page_size, .{ .READ = true }, .{ .TYPE = kind }, fd, 0);
    const err = linux.errno(rc);
    if (err == .SUCCESS) _ = linux.munmap(@ptrFromInt(rc), page_size);
    return err;
}

pub fn main() void {
    const fd_rc = linux.memfd_create("weft-qemu-probe", 0);
    if (linux.errno(fd_rc) != .SUCCESS) linux.exit_group(2);
    const fd: i32 = @intCast(fd_rc);
    if (linux.errno(linux.ftruncate(fd, page_size)) != .SUCCESS) linux.exit_group(2);
    const validate = map(fd, .SHARED_VALIDATE);
    const shared = map(fd, .SHARED);
    std.debug.print("mmap MAP_SHARED_VALIDATE: {t}; MAP_SHARED: {t}\n", .{ validate, shared });
    linux.exit_group(if (validate == .SUCCESS) 0 else 1);
}
