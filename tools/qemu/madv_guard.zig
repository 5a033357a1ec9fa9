//! qemu-user (7.2, Debian 12's, checked) treats `madvise` as a hint: for advice it does not
//! pass on to the kernel it returns success and does nothing. MADV_GUARD_INSTALL (102, Linux
//! 6.13) is no hint: it installs a guard marker, and touching the page must fault. Under qemu
//! the call returns 0 and the page stays readable, so weft's fiber stacks have no guard page
//! there, and an overflow runs on into whatever lies below instead of faulting on the guard.
//! (A kernel older than 6.13 returns EINVAL, which weft takes as "use mprotect(PROT_NONE)".)
//!
//!   exit 0: the guarded page faulted (or the kernel refused the advice, EINVAL);
//!   exit 1: madvise succeeded and the page could still be read.
const std = @import("std");
const linux = std.os.linux;

const page_size = std.heap.page_size_min;
const madv_guard_install = 102;

fn onFault(_: linux.SIG, _: *const linux.siginfo_t, _: ?*anyopaque) callconv(.c) void {
    const line = "reading the guarded page faulted: the guard is there\n";
    _ = linux.write(2, line, line.len);
    linux.exit_group(0);
}

pub fn main() void {
    const rc = linux.mmap(null, 2 * page_size, .{ .READ = true, .WRITE = true }, .{
        .TYPE = .PRIVATE,
        .ANONYMOUS = true,
    }, -1, 0);
    if (linux.errno(rc) != .SUCCESS) linux.exit_group(2);
    const memory: [*]volatile u8 = @ptrFromInt(rc);
    memory[0] = 1;
    switch (linux.errno(linux.madvise(@ptrFromInt(rc), page_size, madv_guard_install))) {
        .SUCCESS => {},
        else => |err| {
            std.debug.print("madvise(MADV_GUARD_INSTALL): {t} (kernel < 6.13)\n", .{err});
            linux.exit_group(0);
        },
    }
    const action: linux.Sigaction = .{
        .handler = .{ .sigaction = &onFault },
        .mask = linux.sigemptyset(),
        .flags = linux.SA.SIGINFO,
    };
    _ = linux.sigaction(.SEGV, &action, null);
    const value = memory[0];
    std.debug.print("madvise(MADV_GUARD_INSTALL) returned 0, yet the page reads {d}: no guard\n", .{
        value,
    });
    linux.exit_group(1);
}
