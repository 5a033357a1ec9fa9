//! The Sim's own handles for its files, directories and sockets: numbers far above any real
//! one, in the type std gives handles on this OS (`std.posix.fd_t`: a descriptor on POSIX, a
//! `HANDLE` pointer on Windows, whose real values stay far below them too). Disk.zig and
//! Network.zig keep their own ranges; this file only converts.
const std = @import("std");
const builtin = @import("builtin");
const Io = std.Io;

pub const Handle = std.posix.fd_t;

const windows = builtin.os.tag == .windows;

/// The handle that is `number` (not 0: Windows' handles are non-null pointers).
pub fn fromNumber(value: u32) Handle {
    std.debug.assert(value != 0);
    return if (windows) @ptrFromInt(value) else @intCast(value);
}

/// The number `handle` is, or null when it is none of the Sim's kind (negative, such as
/// `AT.FDCWD`, or beyond 32 bits).
pub fn number(handle: Handle) ?u32 {
    const value: usize = if (windows) @intFromPtr(handle) else if (handle < 0)
        return null
    else
        @intCast(handle);
    return std.math.cast(u32, value);
}

/// Whether `handle` is `Dir.cwd()`'s (AT.FDCWD on POSIX, the process's current-directory
/// handle on Windows), which the simulated disk takes for its root.
pub fn isCwd(handle: Handle) bool {
    return handle == Io.Dir.cwd().handle;
}
