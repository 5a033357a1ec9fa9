//! The tidy test (after TigerBeetle's `src/tidy.zig`): what no file's own tests can check,
//! over every file under `src/`, so that style and structure are kept by a test, not by memory.
//!
//! - Layers: every `@import` points down the order of layers that docs/ARCHITECTURE.md draws
//!   (its `layers` block), or stays within its own layer.
//! - Lines: none in `src/` over 100 columns.
//! - Reachability: every `.zig` file under `src/` is imported, directly or not, from `root.zig`
//!   or another test root; a file nothing imports is never compiled, so never checked.
//! - The test list: `root.zig`'s test block imports exactly the files that have tests, in path
//!   order. Zig runs a file's tests only if the file is analysed in the test build, which a
//!   file reached only through declarations nobody uses is not; the list is explicit, and this
//!   test keeps it complete (it prints the list to paste when it is not).
//! - The repository root: every name there is in docs/ARCHITECTURE.md's list, and every name in
//!   the list is there.
//!
//! The files are read from the repository at run time; their names come from the build
//! (`tidy_options`, listed when the build is configured), so adding or removing a file reruns
//! these tests even when no compiled file changed.
const std = @import("std");
const assert = std.debug.assert;
const Io = std.Io;
const options = @import("tidy_options");

const line_columns_max = 100;

/// What `@import` names that is not a file under src/: modules the build gives the library
/// and its test binaries.
const modules = [_][]const u8{
    "std",          "builtin", "root",            "build_options",      "README.md",
    "hello.zig",    "weft",    "ARCHITECTURE.md", "std_runner_options", "tidy_options",
    "test_options",
};

/// The roots of the test binaries whose code lies under src/: the unit tests (`root.zig`, also
/// the library's root) and the runner of std's own tests (build/std_tests.zig).
const roots = [_][]const u8{ "root.zig", "testing/std_runner.zig", "portable_tests.zig" };

const Import = struct {
    /// A path relative to src/ (normalised), or a module name.
    target: []const u8,
    line: usize,
    file: bool,
    /// Inside a top-level `test` declaration.
    in_test: bool,
};

const File = struct {
    /// Relative to src/.
    path: []const u8,
    source: [:0]const u8,
    imports: []const Import,
    /// Has a top-level `test` declaration.
    tests: bool,
};

/// Every `.zig` file under src/, sorted by path, read and scanned.
const Tree = struct {
    arena: std.heap.ArenaAllocator,
    files: []const File,

    fn load() !Tree {
        var arena: std.heap.ArenaAllocator = .init(std.testing.allocator);
        errdefer arena.deinit();
        const gpa = arena.allocator();
        const io = std.testing.io;
        var repo = try Io.Dir.openDirAbsolute(io, options.repo_root, .{});
        defer repo.close(io);
        var files: std.ArrayList(File) = .empty;
        for (options.src_files) |path| {
            if (!std.mem.endsWith(u8, path, ".zig")) continue;
            const full = try std.fmt.allocPrint(gpa, "src/{s}", .{path});
            const source =
                try repo.readFileAllocOptions(io, full, gpa, .limited(1 << 24), .of(u8), 0);
            try files.append(gpa, try scan(gpa, path, source));
        }
        return .{ .arena = arena, .files = files.items };
    }

    fn deinit(tree: *Tree) void {
        tree.arena.deinit();
    }

    fn find(tree: *const Tree, path: []const u8) ?*const File {
        for (tree.files) |*file| {
            if (std.mem.eql(u8, file.path, path)) return file;
        }
        return null;
    }
};

/// The imports of `source` and whether it has tests, from Zig's own tokenizer (so that an
/// `@import` in a comment or a string is not one).
fn scan(gpa: std.mem.Allocator, path: []const u8, source: [:0]const u8) !File {
    var imports: std.ArrayList(Import) = .empty;
    var tokenizer: std.zig.Tokenizer = .init(source);
    var depth: usize = 0;
    var tests = false;
    // Inside the body of a top-level test (`test_pending`: between `test` and its body).
    var test_body = false;
    var test_pending = false;
    var window: [4]std.zig.Token = undefined;
    var seen: usize = 0;
    while (true) {
        const token = tokenizer.next();
        if (token.tag == .eof) break;
        switch (token.tag) {
            .keyword_test => if (depth == 0) {
                tests = true;
                test_pending = true;
            },
            .l_brace => {
                if (test_pending and depth == 0) {
                    test_body = true;
                    test_pending = false;
                }
                depth += 1;
            },
            .r_brace => {
                assert(depth > 0);
                depth -= 1;
                if (depth == 0) test_body = false;
            },
            else => {},
        }
        window[seen % window.len] = token;
        seen += 1;
        if (seen < window.len or token.tag != .r_paren) continue;
        const builtin = window[(seen - 4) % window.len];
        const open = window[(seen - 3) % window.len];
        const literal = window[(seen - 2) % window.len];
        if (builtin.tag != .builtin or open.tag != .l_paren) continue;
        if (literal.tag != .string_literal) continue;
        if (!std.mem.eql(u8, source[builtin.loc.start..builtin.loc.end], "@import")) continue;
        const name = source[literal.loc.start + 1 .. literal.loc.end - 1];
        const line = 1 + std.mem.count(u8, source[0..builtin.loc.start], "\n");
        const is_module = for (modules) |module| {
            if (std.mem.eql(u8, module, name)) break true;
        } else false;
        try imports.append(gpa, .{
            .target = if (is_module) name else try resolve(gpa, path, name),
            .line = line,
            .file = !is_module,
            .in_test = test_body,
        });
    }
    return .{ .path = path, .source = source, .imports = imports.items, .tests = tests };
}

/// `relative` seen from the file `from` (both relative to src/), normalised.
fn resolve(gpa: std.mem.Allocator, from: []const u8, relative: []const u8) ![]const u8 {
    var parts: std.ArrayList([]const u8) = .empty;
    var from_parts = std.mem.splitScalar(u8, std.fs.path.dirnamePosix(from) orelse "", '/');
    while (from_parts.next()) |part| {
        if (part.len > 0) try parts.append(gpa, part);
    }
    var relative_parts = std.mem.splitScalar(u8, relative, '/');
    while (relative_parts.next()) |part| {
        if (std.mem.eql(u8, part, "..")) {
            // Above src/: kept, so that it names no file and is reported.
            if (parts.items.len == 0) try parts.append(gpa, "..") else _ = parts.pop();
        } else if (!std.mem.eql(u8, part, ".")) {
            try parts.append(gpa, part);
        }
    }
    return std.mem.join(gpa, "/", parts.items);
}

/// The lines of a Markdown block that starts with the line `opening` and ends with "```".
fn markdownBlock(text: []const u8, opening: []const u8) ?[]const u8 {
    const marker = std.mem.indexOf(u8, text, opening) orelse return null;
    const start = marker + opening.len;
    const end = std.mem.indexOfPos(u8, text, start, "\n```") orelse return null;
    return text[start..end];
}

const Layer = struct {
    entry: []const u8,
    /// 0 for the bottom line of the block.
    level: usize,
};

/// The layers block of docs/ARCHITECTURE.md: one line per level, top first, each a list of
/// entries (a folder or a file under src/).
const Layers = struct {
    lines: []const []const u8,

    fn parse(gpa: std.mem.Allocator) !Layers {
        const text = @embedFile("ARCHITECTURE.md");
        const block = markdownBlock(text, "```layers\n") orelse return error.LayersBlockMissing;
        var lines: std.ArrayList([]const u8) = .empty;
        var it = std.mem.tokenizeScalar(u8, block, '\n');
        while (it.next()) |line| try lines.append(gpa, line);
        return .{ .lines = lines.items };
    }

    /// The most specific entry that `path` belongs to.
    fn of(layers: Layers, path: []const u8) ?Layer {
        var best: ?Layer = null;
        for (layers.lines, 0..) |line, index| {
            var entries = std.mem.tokenizeScalar(u8, line, ' ');
            while (entries.next()) |entry| {
                const inside = std.mem.eql(u8, path, entry) or
                    (std.mem.startsWith(u8, path, entry) and path.len > entry.len and
                        path[entry.len] == '/');
                if (!inside) continue;
                if (best != null and best.?.entry.len >= entry.len) continue;
                best = .{ .entry = entry, .level = layers.lines.len - 1 - index };
            }
        }
        return best;
    }
};

test "tidy: every @import under src/ points down the layers of docs/ARCHITECTURE.md" {
    var tree: Tree = try .load();
    defer tree.deinit();
    const layers: Layers = try .parse(tree.arena.allocator());
    var failures: usize = 0;
    for (tree.files) |file| {
        const from = layers.of(file.path) orelse {
            std.debug.print("src/{s}: in no layer of docs/ARCHITECTURE.md\n", .{file.path});
            failures += 1;
            continue;
        };
        for (file.imports) |import| {
            if (!import.file) continue;
            const to = layers.of(import.target) orelse continue; // reported for its own file
            if (std.mem.eql(u8, from.entry, to.entry)) continue;
            if (to.level < from.level) continue;
            std.debug.print("src/{s}:{d}: imports src/{s} (layer {s}) from layer {s}, which is " ++
                "not above it in docs/ARCHITECTURE.md\n", .{
                file.path, import.line, import.target, to.entry, from.entry,
            });
            failures += 1;
        }
    }
    try std.testing.expectEqual(@as(usize, 0), failures);
}

test "tidy: no line in src/ is over 100 columns" {
    var tree: Tree = try .load();
    defer tree.deinit();
    var failures: usize = 0;
    for (tree.files) |file| {
        var lines = std.mem.splitScalar(u8, file.source, '\n');
        var number: usize = 1;
        while (lines.next()) |line| : (number += 1) {
            const columns = std.unicode.utf8CountCodepoints(line) catch line.len;
            if (columns <= line_columns_max) continue;
            std.debug.print("src/{s}:{d}: {d} columns\n", .{ file.path, number, columns });
            failures += 1;
        }
    }
    try std.testing.expectEqual(@as(usize, 0), failures);
}

test "tidy: std.os.linux is reached only through a guarded alias" {
    // `std.os.linux` compiles for any x86_64 or aarch64 target (its system calls are inline
    // assembly chosen by architecture), so an unguarded use would put Linux system calls into
    // a macOS or Windows build without an error. Guarded, each use off Linux fails to compile,
    // naming the file that needs a portable path (issue 37).
    var tree: Tree = try .load();
    defer tree.deinit();
    var failures: usize = 0;
    for (tree.files) |file| {
        var lines = std.mem.splitScalar(u8, file.source, '\n');
        var number: usize = 1;
        while (lines.next()) |line| : (number += 1) {
            const trimmed = std.mem.trim(u8, line, " ");
            if (!std.mem.startsWith(u8, trimmed, "const linux = ")) continue;
            const guarded = "const linux = " ++
                "if (builtin.os.tag == .linux) std.os.linux else struct {};";
            if (std.mem.eql(u8, trimmed, guarded)) continue;
            if (std.mem.indexOf(u8, trimmed, "std.os.linux") == null) continue;
            std.debug.print("src/{s}:{d}: write it as `{s}`\n", .{ file.path, number, guarded });
            failures += 1;
        }
    }
    try std.testing.expectEqual(@as(usize, 0), failures);
}

test "tidy: every file under src/ is reachable from root.zig or a test root" {
    var tree: Tree = try .load();
    defer tree.deinit();
    const gpa = tree.arena.allocator();
    const reached = try gpa.alloc(bool, tree.files.len);
    @memset(reached, false);
    var stack: std.ArrayList(*const File) = .empty;
    for (roots) |root| try stack.append(gpa, tree.find(root) orelse return error.RootMissing);
    var failures: usize = 0;
    while (stack.pop()) |file| {
        const index = file - tree.files.ptr;
        if (reached[index]) continue;
        reached[index] = true;
        for (file.imports) |import| {
            if (!import.file) continue;
            const target = tree.find(import.target) orelse {
                std.debug.print("src/{s}:{d}: imports {s}, neither a file under src/ nor a " ++
                    "module of the build\n", .{ file.path, import.line, import.target });
                failures += 1;
                continue;
            };
            try stack.append(gpa, target);
        }
    }
    for (tree.files, reached) |file, is_reached| {
        if (is_reached) continue;
        std.debug.print("src/{s}: imported by nothing that root.zig or a test root reaches\n", .{
            file.path,
        });
        failures += 1;
    }
    try std.testing.expectEqual(@as(usize, 0), failures);
}

test "tidy: root.zig's test block imports exactly the files that have tests, in path order" {
    var tree: Tree = try .load();
    defer tree.deinit();
    const gpa = tree.arena.allocator();
    const root = tree.find("root.zig").?;
    var listed: std.ArrayList([]const u8) = .empty;
    for (root.imports) |import| {
        if (import.file and import.in_test) try listed.append(gpa, import.target);
    }
    var expected: std.ArrayList([]const u8) = .empty;
    for (tree.files) |file| {
        const is_root = for (roots) |r| {
            if (std.mem.eql(u8, r, file.path)) break true;
        } else false;
        if (file.tests and !is_root) try expected.append(gpa, file.path);
    }
    if (listed.items.len == expected.items.len) {
        for (listed.items, expected.items) |a, b| {
            if (!std.mem.eql(u8, a, b)) break;
        } else return;
    }
    std.debug.print("root.zig's test block should import, in this order:\n", .{});
    for (expected.items) |path| std.debug.print("    _ = @import(\"{s}\");\n", .{path});
    return error.TestListStale;
}

test "tidy: every name in the repository root is in docs/ARCHITECTURE.md's list" {
    const text = @embedFile("ARCHITECTURE.md");
    const heading = "\n## The repository\n";
    const start = (std.mem.indexOf(u8, text, heading) orelse return error.ListMissing) +
        heading.len;
    const end = std.mem.indexOfPos(u8, text, start, "\n## ") orelse text.len;
    var documented: [64][]const u8 = undefined;
    var documented_len: usize = 0;
    var lines = std.mem.splitScalar(u8, text[start..end], '\n');
    while (lines.next()) |line| {
        if (!std.mem.startsWith(u8, line, "- `")) continue;
        // The names are the backticked words before the item's first "`:".
        const head_end = std.mem.indexOf(u8, line, "`:") orelse continue;
        var names = std.mem.tokenizeAny(u8, line[2 .. head_end + 1], "`, ");
        while (names.next()) |name| {
            assert(documented_len < documented.len);
            documented[documented_len] = std.mem.trimEnd(u8, name, "/");
            documented_len += 1;
        }
    }
    var failures: usize = 0;
    for (options.root_entries) |entry| {
        for (documented[0..documented_len]) |name| {
            if (std.mem.eql(u8, name, entry)) break;
        } else {
            std.debug.print("{s}: in the repository root, not in docs/ARCHITECTURE.md's " ++
                "list\n", .{entry});
            failures += 1;
        }
    }
    for (documented[0..documented_len]) |name| {
        for (options.root_entries) |entry| {
            if (std.mem.eql(u8, name, entry)) break;
        } else {
            std.debug.print("{s}: in docs/ARCHITECTURE.md's list, not in the repository " ++
                "root\n", .{name});
            failures += 1;
        }
    }
    try std.testing.expectEqual(@as(usize, 0), failures);
}
