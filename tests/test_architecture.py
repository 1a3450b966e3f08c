"""The project's import rules, checked by walking the source (docs/architecture.md).

1. No app imports the project: only `kookee` imports `kookee`.
2. `helpcenter` imports neither `chat` nor `billing`; `billing` imports neither `chat` nor `helpcenter`.
3. `base` imports nothing first-party but `base`.
4. No cycles in the module import graph (an import of a package is an edge to its
   __init__.py only, not to its submodules).
5. chat's rooms depend one way: ROOMS below says which modules are in which room,
   LAYERS which rooms each may import.
6. chat reaches the help center through helpcenter.search only.
7. The Django-free core (DJANGO_FREE, type-checked by mypy) imports no Django, directly
   or through the first-party modules it imports.

Every import counts, at module level or inside a function or an `if TYPE_CHECKING:`
block: a lazy import is still a dependency. Migrations are frozen history and are
left out. A string such as "chat.Turn" in a ForeignKey is not an import.
"""

import ast
import tomllib
from itertools import pairwise
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APPS = ("kookee", "base", "chat", "billing", "helpcenter")

# chat's rooms: the module prefixes in each, and the rooms each may import (its own
# room included). A room not listed in LAYERS (the wiring) may import anything in chat.
ROOMS = {
    "core": ("chat.models", "chat.vocabulary", "chat.sources", "chat.errors", "chat.text"),
    "visitors": ("chat.visitors",),
    "ops": ("chat.ops",),
    "support": ("chat.support",),
    "actions": ("chat.actions",),
    "assistant": ("chat.assistant",),
    "engine": ("chat.engine",),
    "wiring": (
        *("chat.admin", "chat.views", "chat.routing", "chat.apps", "chat.roles"),
        *("chat.management", "chat.templatetags"),
    ),
}
LAYERS = {
    "core": {"core"},
    "visitors": {"core", "visitors"},
    "ops": {"core", "visitors", "ops"},
    "support": {"core", "visitors", "ops", "support"},
    "actions": {"core", "visitors", "ops", "actions"},
    "assistant": {"core", "assistant"},
    "engine": {"core", "visitors", "ops", "support", "actions", "assistant", "engine"},
}


# Modules that import no Django, so that they stay plain Python (mypy checks them, with the turn's path).
DJANGO_FREE = (
    *("chat.vocabulary", "chat.text", "chat.sources", "chat.engine.rounds", "chat.engine.sse"),
    *("chat.engine.frames", "chat.engine.fastjson", "billing.tokens"),
    *("chat.engine.assembler", "chat.engine.usage", "chat.engine.provider_errors"),
    *("chat.engine.coalescer", "chat.engine.deadline"),
    *("chat.actions.openapi", "chat.actions.request"),
)


def module_name(path):
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


FILES = {module_name(p): p for app in APPS for p in sorted((ROOT / app).rglob("*.py")) if "migrations" not in p.parts}


def under(module, prefix):
    return module == prefix or module.startswith(prefix + ".")


def imports_in(source, module, is_package, modules):
    """(line, imported module) for each first-party import anywhere in source."""
    package = module if is_package else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:  # `import a.b.C` names module a.b
                target = target.rpartition(".")[0]
            if target and target != module:
                found.append((node.lineno, target))
    return sorted(found)


def collect():
    """Every first-party import: (importer, imported, "file:line")."""
    edges = []
    for module, path in FILES.items():
        for line, target in imports_in(path.read_text(), module, path.name == "__init__.py", FILES):
            edges.append((module, target, f"{path.relative_to(ROOT)}:{line}"))
    return edges


EDGES = collect()


def report(rule, bad):
    lines = "\n".join(f"  {where}: {importer} -> {imported}" for importer, imported, where in bad)
    return f"{rule}:\n{lines}"


def find_cycles(graph):
    """One cycle per back edge met in a depth-first walk, each as [a, b, ..., a]."""
    cycles, done, path = [], set(), []

    def visit(node):
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt in path:
                cycles.append([*path[path.index(nxt) :], nxt])
            elif nxt not in done:
                visit(nxt)
        path.pop()
        done.add(node)

    for node in sorted(graph):
        if node not in done:
            visit(node)
    return cycles


def room_of(module):
    return next((room for room, prefixes in ROOMS.items() if any(under(module, p) for p in prefixes)), None)


def test_walker_sees_the_imports():
    assert len(FILES) > 50
    assert ("chat.engine.turns", "chat.engine.rounds") in {(a, b) for a, b, _ in EDGES}
    source = "from . import rounds\nfrom .hub import X\ndef f():\n    import chat.models\n"
    source += "if TYPE_CHECKING:\n    from chat import ops\n"
    modules = {"chat", "chat.models", "chat.ops", "chat.engine", "chat.engine.rounds", "chat.engine.hub"}
    assert [t for _, t in imports_in(source, "chat.engine.turns", False, modules)] == [
        "chat.engine.rounds",
        "chat.engine.hub",
        "chat.models",
        "chat.ops",
    ]
    assert (room_of("chat.engine.turns"), room_of("chat.templatetags.transcript")) == ("engine", "wiring")
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_no_app_imports_the_project():
    bad = [e for e in EDGES if not under(e[0], "kookee") and under(e[1], "kookee")]
    assert not bad, report("Only kookee may import kookee", bad)


def test_helpcenter_and_billing_stand_alone():
    forbidden = {"helpcenter": ("chat", "billing"), "billing": ("chat", "helpcenter")}
    bad = [e for e in EDGES for app, no in forbidden.items() if under(e[0], app) and any(under(e[1], n) for n in no)]
    assert not bad, report("helpcenter imports neither chat nor billing; billing neither chat nor helpcenter", bad)


def test_base_imports_only_base():
    bad = [e for e in EDGES if under(e[0], "base") and not under(e[1], "base")]
    assert not bad, report("base imports nothing first-party but base", bad)


def runtime_edges(edges):
    """The edges, plus one to each package a module is imported through:
    importing a.b.c runs a/b/__init__.py first, and whatever that imports.
    (Not the importer's own packages: they are running already.)"""
    found = list(edges)
    for importer, imported, loc in edges:
        package = imported.rpartition(".")[0]
        while package:
            if package in FILES and not under(importer, package):
                found.append((importer, package, loc))
            package = package.rpartition(".")[0]
    return found


def test_no_import_cycles():
    graph, where = {}, {}
    for importer, imported, loc in runtime_edges(EDGES):
        graph.setdefault(importer, set()).add(imported)
        where.setdefault((importer, imported), loc)
    cycles = find_cycles(graph)
    lines = [
        " -> ".join(c) + "\n" + "\n".join(f"    {where[a, b]}: {a} -> {b}" for a, b in pairwise(c)) for c in cycles
    ]
    assert not cycles, "Import cycles:\n  " + "\n  ".join(lines)


def test_every_chat_module_has_a_room():
    homeless = [m for m in FILES if m.startswith("chat.") and room_of(m) is None]
    assert not homeless, f"chat modules in no room of ROOMS: {', '.join(homeless)}"


def test_chat_rooms_depend_one_way():
    bad = []
    for importer, imported, loc in EDGES:
        room, other = room_of(importer), room_of(imported)
        if room in LAYERS and other is not None and other not in LAYERS[room]:
            bad.append(f"  {loc}: {importer} -> {imported}  ({room} may import only {', '.join(sorted(LAYERS[room]))})")
    assert not bad, "chat's rooms depend one way (LAYERS):\n" + "\n".join(bad)


def test_chat_reaches_the_help_center_through_its_door():
    bad = [e for e in EDGES if under(e[0], "chat") and under(e[1], "helpcenter") and e[1] != "helpcenter.search"]
    assert not bad, report("chat imports helpcenter.search only", bad)


def third_party_imports(module):
    """The top-level names of every import in a module that is not first-party."""
    names = set()
    for node in ast.walk(ast.parse(FILES[module].read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.partition(".")[0])
    return names - set(APPS)


def test_the_core_imports_no_django():
    graph = {}
    for importer, imported, _ in EDGES:
        graph.setdefault(importer, set()).add(imported)
    bad = []
    for module in DJANGO_FREE:
        reached, todo = set(), [module]
        while todo:  # the module and every first-party module it imports, transitively
            current = todo.pop()
            if current not in reached:
                reached.add(current)
                todo.extend(graph.get(current, ()))
        bad += [f"{module} (through {m})" for m in sorted(reached) if {"django", "channels"} & third_party_imports(m)]
    assert not bad, "The Django-free core imports Django: " + ", ".join(bad)
    assert "django" in third_party_imports("chat.models.conversations"), (
        "the check sees a Django import where there is one"
    )


def test_mypy_checks_the_core_and_the_turns_path():
    checked = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["files"]

    def covered(path):
        return any(path == entry or path.startswith(entry.rstrip("/") + "/") for entry in checked)

    turns_path = ("chat/engine/consumers.py", "chat/engine/turns.py", "chat/visitors/limits.py")
    turns_path += ("billing/services.py", "helpcenter/search.py")
    missing = [p for p in (*(str(FILES[m].relative_to(ROOT)) for m in DJANGO_FREE), *turns_path) if not covered(p)]
    assert not missing, f"mypy does not check {missing}"


# Product modules may hold at most this many lines: a longer one holds two
# jobs. kookee/settings.py is the exception: one flat list of settings, each
# read with its default and its reason, which splitting would scatter.
MAX_LINES = 450
LONG_ON_PURPOSE = {"kookee.settings"}


def test_no_product_module_is_over_450_lines():
    long = {m: n for m, p in FILES.items() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert set(long) <= LONG_ON_PURPOSE, f"over {MAX_LINES} lines: {long}"


def frame_types_built_in(path):
    """The "type" of every dict literal in the file: a string, or the
    source of the expression that gives it (a constant's name)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value == "type":
                    kind = value.value if isinstance(value, ast.Constant) else ast.unparse(value)
                    found.append((node.lineno, str(kind)))
    return found


def test_every_frame_to_a_visitor_is_built_in_frames():
    frames_path = FILES["chat.engine.frames"]
    frame_types = {t for _, t in frame_types_built_in(frames_path)}
    assert {"delta", "turn.ended", "error", "agent.message"} <= frame_types, "the check reads frames.py's frames"
    elsewhere = [
        f"{path.relative_to(ROOT)}:{line}: {kind}"
        for module, path in FILES.items()
        if under(module, "chat") and path != frames_path
        for line, kind in frame_types_built_in(path)
        if kind in frame_types
    ]
    assert not elsewhere, "frames built outside chat/engine/frames.py:\n" + "\n".join(elsewhere)


def test_the_hubs_messages_are_built_in_its_protocol():
    protocol = FILES["chat.engine.hub_protocol"]
    assert len(frame_types_built_in(protocol)) >= 10, "the check reads the hub's messages"
    elsewhere = [
        f"{path.relative_to(ROOT)}:{line}: {kind}"
        for module, path in FILES.items()
        if path != protocol
        for line, kind in frame_types_built_in(path)
        if kind.startswith("hub.") or "hub_protocol." in kind
    ]
    assert not elsewhere, "hub messages built outside chat/engine/hub_protocol.py:\n" + "\n".join(elsewhere)
