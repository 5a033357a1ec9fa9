//! qemu-user (7.2, Debian 12's, checked) has no `process_vm_readv`: ENOSYS. weft reads stacks
//! with it (fiber/frames.zig, the watchdog's
//! stall sample), so that an address that is not mapped is an error instead of a fault. Under
//! qemu no word is read, so stall reports and task dumps there carry no stack beyond the
//! program counter; the tests that check a stack's function names are skipped under qemu.
//!
//!   exit 0: the word read back equals the word written; exit 1: it did not (errno printed).
const std = @import("std");
const linux = std.os.linux;

pub fn main() void {
    var source: usize = 0x5eed_f00d;
    var copy: usize = 0;
    const local = [_]std.posix.iovec{.{ .base = @ptrCast(&copy), .len = @sizeOf(usize) }};
    const remote = [_]std.posix.iovec_const{.{ .base = @ptrCast(&source), .len = @sizeOf(usize) }};
    const rc = linux.process_vm_readv(linux.getpid(), &local, &remote, 0);
    std.debug.print("process_vm_readv of our own word: {t}, read {x}\n", .{ linux.errno(rc), copy });
    linux.exit_group(if (linux.errno(rc) == .SUCCESS and copy == source) 0 else 1);
}
