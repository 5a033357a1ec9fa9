//! Lists the functions a Zig source file defines, each by the name the compiler gives its
//! symbol with generic arguments left out: `sync.channel.Channel.send` for `send` in the struct
//! that `Channel(T)` returns in src/sync/channel.zig. build/coverage.sh matches these names
//! against the functions a test run reached (the symbols `addr2line` gives for the code
//! blocks it ran), so a function that no test reaches shows even when nothing calls it and
//! the compiler left it out of the binary.
//!
//!   zig run build/functions.zig -- [--public] <source root> <file>...
//!
//! One name per line. The namespace of a file is its path below the source root, with `/` as
//! `.` and without `.zig`. Containers are followed into `const X = struct {...}` and into the
//! struct a type-returning `fn X(...) type` returns; the type-returning function itself runs at
//! compile time only and is not listed. `--public` lists only `pub` functions reachable
//! through `pub` containers: the operations a user calls.
const std = @import("std");
const Io = std.Io;
const Ast = std.zig.Ast;

pub fn main(init: std.process.Init) !void {
    const io = init.io;
    const arena = init.arena.allocator();
    const args = try init.minimal.args.toSlice(arena);
    var public_only = false;
    var rest = args[1..];
    if (rest.len > 0 and std.mem.eql(u8, rest[0], "--public")) {
        public_only = true;
        rest = rest[1..];
    }
    if (rest.len < 2) {
        std.process.fatal("usage: {s} [--public] <source root> <file>...", .{args[0]});
    }
    const root = rest[0];

    var stdout_buffer: [4096]u8 = undefined;
    var stdout = Io.File.stdout().writer(io, &stdout_buffer);
    const out = &stdout.interface;
    for (rest[1..]) |path| {
        const relative = std.fs.path.relative(arena, ".", null, root, path) catch |err|
            std.process.fatal("{s}: {t}", .{ path, err });
        if (std.mem.startsWith(u8, relative, "..") or !std.mem.endsWith(u8, relative, ".zig")) {
            std.process.fatal("{s}: not a .zig file below {s}", .{ path, root });
        }
        const namespace = try arena.dupe(u8, relative[0 .. relative.len - ".zig".len]);
        std.mem.replaceScalar(u8, namespace, '/', '.');

        const source = Io.Dir.cwd().readFileAllocOptions(
            io,
            path,
            arena,
            .limited(16 * 1024 * 1024),
            .of(u8),
            0,
        ) catch |err| std.process.fatal("{s}: {t}", .{ path, err });
        var tree = try Ast.parse(arena, source, .zig);
        if (tree.errors.len > 0) std.process.fatal("{s}: does not parse", .{path});
        const lister: Lister = .{ .tree = &tree, .out = out, .public_only = public_only };
        try lister.container(namespace, tree.rootDecls());
    }
    try out.flush();
}

const Lister = struct {
    tree: *const Ast,
    out: *Io.Writer,
    public_only: bool,

    /// Lists the functions among `members`, a container's declarations, under `prefix`.
    fn container(lister: Lister, prefix: []const u8, members: []const Ast.Node.Index) Io.Writer.Error!void {
        const tree = lister.tree;
        for (members) |member| {
            switch (tree.nodeTag(member)) {
                .fn_decl => {
                    var buffer: [1]Ast.Node.Index = undefined;
                    const proto = tree.fullFnProto(&buffer, member).?;
                    const name_token = proto.name_token orelse continue;
                    const public = proto.visib_token != null;
                    if (lister.public_only and !public) continue;
                    const name = tree.tokenSlice(name_token);
                    const returns_type = if (proto.ast.return_type.unwrap()) |node|
                        std.mem.eql(u8, tree.getNodeSource(node), "type")
                    else
                        false;
                    if (!returns_type) {
                        try lister.out.print("{s}.{s}\n", .{ prefix, name });
                        continue;
                    }
                    // A type constructor: its functions are those of the struct it returns.
                    const body = tree.nodeData(member).node_and_node[1];
                    var statements_buffer: [2]Ast.Node.Index = undefined;
                    const statements = tree.blockStatements(&statements_buffer, body) orelse
                        continue;
                    for (statements) |statement| {
                        if (tree.nodeTag(statement) != .@"return") continue;
                        const value = tree.nodeData(statement).opt_node.unwrap() orelse continue;
                        try lister.nested(prefix, name, value);
                    }
                },
                .simple_var_decl, .aligned_var_decl, .local_var_decl, .global_var_decl => {
                    const declaration = tree.fullVarDecl(member).?;
                    if (lister.public_only and declaration.visib_token == null) continue;
                    const value = declaration.ast.init_node.unwrap() orelse continue;
                    const name = tree.tokenSlice(declaration.ast.mut_token + 1);
                    try lister.nested(prefix, name, value);
                },
                else => {},
            }
        }
    }

    /// Follows `value` when it is a container declaration, named `name` under `prefix`.
    fn nested(
        lister: Lister,
        prefix: []const u8,
        name: []const u8,
        value: Ast.Node.Index,
    ) Io.Writer.Error!void {
        var buffer: [2]Ast.Node.Index = undefined;
        const declaration = lister.tree.fullContainerDecl(&buffer, value) orelse return;
        var name_buffer: [512]u8 = undefined;
        const inner = std.fmt.bufPrint(&name_buffer, "{s}.{s}", .{ prefix, name }) catch
            std.process.fatal("{s}.{s}: name too long", .{ prefix, name });
        try lister.container(inner, declaration.ast.members);
    }
};
