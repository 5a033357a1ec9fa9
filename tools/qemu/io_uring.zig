//! qemu-user (7.2, Debian 12's, checked) has no io_uring: `io_uring_setup` is not among the
//! syscalls it emulates (a ring is memory the kernel reads and writes on its own, with no
//! syscall for qemu to translate), so it returns ENOSYS. On a kernel with io_uring (5.1+) the
//! call succeeds. weft's tests of the io_uring backend itself are skipped under qemu for this
//! reason; everything else runs on epoll.
//!
//!   exit 0: io_uring_setup gave a ring; exit 1: it failed (the errno is printed).
const std = @import("std");
const linux = std.os.linux;

pub fn main() void {
    var params = std.mem.zeroes(linux.io_uring_params);
    const rc = linux.io_uring_setup(8, &params);
    switch (linux.errno(rc)) {
        .SUCCESS => {
            std.debug.print("io_uring_setup: ring fd {d}\n", .{rc});
            linux.exit_group(0);
        },
        else => |err| {
            std.debug.print("io_uring_setup: {t}\n", .{err});
            linux.exit_group(1);
        },
    }
}
