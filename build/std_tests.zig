//! `./zigw build test-std`: the standard library's own tests that use `std.testing.io`, run
//! with weft as that Io.
//!
//! How (std's own test files run unchanged; rejected: copies of them with `testing.io`
//! replaced, which would drift from the std they test):
//!
//! 1. `build/std_lib_patch.zig` writes a copy of the Zig lib directory into the cache: `std/`
//!    copied, everything else symlinked, and `std.testing.io` patched to be
//!    `@import("root").std_testing_io` when the root module declares it. 0.16 has no hook for
//!    this (no `std_options` field), hence the copy.
//! 2. The test binary is compiled from the copy's `std/std.zig` with `--zig-lib-dir <copy>`, so
//!    the test root and `@import("std")` are the same patched module.
//! 3. `src/testing/std_runner.zig` is the test runner, hence the root module: it declares
//!    `std_testing_io`, creates a fresh weft runtime per test and runs each test body on it.
//!
//! Imports added to the test's root module (here `std.zig` of the copy) are visible to the test
//! runner too; that is how the runner reaches `weft` although `src/root.zig` lies outside the
//! runner's directory.
//!
//! Options:
//!   -Dstd-test-io=threaded       run the same tests on std.Io.Threaded (mechanism check)
//!   -Dstd-test-filter=<name>     replace the default filters below (repeatable)
const std = @import("std");

/// Which Io backs `std.testing.io` in the test binary. `threaded` exists so the mechanism (the
/// patched lib, the runner, the filters) can be checked independently of weft.
pub const TestIo = enum { weft, threaded };

/// Test-name filters: a test runs when its fully qualified name contains one of them. Each
/// filter also prunes analysis, which matters: the `ziglang` wheel ships many std test files
/// empty and without their test data (`Io/test.zig`, `fs/test.zig`, `std/tz/*.tzif`, ...), so
/// an unfiltered std test build does not compile. Unnamed `test {}` blocks (about 60) are
/// compiled whatever the filters.
///
/// Kept: the filters whose tests reach `std.testing.io` and pass on std.Io.Threaded and on weft
/// (both loop backends), with what they exercise through it (WEFT_STD_TEST_VERBOSE=1 prints
/// every test's Io calls and the totals per VTable entry):
const default_filters = [_][]const u8{
    // Group, concurrent, cancel, futex, files; RwLock and Semaphore from std.Threads. "Io."
    // rather than "Io": the same tests, minus `os.linux.IoUring`'s, which weft's use of
    // IoUring brings into analysis and which need the IoUring/test.zig the wheel ships empty.
    "Io.",
    // Thread names through /proc files (operate); futex wait and wake from spawned threads.
    "Thread",
    // Parallel hashing through Io.Group (groupAsync, groupAwait, futex).
    "blake3",
    "argon2",
    // processCurrentPath.
    "process",
    // Files, directories, locks (fileDowngradeLock), stat.
    "Build.Cache",
    "Build.Step.Options",
    "Certificate.Bundle",
    // Debug-info reading from files (also matches heap.debug_allocator).
    "debug",
    // randomSecure / random.
    "bcrypt",
    "ml_dsa",
    "timing_safe",
};
// Left out:
// * `http`, `kangarootwelve`: pass, but make no Io call in this toolchain. The wheel's
//   http/test.zig is empty; the parallel KangarooTwelve tests are disabled upstream (Zig issue
//   30676) and skip.
// * `ecdsa`, `pcurves`: pass, but spend seconds of Debug-mode curve arithmetic for one or two
//   randomSecure calls, which bcrypt and ml_dsa already make.
// * `tar`, `crypto.25519`, `salsa20`: do not compile with the wheel (tar/testdata missing,
//   crypto/test.zig empty).
// * `Target.Query`, `scrypt`, `IoUring`, `fs`, `testing`: pass, no Io call (the tests that
//   would use it live in files the wheel ships empty, or skip).

/// `weft_module`: weft's module (src/root.zig) for `target` and `optimize`.
pub fn add(
    b: *std.Build,
    target: std.Build.ResolvedTarget,
    optimize: std.builtin.OptimizeMode,
    weft_module: *std.Build.Module,
) void {
    const step = b.step(
        "test-std",
        "Run the standard library's std.testing.io tests with weft as the Io",
    );
    const test_io = b.option(TestIo, "std-test-io", "Io behind std.testing.io in test-std") orelse
        .weft;
    const filters = b.option(
        []const []const u8,
        "std-test-filter",
        "test-std: only run std tests matching (replaces the default filters)",
    ) orelse &default_filters;

    const lib_copy = patchedLibDir(b);

    const options = b.addOptions();
    options.addOption(TestIo, "test_io", test_io);

    const root_module = b.createModule(.{
        .root_source_file = lib_copy.path(b, "std/std.zig"),
        .target = target,
        .optimize = optimize,
    });
    root_module.addOptions("std_runner_options", options);
    root_module.addImport("weft", weft_module);

    const tests = b.addTest(.{
        .name = "std-tests",
        .root_module = root_module,
        .filters = filters,
        .test_runner = .{ .path = b.path("src/testing/std_runner.zig"), .mode = .simple },
        .zig_lib_dir = lib_copy,
    });
    // The runner prints its own per-test lines and totals; a simple-mode runner is judged by its
    // exit code alone. On weft the suite runs once per loop backend, like `test`: both must
    // pass it. One after the other, so that their output does not interleave and the timing
    // tests among them do not compete for the cores.
    switch (test_io) {
        .weft => {
            var previous: ?*std.Build.Step = null;
            for ([_][]const u8{ "io_uring", "epoll" }) |backend| {
                const run = b.addRunArtifact(tests);
                run.setEnvironmentVariable("WEFT_BACKEND", backend);
                run.setName(b.fmt("std tests on weft ({s})", .{backend}));
                if (previous) |p| run.step.dependOn(p);
                previous = &run.step;
                step.dependOn(&run.step);
            }
        },
        .threaded => {
            const run = b.addRunArtifact(tests);
            run.setName("std tests on std.Io.Threaded");
            step.dependOn(&run.step);
        },
    }
}

/// The patched copy of the lib directory, as a directory LazyPath in the cache.
fn patchedLibDir(b: *std.Build) std.Build.LazyPath {
    const tool = b.addExecutable(.{
        .name = "std-lib-patch",
        .root_module = b.createModule(.{
            .root_source_file = b.path("build/std_lib_patch.zig"),
            .target = b.graph.host,
            // Copies 18 MB once per toolchain; not worth a release compile of the tool.
            .optimize = .Debug,
        }),
    });
    const gen = b.addRunArtifact(tool);
    gen.setName("patch std.testing.io into a copy of the zig lib dir");
    const lib_path = b.graph.zig_lib_directory.path orelse ".";
    gen.addArg(lib_path);
    // The run is cached on its arguments and the tool; the lib directory's path does not change
    // when a toolchain is reinstalled in place, so its testing.zig (the file patched) and the
    // compiler version are hashed too.
    gen.addFileInput(.{ .cwd_relative = b.pathJoin(&.{ lib_path, "std", "testing.zig" }) });
    gen.addArg(b.fmt("--zig-version={s}", .{@import("builtin").zig_version_string}));
    return gen.addOutputDirectoryArg("zig-lib");
}
