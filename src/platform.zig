//! Which of weft's two runtimes this build has, decided once at compile time.
//!
//! weft's fiber runtime (executors, io_uring or epoll loops, futex parking, signal rescue) is
//! built on Linux's system calls. On every other OS, and on Linux built with
//! `-Dbackend=threaded`, `weft.Runtime` is the same API over `std.Io.Threaded`
//! (src/ThreadedRuntime.zig). The portable parts (`weft.sync`, the lanes, the registry,
//! `weft.Sim`) compile everywhere; the few places where they recognise weft's own `Io` to take
//! a faster path ask `fibers_supported` first, so that nothing of the fiber runtime is
//! referenced where it cannot compile.
const builtin = @import("builtin");
const build_options = @import("build_options");

/// Whether this OS has what the fiber runtime is built on (Linux's io_uring or epoll, futexes,
/// signals and /proc). Its code compiles only where this holds.
pub const fibers_supported = builtin.os.tag == .linux;

/// Whether `weft.Runtime` is the fiber runtime (src/Runtime.zig) rather than the same API over
/// `std.Io.Threaded` (src/ThreadedRuntime.zig).
pub const fibers = fibers_supported and !build_options.threaded;
