//! Build-time tool for `test-std`: writes a copy of the Zig lib directory in which
//! `std.testing.io` can be supplied by the test runner.
//!
//!   std_lib_patch <zig lib dir> --zig-version=<version> <output dir>
//!
//! The version argument is not used; it is there so the build system's cache of this run
//! changes with the compiler.
//!
//! In 0.16, `std/testing.zig` hard-wires `pub const io = io_instance.io()` (a `std.Io.Threaded`)
//! and std has no option to replace it. The output directory therefore gets:
//!
//! * every entry of `<zig lib dir>` except `std/` as a symlink to the original, so libc
//!   headers, compiler_rt and the rest cost nothing to "copy";
//! * `std/` as a real copy (18 MB), with one declaration of `std/testing.zig` patched: `io` is
//!   `@import("root").std_testing_io` when the root module (the test runner) declares it.
//!
//! `std/` is copied rather than symlinked file by file because the compiler resolves
//! `@import` paths against the module root lexically; a real tree keeps every file of the
//! `std` module unambiguously inside the copy, whatever the compiler does with symlinks.
//!
//! The patch is a literal text replacement that must match exactly once. If a toolchain
//! update changes the declaration, the build fails here with the text it looked for, instead
//! of silently running std's tests on Threaded.
const std = @import("std");
const Io = std.Io;

/// The declaration in 0.16.0's `std/testing.zig`.
const io_declaration_original =
    \\pub const io = if (builtin.is_test) io_instance.io() else @compileError("not testing");
;

/// `io_instance` stays declared so that the default test runner, and anything else assigning
/// it, still compiles; only what `std.testing.io` resolves to changes. The `@hasDecl` keeps
/// the copy usable with the default runner too.
const io_declaration_patched =
    \\pub const io = if (!builtin.is_test)
    \\    @compileError("not testing")
    \\else if (@hasDecl(@import("root"), "std_testing_io"))
    \\    // Patched by weft's build/std_lib_patch.zig: the test runner supplies the Io.
    \\    @as(Io, @import("root").std_testing_io)
    \\else
    \\    io_instance.io();
;

const testing_sub_path = "std/testing.zig";

/// Bound on the size of `std/testing.zig`; 0.16.0's is about 50 KB.
const testing_bytes_max = 4 * 1024 * 1024;

pub fn main(init: std.process.Init) !void {
    const io = init.io;
    const arena = init.arena.allocator();
    const args = try init.minimal.args.toSlice(arena);
    if (args.len != 4 or !std.mem.startsWith(u8, args[2], "--zig-version=")) {
        std.process.fatal("usage: {s} <zig lib dir> --zig-version=<v> <output dir>", .{args[0]});
    }
    // Symlink targets must not depend on the tool's working directory.
    const lib_path = try Io.Dir.cwd().realPathFileAlloc(io, args[1], arena);
    const out_path = args[3];

    var lib_dir = try Io.Dir.cwd().openDir(io, lib_path, .{ .iterate = true });
    defer lib_dir.close(io);

    // The build system hands over a fresh directory, but a run interrupted half-way may have
    // left entries behind at the same path; start from empty so symLink cannot collide.
    try Io.Dir.cwd().deleteTree(io, out_path);
    try Io.Dir.cwd().createDirPath(io, out_path);
    var out_dir = try Io.Dir.cwd().openDir(io, out_path, .{});
    defer out_dir.close(io);

    var found_std = false;
    var it = lib_dir.iterate();
    while (try it.next(io)) |entry| {
        if (std.mem.eql(u8, entry.name, "std")) {
            found_std = true;
            try copyTree(io, arena, lib_dir, "std", out_dir);
        } else {
            const target = try std.fs.path.join(arena, &.{ lib_path, entry.name });
            try out_dir.symLink(io, target, entry.name, .{
                .is_directory = entry.kind == .directory,
            });
        }
    }
    if (!found_std) std.process.fatal("{s}: no std/ directory", .{lib_path});

    try patchTesting(io, arena, out_dir);
}

/// Copies the directory `sub_path` of `src` to the same sub path of `dst`, recursively.
fn copyTree(
    io: Io,
    arena: std.mem.Allocator,
    src: Io.Dir,
    sub_path: []const u8,
    dst: Io.Dir,
) !void {
    var src_dir = try src.openDir(io, sub_path, .{ .iterate = true });
    defer src_dir.close(io);
    try dst.createDirPath(io, sub_path);
    var dst_dir = try dst.openDir(io, sub_path, .{});
    defer dst_dir.close(io);

    var walker = try src_dir.walk(arena);
    defer walker.deinit();
    while (try walker.next(io)) |entry| {
        switch (entry.kind) {
            .directory => try dst_dir.createDirPath(io, entry.path),
            .file => try entry.dir.copyFile(entry.basename, dst_dir, entry.path, io, .{}),
            // The 0.16.0 wheel's std/ holds only files and directories; anything else would be
            // a layout this tool has not been checked against.
            else => std.process.fatal("std/{s}: unexpected kind {t}", .{ entry.path, entry.kind }),
        }
    }
}

fn patchTesting(io: Io, arena: std.mem.Allocator, out_dir: Io.Dir) !void {
    const original =
        try out_dir.readFileAlloc(io, testing_sub_path, arena, .limited(testing_bytes_max));
    const matches = std.mem.count(u8, original, io_declaration_original);
    if (matches != 1) {
        std.process.fatal(
            "{s}: expected exactly one occurrence of\n  {s}\nfound {d}; " ++
                "update build/std_lib_patch.zig for this Zig version",
            .{ testing_sub_path, io_declaration_original, matches },
        );
    }
    const patched = try std.mem.replaceOwned(
        u8,
        arena,
        original,
        io_declaration_original,
        io_declaration_patched,
    );
    // The copy is a fresh file owned by us; overwrite it in place.
    try out_dir.writeFile(io, .{ .sub_path = testing_sub_path, .data = patched });
}
