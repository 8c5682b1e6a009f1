"""The import rules of docs/architecture.md, checked on every module's source.

    trainqd ──> trainq.core <── trainq (the CLI and the Python client)

- trainq.core imports neither the CLI nor trainqd;
- trainqd imports nothing of trainq outside trainq.core;
- the CLI and the client never import trainqd;
- the monitor (trainqd.monitor) imports the standard library, its own modules and the
  standard-library-only modules of trainq.core, nothing else: it starts with `python -S -I`
  and must start fast;
- the CLI's fast path (`trainq submit`, `trainq ls`) never loads pydantic or rich;
- the client layer (trainq.client) imports nothing of the commands, and only it names the
  API's paths;
- no import cycle in the CLI or in trainqd (`cycles`), and trainqd's layers (`LAYERS`) in
  order: a module never imports one of a higher layer.

Imports are read from the syntax tree, so an import inside a function or under
TYPE_CHECKING counts too.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

import trainq
import trainqd

CLI_ROOT = Path(trainq.__file__).resolve().parent
DAEMON_ROOT = Path(trainqd.__file__).resolve().parent
MONITOR_ROOT = DAEMON_ROOT / "monitor"
# What the monitor may take of trainq.core: modules that import the standard library alone.
STDLIB_CORE = {
    "trainq",
    "trainq.core",
    "trainq.core.dependencies",
    "trainq.core.layout",
    "trainq.core.outcomes",
    "trainq.core.reasons",
}


# trainqd's layers, highest first (the picture in docs/architecture.md): a module imports
# modules of its own layer and of those below, never of one above. The packages of one layer
# may use each other, never in a cycle.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("trainqd.__main__", "trainqd.main", "trainqd.app", "trainqd.run"),  # entry points
    ("trainqd.api",),
    ("trainqd.backends",),
    ("trainqd.scheduling",),
    ("trainqd.experiments",),
    ("trainqd.planning", "trainqd.attempts", "trainqd.access", "trainqd.observe", "trainqd.config"),
    ("trainqd.store",),
    (
        "trainqd.gpus",
        "trainqd.children",
        "trainqd.departure",
        "trainqd.gc_tuning",
        "trainqd.sdnotify",
    ),
    ("trainqd.monitor",),
)

CLI_MODULES: dict[str, Path] = {}
DAEMON_MODULES: dict[str, Path] = {}


def module_name(path: Path, root: Path, package: str) -> str:
    parts = [package, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path, package: str) -> Iterator[tuple[str, Path]]:
    for path in sorted(root.rglob("*.py")):
        yield module_name(path, root, package), path


def imports(name: str, path: Path) -> set[str]:
    """Every module `path` imports, relative imports resolved."""
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            if target == "__future__":
                continue
            found.add(target)
            # `from package import module` imports the module too.
            found.update(
                f"{target}.{alias.name}"
                for alias in node.names
                if f"{target}.{alias.name}" in CLI_MODULES.keys() | DAEMON_MODULES.keys()
            )
    return found


CLI_MODULES.update(modules(CLI_ROOT, "trainq"))
DAEMON_MODULES.update(modules(DAEMON_ROOT, "trainqd"))


def top(module: str) -> str:
    return module.split(".", maxsplit=1)[0]


def is_stdlib(module: str) -> bool:
    return top(module) in sys.stdlib_module_names


def is_ours(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def violations(mods: dict[str, Path], allowed: Callable[[str], bool]) -> list[str]:
    return [
        f"{name} imports {target}"
        for name, path in mods.items()
        for target in sorted(imports(name, path))
        if not allowed(target)
    ]


def import_graph(mods: Mapping[str, Path]) -> dict[str, set[str]]:
    """Each module's imports among `mods`: the arrows a cycle would run along."""
    return {name: imports(name, path) & mods.keys() for name, path in mods.items()}


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The import cycles of `graph`: each set of modules that reach one another through
    their imports (a strongly connected component of more than one module, or a module that
    imports itself), sorted. Tarjan's algorithm, without recursion."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            target = next((t for t in targets if t in graph), None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph[node]:
                    found.append(sorted(component))
    return sorted(found)


def test_cycles_finds_each_cycle_once() -> None:
    graph = {
        "a": {"b"},
        "b": {"c", "d"},
        "c": {"a"},
        "d": {"e"},
        "e": set(),
        "f": {"f", "outside"},
    }
    assert cycles(graph) == [["a", "b", "c"], ["f"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_in_the_cli() -> None:
    assert cycles(import_graph(CLI_MODULES)) == []


def test_the_client_imports_nothing_of_the_commands() -> None:
    client = {n: p for n, p in CLI_MODULES.items() if is_ours(n, "trainq.client")}

    def allowed(target: str) -> bool:
        return not is_ours(target, "trainq") or any(
            is_ours(target, layer) for layer in ("trainq.client", "trainq.core")
        )

    assert violations(client, allowed) == []


def api_paths(path: Path) -> list[str]:
    """Where `path` has a string literal (or an f-string's first part) that begins with an
    API path."""
    return [
        f"{path.name}:{node.lineno}"
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value.startswith("/v1")
    ]


def test_only_the_client_names_the_apis_paths() -> None:
    outside = [
        place
        for name, path in CLI_MODULES.items()
        if not is_ours(name, "trainq.client") and not is_ours(name, "trainq.core")
        for place in api_paths(path)
    ]
    assert outside == []
    assert api_paths(CLI_ROOT / "client" / "api.py")  # the check sees them where they are


def layer(module: str) -> int | None:
    """The index in LAYERS of the layer `module` belongs to (0: the highest)."""
    for number, members in enumerate(LAYERS):
        if any(is_ours(module, member) for member in members):
            return number
    return None


def test_the_module_walk_sees_every_layer() -> None:
    assert "trainq.core.wire" in CLI_MODULES
    assert "trainq.cli" in CLI_MODULES
    assert "trainqd.scheduling.scheduler" in DAEMON_MODULES
    assert "trainqd.monitor.supervise" in DAEMON_MODULES
    assert "trainqd.monitor.records" in imports(
        "trainqd.monitor.spawn", DAEMON_MODULES["trainqd.monitor.spawn"]
    )


def test_core_imports_neither_the_cli_nor_the_daemon() -> None:
    core = {n: p for n, p in CLI_MODULES.items() if is_ours(n, "trainq.core")}

    def allowed(target: str) -> bool:
        if is_ours(target, "trainqd"):
            return False
        return not is_ours(target, "trainq") or is_ours(target, "trainq.core")

    assert violations(core, allowed) == []


def test_the_cli_never_imports_the_daemon() -> None:
    assert violations(CLI_MODULES, lambda target: not is_ours(target, "trainqd")) == []


def test_the_daemon_imports_only_the_core_of_trainq() -> None:
    def allowed(target: str) -> bool:
        return not is_ours(target, "trainq") or is_ours(target, "trainq.core")

    assert violations(DAEMON_MODULES, allowed) == []


def test_stdlib_core_modules_import_only_the_standard_library() -> None:
    mods = {n: CLI_MODULES[n] for n in STDLIB_CORE if n not in ("trainq", "trainq.core")}

    def allowed(target: str) -> bool:
        return is_stdlib(target) or target in STDLIB_CORE

    assert violations(mods, allowed) == []


def test_the_monitor_imports_only_the_standard_library_and_itself() -> None:
    monitor = {n: p for n, p in DAEMON_MODULES.items() if is_ours(n, "trainqd.monitor")}

    def allowed(target: str) -> bool:
        return (
            is_stdlib(target)
            or is_ours(target, "trainqd.monitor")
            or target in STDLIB_CORE
            or target == "trainqd"  # the namespace of `from trainqd.monitor import x`
        )

    assert violations(monitor, allowed) == []


def test_the_monitor_starts_without_anything_but_the_standard_library() -> None:
    """What the monitor's interpreter holds once it has imported all of its code, booted as
    trainqd boots it (`python -S -I`): no site-packages, so a third-party import fails."""
    from trainqd.monitor.spawn import monitor_argv

    argv = monitor_argv()
    boot = argv[-1].split("from trainqd.monitor.__main__")[0]
    names = sorted(n for n in DAEMON_MODULES if is_ours(n, "trainqd.monitor"))
    probe = boot + f"import {', '.join(names)}; print('\\n'.join(sys.modules))"
    done = subprocess.run(
        [*argv[:-1], probe], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = set(done.stdout.split())
    foreign = {
        m
        for m in loaded
        if not is_stdlib(m) and not is_ours(m, "trainqd.monitor") and m not in STDLIB_CORE
    } - {"trainqd", "__main__"}
    assert foreign == set()


def test_no_import_cycle_between_the_layers() -> None:
    """daemon -> core <- CLI: an arrow from the core back out would make a cycle."""
    layer_of = {n: "core" for n in CLI_MODULES if is_ours(n, "trainq.core")}
    layer_of.update({n: "cli" for n in CLI_MODULES if n not in layer_of})
    layer_of.update({n: "daemon" for n in DAEMON_MODULES})
    arrows = set()
    for name, path in {**CLI_MODULES, **DAEMON_MODULES}.items():
        for target in imports(name, path):
            if target in layer_of and layer_of[target] != layer_of[name]:
                arrows.add((layer_of[name], layer_of[target]))
    assert arrows <= {("daemon", "core"), ("cli", "core")}


def test_the_cycle_finder_finds_cycles(tmp_path: Path) -> None:
    sources = {
        "a": "from trainqd.fake.b import x",  # a -> b -> c -> a: one cycle
        "b": "import trainqd.fake.c",
        "c": "from .a import x",
        "d": "from trainqd.fake.a import x",  # d only leads into the cycle
        "e": "if TYPE_CHECKING:\n    from trainqd.fake.f import x",
        "f": "import trainqd.fake.e",  # e <-> f, through a TYPE_CHECKING import
    }
    mods = {}
    for name, text in sources.items():
        (tmp_path / f"{name}.py").write_text(text + "\n")
        mods[f"trainqd.fake.{name}"] = tmp_path / f"{name}.py"
    assert cycles(import_graph(mods)) == [
        ["trainqd.fake.a", "trainqd.fake.b", "trainqd.fake.c"],
        ["trainqd.fake.e", "trainqd.fake.f"],
    ]


def test_no_import_cycle_in_trainqd() -> None:
    assert cycles(import_graph(DAEMON_MODULES)) == []


def test_every_trainqd_module_has_a_layer() -> None:
    assert [name for name in DAEMON_MODULES if name != "trainqd" and layer(name) is None] == []


def test_no_trainqd_layer_imports_a_higher_one() -> None:
    upward = []
    for name, targets in import_graph(DAEMON_MODULES).items():
        own = layer(name)
        for target in sorted(targets):
            above = layer(target)
            if own is not None and above is not None and above < own:
                upward.append(f"{name} imports {target}")
    assert upward == []


def test_only_app_imports_the_scheduler() -> None:
    """Parts are built in app.py and handed to each other: none reaches another through the
    scheduler, and the API knows it only as `JobControl`."""
    importers = {
        name
        for name, targets in import_graph(DAEMON_MODULES).items()
        if "trainqd.scheduling.scheduler" in targets
    }
    assert importers <= {"trainqd.app"}


@pytest.mark.parametrize(
    "argv",
    [
        ["ls"],
        ["submit", "--", "true"],
    ],
)
def test_the_cli_fast_path_loads_neither_pydantic_nor_rich(tmp_path: Path, argv: list[str]) -> None:
    """`trainq ls` and `trainq submit` against a socket nobody serves: the command gets as
    far as connecting, and whatever it loaded to get there is in -X importtime's list."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINQ")}
    env["TRAINQ_SOCKET"] = str(tmp_path / "nobody.sock")
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "trainq", *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0  # nobody serves the socket: it did try to connect
    loaded = {
        line.rsplit("|", 1)[1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and line.count("|") == 2
    }
    assert "trainq.cli" in loaded
    assert {m for m in loaded if top(m) in ("pydantic", "rich")} == set()
