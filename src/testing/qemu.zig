//! `./zigw build test-aarch64` runs the tests under qemu-user with `WEFT_QEMU=1` in their
//! environment. A test that cannot pass there because of a limitation of the emulator (not of
//! weft) skips itself with `skipUnderQemu`, which prints the limitation; each has a standalone
//! program under tools/qemu/ that fails the same way under qemu and passes natively
//! (tools/qemu/run.sh runs them both ways). Nothing else is skipped: every other test runs on
//! aarch64 as it does on x86_64.
const std = @import("std");
const os = @import("../os/host.zig");

/// What qemu-user (7.2, as checked) lacks, each with its proof under tools/qemu/.
pub const Limitation = enum {
    /// `io_uring_setup` is ENOSYS: the io_uring backend's own tests cannot run.
    io_uring,
    /// `madvise(MADV_GUARD_INSTALL)` succeeds and installs nothing: fiber stacks have no guard.
    madv_guard,
    /// `mmap` with MAP_SHARED_VALIDATE is EINVAL: file mappings fail as a programming error.
    map_shared_validate,
    /// `execveat` is ENOSYS: `spawnPath` and `replacePath` cannot run.
    execveat,
    /// `preadv2` and `openat2` are ENOSYS: the file fast path always falls back, an epoll
    /// loop's rescue (`Loop.rescue`) runs no read or write, and an epoll loop's read or write
    /// of a blocking socket or pipe is the plain syscall, which may block.
    nowait,
    /// `process_vm_readv` is ENOSYS: stacks are read no further than the program counter.
    process_vm_readv,

    fn reason(limitation: Limitation) []const u8 {
        return switch (limitation) {
            .io_uring => "qemu-user: no io_uring, io_uring_setup is ENOSYS " ++
                "(tools/qemu/io_uring.zig)",
            .madv_guard => "qemu-user: MADV_GUARD_INSTALL is ignored, so fiber stacks have no " ++
                "guard page to fault on (tools/qemu/madv_guard.zig)",
            .map_shared_validate => "qemu-user: mmap with MAP_SHARED_VALIDATE is EINVAL " ++
                "(tools/qemu/map_shared_validate.zig)",
            .execveat => "qemu-user: no execveat, ENOSYS (tools/qemu/execveat.zig)",
            .nowait => "qemu-user: no preadv2 or openat2, ENOSYS, so no read or open takes " ++
                "the fast path, nor an epoll rescue a read or write, and an epoll read or " ++
                "write may block (tools/qemu/nowait.zig)",
            .process_vm_readv => "qemu-user: no process_vm_readv, ENOSYS, so no stack is read " ++
                "beyond its program counter (tools/qemu/process_vm_readv.zig)",
        };
    }
};

/// Whether the tests run under qemu-user (the build step says so; nothing is detected).
pub fn underQemu() bool {
    return os.envFlag("WEFT_QEMU");
}

/// Skips the calling test under qemu-user, saying where and why on one line (`at`: `@src()`;
/// `os.skipTest`'s format, which CI lists).
pub fn skipUnderQemu(
    limitation: Limitation,
    at: std.builtin.SourceLocation,
) error{SkipZigTest}!void {
    if (!underQemu()) return;
    return os.skipTest(at, limitation.reason());
}
