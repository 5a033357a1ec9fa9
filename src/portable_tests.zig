//! The test root where weft's fiber runtime does not compile (every OS but Linux): the tests of
//! what needs no Linux. build.zig's `cross` step compiles it for macOS, FreeBSD and Windows,
//! and `test-windows` runs the Windows build under Wine. On Linux root.zig runs these tests
//! with all the others.
test {
    _ = @import("ThreadedRuntime.zig");
    _ = @import("lanes/CpuLane.zig");
    _ = @import("lanes/Lane.zig");
    _ = @import("lanes/named.zig");
    _ = @import("sim/Disk.zig");
    _ = @import("sim/Sim.zig");
    _ = @import("std_io/threaded_futures.zig");
    _ = @import("sync/Registry.zig");
    _ = @import("sync/root.zig");
    _ = @import("testing/cpu_test.zig");
    _ = @import("testing/lane_test.zig");
    _ = @import("testing/registry_test.zig");
    _ = @import("testing/select_test.zig");
    _ = @import("testing/server_shapes_test.zig");
    _ = @import("testing/sim_disk_test.zig");
    _ = @import("testing/sim_net_test.zig");
    _ = @import("testing/sim_sync_test.zig");
    _ = @import("testing/sim_test.zig");
    _ = @import("testing/sync_test.zig");
}
