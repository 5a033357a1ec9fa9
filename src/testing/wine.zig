//! `./zigw build test-windows` runs the Windows tests under Wine with `WEFT_WINE=1` in their
//! environment. A test that cannot pass there because of what Wine lacks (not weft) skips
//! itself with `skipUnderWine`, which prints the limitation; each has a standalone program
//! under tools/wine/ that fails the same way under Wine (nothing here runs real Windows, where
//! it should pass). Nothing else is skipped.
const std = @import("std");
const os = @import("../os/host.zig");

/// What Wine (8.0, as checked) lacks, each with its proof under tools/wine/.
pub const Limitation = enum {
    /// NtSetInformationFile's FileDispositionInformationEx is NOT_IMPLEMENTED: std's
    /// `deleteFile` fails, so a test's temporary directory cannot be cleaned up.
    delete_file,
    /// The AFD ioctls behind std's Windows sockets (bind, socket options) are not there:
    /// std's `listen` fails, so nothing can serve over loopback.
    afd_sockets,

    fn reason(limitation: Limitation) []const u8 {
        return switch (limitation) {
            .delete_file => "Wine: no FileDispositionInformationEx, so std's deleteFile " ++
                "fails with NOT_IMPLEMENTED (tools/wine/delete_file.zig)",
            .afd_sockets => "Wine: no AFD bind ioctl, so std's listen fails with " ++
                "BAD_DEVICE_TYPE (tools/wine/listen.zig)",
        };
    }
};

/// Whether the tests run under Wine (the build step says so; nothing is detected).
pub fn underWine() bool {
    return os.envFlag("WEFT_WINE");
}

/// Skips the calling test under Wine, saying where and why on one line (`at`: `@src()`).
pub fn skipUnderWine(
    limitation: Limitation,
    at: std.builtin.SourceLocation,
) error{SkipZigTest}!void {
    if (!underWine()) return;
    return os.skipTest(at, limitation.reason());
}
