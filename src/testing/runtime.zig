//! The runtime weft's portable suites run on: `weft.Runtime` as root.zig chooses it, the fiber
//! runtime on Linux and the same API over std.Io.Threaded elsewhere and in a
//! `-Dbackend=threaded` build (src/platform.zig). A suite that imports it runs on both; one
//! that needs the fiber runtime's own helpers (parked.zig, task dumps) imports Runtime.zig.
const platform = @import("../platform.zig");

pub const Runtime = if (platform.fibers)
    @import("../Runtime.zig")
else
    @import("../ThreadedRuntime.zig");
