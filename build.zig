//! Build graph for weft.
//!
//!   ./zigw build test       unit and conformance tests, per loop backend and executor count
//!   ./zigw build demo       the seed scenario, std.Io.Threaded vs weft, side by side
//!   ./zigw build bench      every program in bench/, ReleaseFast, one result line each
//!   ./zigw build examples   builds examples/ so the public API stays honest
//!   ./zigw build test-std   the standard library's own std.testing.io tests on weft
//!   ./zigw build cross      compiles tests and examples for aarch64 and riscv64 Linux, musl,
//!                           macOS, FreeBSD and Windows (no run)
//!   ./zigw build test-aarch64   the tests for aarch64-linux under qemu-user (epoll)
//!   ./zigw build test-windows   the portable tests for x86_64-windows under Wine
//!   ./zigw build test-threaded  the portable tests with weft.Runtime over std.Io.Threaded
const std = @import("std");
const std_tests = @import("build/std_tests.zig");

/// weft's own build options (`@import("build_options")` in src/), given to every module whose
/// root is src/root.zig. Set once in `build`.
var weft_options: *std.Build.Step.Options = undefined;
/// The same with `threaded` set: what `test-threaded` builds with.
var threaded_options: *std.Build.Step.Options = undefined;

pub fn build(b: *std.Build) void {
    const target = b.standardTargetOptions(.{});
    const optimize = b.standardOptimizeOption(.{});
    weft_options = b.addOptions();
    // Off by default: counting adds an atomic increment to every std.Io call, and the tests
    // then build through LLVM with a counter on every basic block (which functions ran).
    const coverage = b.option(bool, "coverage", "Count every std.Io VTable call and every " ++
        "function reached (written to WEFT_COVERAGE_FILE at each Runtime.deinit; see " ++
        "build/coverage.sh)") orelse false;
    weft_options.addOption(bool, "coverage", coverage);
    // On by default: `weft.Metrics` counts with plain stores on the executors' own counters.
    // Off, every counter compiles to nothing: how the counting's cost is measured.
    const metrics = b.option(bool, "metrics", "Count what the runtime does for " ++
        "weft.Metrics (default true; false compiles the counters and the stall detector " ++
        "out)") orelse true;
    weft_options.addOption(bool, "metrics", metrics);
    // `weft.Runtime` is the fiber runtime on Linux and std.Io.Threaded beneath the same API
    // elsewhere (src/platform.zig); `threaded` picks the latter on Linux too, to test it.
    const backend = b.option(enum { fibers, threaded }, "backend", "weft.Runtime's " ++
        "implementation on Linux: fibers (default) or std.Io.Threaded (every other OS's)") orelse
        .fibers;
    weft_options.addOption(bool, "threaded", backend == .threaded);
    threaded_options = b.addOptions();
    threaded_options.addOption(bool, "coverage", false);
    threaded_options.addOption(bool, "metrics", metrics);
    threaded_options.addOption(bool, "threaded", true);

    const weft = b.addModule("weft", .{
        .root_source_file = b.path("src/root.zig"),
        .target = target,
        .optimize = optimize,
    });
    weft.addOptions("build_options", weft_options);

    const filters = b.option([]const []const u8, "test-filter", "Only run tests matching") orelse
        &.{};
    addTests(b, target, optimize, filters, coverage);
    const qemu = b.option([]const u8, "qemu", "qemu-user binary for test-aarch64") orelse
        "qemu-aarch64-static";
    // One compile of the whole aarch64 suite serves both `cross` and `test-aarch64` (CI runs
    // one after the other); a filtered run compiles its own.
    const aarch64_tests = crossTests(b, "aarch64-linux", optimize, &.{}, qemu);
    addQemuTests(b, if (filters.len == 0)
        aarch64_tests
    else
        crossTests(b, "aarch64-linux", optimize, filters, qemu));
    // The demo and the benchmarks measure on Linux (their harness forks /proc/self/exe and
    // reads /proc): elsewhere the default install has nothing of theirs to build.
    if (target.result.os.tag == .linux) {
        addDemo(b, target);
        addBenchmarks(b, target);
    }
    addExamples(b, target, optimize);
    addCrossCheck(b, optimize, aarch64_tests);
    addOtherOses(b, optimize);
    addThreadedTests(b, target, optimize);
    std_tests.add(b, target, optimize, weftModule(b, target, optimize));
}

fn weftModule(
    b: *std.Build,
    target: std.Build.ResolvedTarget,
    optimize: std.builtin.OptimizeMode,
) *std.Build.Module {
    const module = b.createModule(.{
        .root_source_file = b.path("src/root.zig"),
        .target = target,
        .optimize = optimize,
    });
    module.addOptions("build_options", weft_options);
    return module;
}

/// The unit tests run once per loop backend: both must pass the whole suite.
fn addTests(
    b: *std.Build,
    target: std.Build.ResolvedTarget,
    optimize: std.builtin.OptimizeMode,
    filters: []const []const u8,
    coverage: bool,
) void {
    const test_step = b.step("test", "Run weft's tests on both backends and 1, N and 4 executors");
    const tsan = b.option(bool, "tsan", "Build the tests with ThreadSanitizer (LLVM backend)") orelse false;
    const stress = b.option(u32, "stress", "Run the scheduler stress tests' cycles N times over (1-1000)") orelse 1;
    const fuzz_requests = b.option(u32, "fuzz-requests", "Requests the HTTP fuzz test sends (default 5000)");
    // Most real programs link libc (sqlite, openssl, C parsers): glibc then carves each
    // thread's static TLS out of the stack weft asks for (src/os/thread.zig).
    const link_libc = b.option(bool, "link-libc", "Build the tests linked with libc") orelse false;
    // Off by default: it needs the system's OpenSSL (Debian: libssl-dev), which weft does not.
    const openssl = b.option(bool, "openssl", "Also build and run the OpenSSL test " ++
        "(src/testing/openssl_test.zig; links libssl, libcrypto and libc)") orelse false;
    const coverage_file = b.graph.environ_map.get("WEFT_COVERAGE_FILE");
    // A Release build of the whole suite through LLVM takes over 20 minutes on two cores; Zig's
    // own x86_64 backend builds it in Debug's time with the mode's semantics (no safety
    // checks: what a ReleaseFast program does with a broken invariant), only unoptimized.
    const llvm = b.option(bool, "llvm", "Build the tests with LLVM (default: Zig's choice)");

    const module = b.createModule(.{
        .root_source_file = b.path("src/root.zig"),
        .target = target,
        .optimize = optimize,
        .sanitize_thread = tsan,
        // A coverage build links libc for its exit: glibc's runs the `.fini_array` entry that
        // writes the code blocks of the tests after the last Runtime (src/std_io/coverage.zig).
        .link_libc = if (link_libc or coverage or openssl) true else null,
        // LLVM's sanitizer-coverage counters (the instrumentation behind `zig build --fuzz`),
        // read by src/std_io/coverage.zig: which functions a test run reached.
        .fuzz = if (coverage) true else null,
    });
    module.addOptions("build_options", weft_options);
    addTestInputs(b, module, openssl);
    if (openssl) {
        module.linkSystemLibrary("ssl", .{});
        module.linkSystemLibrary("crypto", .{});
    }
    // TSan instruments only through LLVM; Debug x86_64 builds default to the self-hosted
    // backend, which silently ignores -fsanitize-thread.
    const tests = b.addTest(.{
        .root_module = module,
        .filters = filters,
        .use_llvm = if (tsan or coverage) true else llvm,
    });

    // Both backends with the default executor count (one per CPU), and io_uring again with
    // one executor (the single-threaded paths) and with four (more threads than this
    // machine's cores: preemption in the middle of a hand-off, steals under contention).
    // weft-serve's argument parser (examples/serve.zig) has tests of its own; they need
    // neither a backend nor a runtime, so they run once.
    const serve_tests = b.addTest(.{
        .name = "test-serve",
        .root_module = b.createModule(.{
            .root_source_file = b.path("examples/serve.zig"),
            .target = target,
            .optimize = optimize,
            .imports = &.{.{ .name = "weft", .module = weftModule(b, target, optimize) }},
        }),
        .filters = filters,
    });
    // A filtered run builds them only when a filter names them: each such build is a whole
    // compile (LLVM's, in CI's release and TSan checks) that would run no test.
    const serve_named = filters.len == 0 or for (filters) |filter| {
        if (std.mem.indexOf(u8, filter, "weft-serve") != null) break true;
    } else false;
    if (serve_named) test_step.dependOn(&b.addRunArtifact(serve_tests).step);

    const runs = [_]struct { name: []const u8, backend: []const u8, executors: ?[]const u8 }{
        .{ .name = "io_uring", .backend = "io_uring", .executors = null },
        .{ .name = "epoll", .backend = "epoll", .executors = null },
        .{ .name = "io_uring-1", .backend = "io_uring", .executors = "1" },
        .{ .name = "io_uring-4", .backend = "io_uring", .executors = "4" },
    };
    const runs_chosen = b.option(
        []const []const u8,
        "test-run",
        "Only these test runs (io_uring, epoll, io_uring-1, io_uring-4; default all)",
    ) orelse &.{};
    for (runs_chosen) |name| {
        for (runs) |config| {
            if (std.mem.eql(u8, config.name, name)) break;
        } else {
            test_step.dependOn(&b.addFail(b.fmt("-Dtest-run={s}: no such test run", .{name})).step);
            return;
        }
    }
    if (stress < 1 or stress > 1000) {
        test_step.dependOn(&b.addFail(b.fmt("-Dstress={d}: the scale must be within 1-1000", .{stress})).step);
        return;
    }
    for (runs) |config| {
        const chosen = runs_chosen.len == 0 or for (runs_chosen) |name| {
            if (std.mem.eql(u8, config.name, name)) break true;
        } else false;
        if (!chosen) continue;
        const run = b.addRunArtifact(tests);
        run.setEnvironmentVariable("WEFT_BACKEND", config.backend);
        // Read by src/testing/scheduler_test.zig; part of the step's inputs, so a new scale
        // reruns the tests.
        if (stress > 1) run.setEnvironmentVariable("WEFT_STRESS", b.fmt("{d}", .{stress}));
        // Read by src/testing/http_test.zig, an input of the step like WEFT_STRESS.
        if (fuzz_requests) |count| {
            run.setEnvironmentVariable("WEFT_FUZZ_REQUESTS", b.fmt("{d}", .{count}));
        }
        // Where a -Dcoverage build's runs append their counts (src/std_io/coverage.zig); an
        // input of the step, so a run with a new file is not taken from the cache.
        if (coverage_file) |path| run.setEnvironmentVariable("WEFT_COVERAGE_FILE", path);
        if (config.executors) |count| {
            run.setEnvironmentVariable("WEFT_EXECUTORS", count);
            run.setName(b.fmt("test ({s}, {s} executors)", .{ config.backend, count }));
        } else {
            run.setName(b.fmt("test ({s})", .{config.backend}));
        }
        test_step.dependOn(&run.step);
    }
}

/// What the unit tests read besides their code. docs/STD_IO.md's status table is checked
/// against the real VTable, and the README's usage example against examples/hello.zig. The
/// tidy test (src/testing/tidy_test.zig) reads the layers and the repository list of
/// ARCHITECTURE.md and every file under src/, and checks the names in the repository root:
/// the names are listed here, when the build is configured, so that adding or removing a file
/// reruns it. `test_options.openssl` says whether root.zig's tests include the OpenSSL test
/// (`-Dopenssl=true`, whose build links the libraries).
fn addTestInputs(b: *std.Build, module: *std.Build.Module, openssl: bool) void {
    module.addAnonymousImport("README.md", .{ .root_source_file = b.path("README.md") });
    module.addAnonymousImport("STD_IO.md", .{ .root_source_file = b.path("docs/STD_IO.md") });
    module.addAnonymousImport("hello.zig", .{ .root_source_file = b.path("examples/hello.zig") });
    module.addAnonymousImport("ARCHITECTURE.md", .{
        .root_source_file = b.path("docs/ARCHITECTURE.md"),
    });
    const tidy = b.addOptions();
    tidy.addOption([]const u8, "repo_root", b.pathFromRoot("."));
    tidy.addOption([]const []const u8, "src_files", listFilesUnder(b, "src"));
    tidy.addOption([]const []const u8, "root_entries", listRootEntries(b));
    module.addOptions("tidy_options", tidy);
    const test_options = b.addOptions();
    test_options.addOption(bool, "openssl", openssl);
    module.addOptions("test_options", test_options);
}

/// Compiles (without running) the tests and the examples for the other architectures weft's
/// fibers support, so that code for them cannot rot: x86_64 is what CI runs on. And for
/// x86_64 musl without libc (Alpine's static builds); CI runs the suite on musl with libc.
fn addCrossCheck(
    b: *std.Build,
    optimize: std.builtin.OptimizeMode,
    aarch64_tests: *std.Build.Step.Compile,
) void {
    const step = b.step(
        "cross",
        "Compile tests and examples for aarch64-linux, riscv64-linux, x86_64-linux-musl, " ++
            "macOS, FreeBSD and Windows",
    );
    for ([_][]const u8{ "aarch64-linux", "riscv64-linux", "x86_64-linux-musl" }) |triple| {
        const target = crossTarget(b, triple);
        const tests = if (std.mem.eql(u8, triple, "aarch64-linux"))
            aarch64_tests
        else
            crossTests(b, triple, optimize, &.{}, null);
        step.dependOn(&tests.step);
        const hello_name = b.fmt("hello-{s}", .{triple});
        const hello = exampleExecutable(b, hello_name, "hello", target, optimize);
        step.dependOn(&hello.step);
    }
}

/// The operating systems weft builds for beside Linux, where `weft.Runtime` is the same API
/// over std.Io.Threaded (src/platform.zig): `cross` compiles the tests of what needs no Linux
/// (src/portable_tests.zig) and every example that builds there (`buildsOn`); `test-windows`
/// runs the x86_64 Windows tests under Wine (Debian's `wine`), as `test-aarch64` runs
/// aarch64's under qemu. macOS and FreeBSD are compiled only: nothing here runs them.
fn addOtherOses(b: *std.Build, optimize: std.builtin.OptimizeMode) void {
    const cross = b.top_level_steps.get("cross").?;
    const triples = [_][]const u8{
        "x86_64-macos", "aarch64-macos", "x86_64-freebsd", "x86_64-windows", "aarch64-windows",
    };
    const examples = listZigFiles(b, "examples");
    for (triples) |triple| {
        const target = crossTarget(b, triple);
        const tests = portableTests(b, triple, optimize);
        cross.step.dependOn(&tests.step);
        for (examples) |name| {
            if (!buildsOn(target, name)) continue;
            const example_name = b.fmt("{s}-{s}", .{ name, triple });
            const example = exampleExecutable(b, example_name, name, target, optimize);
            cross.step.dependOn(&example.step);
        }
    }
    const step = b.step("test-windows", "Run the tests of what needs no Linux for " ++
        "x86_64-windows under Wine");
    const tests = portableTests(b, "x86_64-windows", optimize);
    tests.setExecCmd(&.{ "wine", null });
    const run = b.addRunArtifact(tests);
    run.setEnvironmentVariable("WINEDEBUG", "-all");
    // Tests that Wine cannot pass skip themselves, saying why (src/testing/wine.zig).
    run.setEnvironmentVariable("WEFT_WINE", "1");
    run.setName("test (x86_64-windows, wine)");
    step.dependOn(&run.step);
}

fn portableTests(
    b: *std.Build,
    triple: []const u8,
    optimize: std.builtin.OptimizeMode,
) *std.Build.Step.Compile {
    return portableTestsWith(b, crossTarget(b, triple), b.fmt("test-{s}", .{triple}), optimize, weft_options);
}

fn portableTestsWith(
    b: *std.Build,
    target: std.Build.ResolvedTarget,
    name: []const u8,
    optimize: std.builtin.OptimizeMode,
    options: *std.Build.Step.Options,
) *std.Build.Step.Compile {
    const module = b.createModule(.{
        .root_source_file = b.path("src/portable_tests.zig"),
        .target = target,
        .optimize = optimize,
    });
    module.addOptions("build_options", options);
    return b.addTest(.{ .root_module = module, .name = name });
}

/// The tests of what needs no Linux, on Linux with `weft.Runtime` over std.Io.Threaded (the
/// runtime every other OS has), and without `WEFT_BACKEND`, which that runtime refuses when it
/// names a loop: the fallback path tested where CI runs.
fn addThreadedTests(
    b: *std.Build,
    target: std.Build.ResolvedTarget,
    optimize: std.builtin.OptimizeMode,
) void {
    const step = b.step("test-threaded", "Run the tests of what needs no Linux with " ++
        "weft.Runtime over std.Io.Threaded, natively");
    const tests = portableTestsWith(b, target, "test-threaded", optimize, threaded_options);
    const run = b.addRunArtifact(tests);
    run.setName("test (threaded)");
    step.dependOn(&run.step);
}

fn crossTarget(b: *std.Build, triple: []const u8) std.Build.ResolvedTarget {
    const query = std.Target.Query.parse(.{ .arch_os_abi = triple }) catch
        @panic("bad target triple");
    return b.resolveTargetQuery(query);
}

/// The unit tests compiled for `triple`; run through `emulator` (a qemu-user binary) if given.
fn crossTests(
    b: *std.Build,
    triple: []const u8,
    optimize: std.builtin.OptimizeMode,
    filters: []const []const u8,
    emulator: ?[]const u8,
) *std.Build.Step.Compile {
    const module = weftModule(b, crossTarget(b, triple), optimize);
    addTestInputs(b, module, false);
    const tests = b.addTest(.{
        .root_module = module,
        .name = b.fmt("test-{s}", .{triple}),
        .filters = filters,
    });
    // The binary goes where `null` is; the runner still speaks the test protocol through it.
    if (emulator) |path| tests.setExecCmd(&.{ path, null });
    return tests;
}

/// Runs the unit tests compiled for aarch64-linux under qemu-user, so that the aarch64 fiber
/// switch, task entry and signal handling are executed somewhere, not only compiled. qemu-user
/// has no io_uring, hence epoll only. The emulator is named explicitly rather than through
/// `-fqemu`, which looks for `qemu-aarch64` (Debian's qemu-user-static installs
/// `qemu-aarch64-static`). `WEFT_QEMU=1` lets a test that cannot pass under emulation skip
/// itself, saying why (src/testing/qemu.zig).
fn addQemuTests(b: *std.Build, tests: *std.Build.Step.Compile) void {
    const step = b.step("test-aarch64", "Run the tests for aarch64-linux under qemu-user (epoll)");
    const run = b.addRunArtifact(tests);
    run.setEnvironmentVariable("WEFT_BACKEND", "epoll");
    run.setEnvironmentVariable("WEFT_QEMU", "1");
    run.setName("test (aarch64, qemu, epoll)");
    step.dependOn(&run.step);
}

/// The child-process, peak-RSS and timing harness shared by examples/demo.zig and bench/*.zig.
/// A module because a relative `@import` cannot leave the importing program's own folder.
fn harnessModule(
    b: *std.Build,
    target: std.Build.ResolvedTarget,
    optimize: std.builtin.OptimizeMode,
) *std.Build.Module {
    return b.createModule(.{
        .root_source_file = b.path("bench/support/harness.zig"),
        .target = target,
        .optimize = optimize,
    });
}

fn addDemo(b: *std.Build, target: std.Build.ResolvedTarget) void {
    const exe = b.addExecutable(.{
        .name = "weft-demo",
        .root_module = b.createModule(.{
            .root_source_file = b.path("examples/demo.zig"),
            .target = target,
            .optimize = .ReleaseFast,
            .imports = &.{
                .{ .name = "weft", .module = weftModule(b, target, .ReleaseFast) },
                .{ .name = "harness", .module = harnessModule(b, target, .ReleaseFast) },
            },
        }),
    });
    b.installArtifact(exe);
    const run = b.addRunArtifact(exe);
    if (b.args) |args| run.addArgs(args);
    const step = b.step("demo", "Seed scenario: N tasks x sleep(1 s), std.Io.Threaded vs weft");
    step.dependOn(&run.step);
}

fn addExamples(
    b: *std.Build,
    target: std.Build.ResolvedTarget,
    optimize: std.builtin.OptimizeMode,
) void {
    const step = b.step("examples", "Build every program in examples/");
    const names = listZigFiles(b, "examples");
    for (names) |name| {
        if (!buildsOn(target, name)) continue;
        // examples/serve.zig is the weft-serve tool (bench/http.sh runs it).
        const is_serve = std.mem.eql(u8, name, "serve");
        const exe_name = if (is_serve) "weft-serve" else b.fmt("example-{s}", .{name});
        const exe = exampleExecutable(b, exe_name, name, target, optimize);
        const install = b.addInstallArtifact(exe, .{});
        step.dependOn(&install.step);
        // `./zigw build install-weft-serve -Doptimize=ReleaseFast` rebuilds one program alone.
        b.step(b.fmt("install-{s}", .{exe_name}), b.fmt("Build and install {s} only", .{exe_name}))
            .dependOn(&install.step);
    }
}

/// `examples/<name>.zig` built as `exe_name`, with weft and the harness to import.
fn exampleExecutable(
    b: *std.Build,
    exe_name: []const u8,
    name: []const u8,
    target: std.Build.ResolvedTarget,
    optimize: std.builtin.OptimizeMode,
) *std.Build.Step.Compile {
    return b.addExecutable(.{
        .name = exe_name,
        .root_module = b.createModule(.{
            .root_source_file = b.path(b.fmt("examples/{s}.zig", .{name})),
            .target = target,
            .optimize = optimize,
            .imports = &.{
                .{ .name = "weft", .module = weftModule(b, target, optimize) },
                .{ .name = "harness", .module = harnessModule(b, target, optimize) },
            },
        }),
    });
}

/// Every `bench/*.zig` is a program printing one result line; they run one after another so
/// that no two benchmarks share the two cores.
fn addBenchmarks(b: *std.Build, target: std.Build.ResolvedTarget) void {
    const step = b.step("bench", "Run every benchmark in bench/ (ReleaseFast)");
    const weft = weftModule(b, target, .ReleaseFast);
    const harness = harnessModule(b, target, .ReleaseFast);
    var previous: ?*std.Build.Step = null;
    for (listZigFiles(b, "bench")) |name| {
        const exe = b.addExecutable(.{
            .name = b.fmt("bench-{s}", .{name}),
            .root_module = b.createModule(.{
                .root_source_file = b.path(b.fmt("bench/{s}.zig", .{name})),
                .target = target,
                .optimize = .ReleaseFast,
                .imports = &.{
                    .{ .name = "weft", .module = weft },
                    .{ .name = "harness", .module = harness },
                },
            }),
        });
        b.installArtifact(exe);
        // `./zigw build install-bench-NAME` rebuilds one benchmark alone, for quick A/B runs.
        const install_one = b.step(b.fmt("install-bench-{s}", .{name}), b.fmt("Install zig-out/bin/bench-{s} only", .{name}));
        install_one.dependOn(&b.addInstallArtifact(exe, .{}).step);
        const run = b.addRunArtifact(exe);
        run.has_side_effects = true;
        if (b.args) |args| run.addArgs(args);
        if (previous) |p| run.step.dependOn(p);
        previous = &run.step;
        step.dependOn(&run.step);
    }
}

/// Paths (relative to `sub_path`) of every file under `sub_path`, sorted.
fn listFilesUnder(b: *std.Build, sub_path: []const u8) []const []const u8 {
    const io = b.graph.io;
    var dir = b.build_root.handle.openDir(io, sub_path, .{ .iterate = true }) catch
        return &.{};
    defer dir.close(io);
    var walker = dir.walk(b.allocator) catch @panic("OOM");
    defer walker.deinit();
    var paths: std.ArrayList([]const u8) = .empty;
    while (walker.next(io) catch null) |entry| {
        if (entry.kind != .file) continue;
        paths.append(b.allocator, b.dupe(entry.path)) catch @panic("OOM");
    }
    sortNames(paths.items);
    return paths.items;
}

/// Names in the repository root that git may track, sorted: not `.git`, nor a name that a line
/// of `.gitignore` names exactly (`zig-out/`, `.zig-cache/`, `.zig-toolchain/`), so that a
/// build that creates `zig-out` does not change the tests' inputs.
fn listRootEntries(b: *std.Build) []const []const u8 {
    const io = b.graph.io;
    const root = b.build_root.handle;
    const gitignore = root.readFileAlloc(io, ".gitignore", b.allocator, .limited(1 << 16)) catch
        "";
    var dir = root.openDir(io, ".", .{ .iterate = true }) catch return &.{};
    defer dir.close(io);
    var names: std.ArrayList([]const u8) = .empty;
    var it = dir.iterate();
    entries: while (it.next(io) catch null) |entry| {
        if (std.mem.eql(u8, entry.name, ".git")) continue;
        var lines = std.mem.tokenizeScalar(u8, gitignore, '\n');
        while (lines.next()) |line| {
            if (std.mem.eql(u8, std.mem.trimEnd(u8, line, "/"), entry.name)) continue :entries;
        }
        names.append(b.allocator, b.dupe(entry.name)) catch @panic("OOM");
    }
    sortNames(names.items);
    return names.items;
}

fn sortNames(names: [][]const u8) void {
    std.mem.sort([]const u8, names, {}, struct {
        fn lessThan(_: void, a: []const u8, c: []const u8) bool {
            return std.mem.lessThan(u8, a, c);
        }
    }.lessThan);
}

/// Names (without `.zig`) of the Zig files directly inside `sub_path`, sorted.
/// The examples that need Linux: weft-serve (the benchmarks' server: its defaults are the
/// fiber runtime's `SO_REUSEPORT` listeners and signals), observe (a stall and a task dump,
/// the fiber runtime's) and the demo (the benchmarks' harness, Linux's). `examples` leaves
/// them out off Linux and builds every other one there.
const linux_examples = [_][]const u8{ "serve", "observe", "demo" };

fn buildsOn(target: std.Build.ResolvedTarget, name: []const u8) bool {
    if (target.result.os.tag == .linux) return true;
    for (linux_examples) |linux_only| {
        if (std.mem.eql(u8, linux_only, name)) return false;
    }
    return true;
}

fn listZigFiles(b: *std.Build, sub_path: []const u8) []const []const u8 {
    const io = b.graph.io;
    var dir = b.build_root.handle.openDir(io, sub_path, .{ .iterate = true }) catch
        return &.{};
    defer dir.close(io);
    var names: std.ArrayList([]const u8) = .empty;
    var it = dir.iterate();
    while (it.next(io) catch null) |entry| {
        if (entry.kind != .file) continue;
        if (!std.mem.endsWith(u8, entry.name, ".zig")) continue;
        names.append(b.allocator, b.dupe(entry.name[0 .. entry.name.len - 4])) catch @panic("OOM");
    }
    sortNames(names.items);
    return names.items;
}
