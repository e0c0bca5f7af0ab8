from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator
from importlib.metadata import version
from multiprocessing.context import ForkServerContext
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tiny_agent_nb.session import HeaderInit, SessionStore
from tiny_agent_nb.session import facts as f

from helpers import tiers
from helpers.bench_scripts import bench_startup
from helpers.openai_server import OpenAIServer
from helpers.pycache_prefix import fill as fill_pycache_prefix
from helpers.pycache_prefix import kept_prefix as kept_pycache_prefix
from helpers.scenario import BASH, Run, complete_run

if TYPE_CHECKING:
    from helpers.kernel_helpers import KernelPool
    from helpers.lab import Lab

# jsonschema (the MCP layer, nbformat and the schema tests import it) imports rfc3987-syntax
# where it is installed, as Jupyter installs it, and that builds a Lark grammar at import:
# 2.3 s of CPU in every worker, ~10 s of the fast tier's ~150 s. It serves only jsonschema's
# `iri` format checks, which neither the package (its MCP validator checks no formats) nor
# any test asks for, so the test processes go without it. The processes the tests start
# (kernels, CLI runs, MCP servers) are untouched.
sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[assignment]


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    """The loopback OpenAI-compatible server; tests enqueue its replies."""
    with OpenAIServer() as s:
        yield s


@pytest.fixture
def strict_server() -> Iterator[OpenAIServer]:
    """`server`, and the test fails if the client ever sent an invalid conversation
    (a tool call left unanswered, a bad role, ...), even one the code under test survived."""
    with OpenAIServer() as s:
        yield s
        assert not s.invalid_requests, [r.problem for r in s.invalid_requests]


@pytest.fixture
def header_init(tmp_path: Path) -> HeaderInit:
    return HeaderInit(
        cwd=str(tmp_path),
        provider="openrouter",
        model="test/model",
        environment_identity=str(tmp_path),
    )


@pytest.fixture
def session_path(tmp_path: Path) -> Path:
    return tmp_path / "notebook.agent.jsonl"


@pytest.fixture
def store(session_path: Path, header_init: HeaderInit) -> Iterator[SessionStore]:
    s = SessionStore.open(session_path, create=header_init)
    yield s
    s.close()


# Sessions the CLI tests read (tests/helpers/cli_helpers.py calls the CLI).


@pytest.fixture
def completed(store: SessionStore, session_path: Path) -> Path:
    complete_run(store)
    return session_path


@pytest.fixture
def killed_during_bash(store: SessionStore, session_path: Path) -> Path:
    """The kernel died after committing the bash intent, before its result."""
    _die_during_bash(store)
    return session_path


@pytest.fixture
def three_runs(store: SessionStore, session_path: Path) -> Path:
    """A completed run, a failed run (a 401, usage of unknown cost), and an open run with
    a pending bash intent (the kernel died)."""
    complete_run(store, "List the files")
    failed = Run(environment=store.header.environmentIdentity)
    store.commit(failed.start("Summarize the log"))
    store.commit(failed.attempt())
    assert failed.attempt_id is not None
    store.commit(
        [
            f.attempt_failed(
                failed.attempt_id, kind="http", message="401 bad key", retryable=False
            ),
            f.usage(attempt_id=failed.attempt_id, input_tokens=7, output_tokens=0, cost=None),
        ]
    )
    store.commit(
        [
            f.NewFact(
                f.OperationFinished(
                    operationId=failed.operation_id, outcome="failed", detail="401 bad key"
                )
            )
        ]
    )
    _die_during_bash(store)
    return session_path


def _die_during_bash(store: SessionStore) -> None:
    """A run "Deploy" whose bash intent is committed and never answered: the kernel died."""
    run = Run(environment=store.header.environmentIdentity)
    store.commit(run.start("Deploy"))
    store.commit(run.attempt())
    store.commit(run.answer(None, [("call_1", "bash", {"command": "./deploy.sh"})], cost=None))
    store.commit([run.intent("call_1", BASH, {"command": "./deploy.sh"})])


# Hypothesis must not write its example database into the checkout (tests write only to
# temporary directories); CI runs the same number of examples as a developer does.
from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile(
    "default",
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("default")


@pytest.fixture
def sigint_raises() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt, as in a kernel. A test run started in the
    background inherits SIGINT ignored, and Python then installs no handler of its own."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


@pytest.fixture(autouse=True, scope="session")
def _state_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """XDG_STATE_HOME in a temporary directory for the whole run: a test writes nothing
    outside temporary directories. Set in os.environ, so kernels and subprocesses inherit it."""
    saved = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("state"))
    yield
    if saved is None:
        del os.environ["XDG_STATE_HOME"]
    else:
        os.environ["XDG_STATE_HOME"] = saved


@pytest.fixture(scope="session")
def _startup_session_built(_state_home: None, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """bench_startup's 10k-fact session, built once per test process: each build is
    ~7,800 commits (2 s of CPU), and the memory tests only read it, each from a copy."""
    return bench_startup().build(tmp_path_factory.mktemp("startup-session"), 10_000)


@pytest.fixture
def startup_session(_startup_session_built: Path, tmp_path: Path) -> Path:
    """What `bench_startup().build(tmp_path, 10_000)` leaves in `tmp_path`: the session as
    its dead kernel left it, copied from the process's one build."""
    built = _startup_session_built
    shutil.copy2(built, tmp_path / built.name)
    return tmp_path / built.name


@pytest.fixture(scope="session")
def kernel_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KernelPool]:
    """The idle kernels this test process keeps for `start_kernel(shared=True)`
    (tests/helpers/kernel_helpers.py), shut down when the run ends."""
    from helpers.kernel_helpers import KernelPool  # noqa: PLC0415 (kernel tests only)

    pool = KernelPool(tmp_path_factory.mktemp("kernels"))
    yield pool
    pool.close()


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """Headless Chromium for the browser modules (tests/helpers/lab.py), started once per
    test process, in the process that asks for it: the xdist group `browser` runs those
    modules on one worker."""
    from helpers.lab import chromium  # noqa: PLC0415 (Playwright: only where asked for)

    with chromium() as launched:
        yield launched


@pytest.fixture(scope="session")
def lab(_state_home: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """JupyterLab and its model server for the browser modules, started once per test
    process (each start is seconds of CPU); every session has its own directory in it."""
    from helpers.lab import shared_lab  # noqa: PLC0415 (Playwright: only where asked for)

    with shared_lab(tmp_path_factory) as started:
        yield started


# The crash loops (test_session_store_crash, test_agent_crash, test_rewind_killed) fork
# their SIGKILLed children from one multiprocessing forkserver per test process. There is
# only one per process and its preload list is fixed when it starts, so every loop asks
# for the union: whichever runs first on a worker, children of the others still import
# nothing heavy (a fresh interpreter spends ~0.3 s importing pydantic and httpx; hundreds
# of kills cannot afford it), nor their own modules (the children's entry points,
# tests/helpers/scenario.py and what they build at import).
FORKSERVER_PRELOAD = [
    "tiny_agent_nb.session",
    "tiny_agent_nb.agent",
    "tiny_agent_nb.provider",
    "tiny_agent_nb.tools",
    "httpx",
    "httpcore",
    "children.commit_loop",
    "crash.agent_child",
    "children.rewind_kill",
]


@pytest.fixture(scope="session")
def forkserver() -> ForkServerContext:
    """The forkserver, started here with FORKSERVER_PRELOAD imported.

    Python 3.11's forkserver ignores the parent's sys.path (and skips a preload it cannot
    import, silently): it finds this directory's modules only on PYTHONPATH, set for it
    while it starts, after the caller's (its children inherit it, and their processes)."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(FORKSERVER_PRELOAD)
    saved = os.environ.get("PYTHONPATH")
    tests = str(Path(__file__).resolve().parent)
    os.environ["PYTHONPATH"] = os.pathsep.join([*([saved] if saved else []), tests])
    try:
        multiprocessing.forkserver.ensure_running()
    finally:
        if saved is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = saved
    return ctx


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """How many workers `-n auto` (pyproject's addopts) starts: four for a run with the
    integration tier, so that while one waits (a kernel starting, a timeout, a crash loop
    between kills) others compute; for the fast tier (`-m "not integration"`), one per
    core and one more (at most four), the one more for the socket waits of the group
    `provider_limits` (~22 s on one worker). Every worker imports and collects the whole
    suite (~6 s of CPU each): on two cores the fast tier took 111-121 s of CPU in two
    workers, 127 s in three and 137 s in four; 103 s of wall in three, 116-157 s in two,
    154 s in four (01:00-01:14 UTC, load 3-6). PYTEST_XDIST_AUTO_NUM_WORKERS still decides
    where it is set."""
    if "PYTEST_XDIST_AUTO_NUM_WORKERS" in os.environ:
        return None
    if config.getoption("markexpr") == "not integration":
        # the cores this process may use (Linux); macOS has no affinity: all of them
        affinity = getattr(os, "sched_getaffinity", None)
        cores = len(affinity(0)) if affinity is not None else os.cpu_count() or 1
        return min(cores + 1, 4)
    return 4


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that starts a kernel, JupyterLab, Chromium, a crash loop, an MCP server
    or a real model server is marked `integration`, by what it uses (tests/helpers/tiers.py).

    Tests marked `slow` start first. A parallel run (pyproject's addopts) hands tests
    to its workers in this order, so the long ones overlap with the many short ones
    instead of finishing the run alone; a serial run (`-n 0`) only runs them earlier."""
    tiers.mark(items)
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """In a `--dist loadgroup` run, an `xdist_group` test whose group pytest-xdist did not
    put into its node id (all its scheduler reads) fails at once, saying why: the group's
    tests were dealt out to several workers, each module's later tests without the state
    its earlier ones left (and the browser modules with a JupyterLab and a Chromium per
    worker), and would fail as timeouts far from the cause."""
    lost = "@" not in item.nodeid and item.get_closest_marker("xdist_group") is not None
    if lost and item.config.getoption("loadgroup", False):
        pytest.fail(
            f"pytest-xdist {version('pytest-xdist')} under pytest {pytest.__version__} does "
            "not keep an xdist_group's tests on one worker (the group is not in the test's "
            "id: pytest-dev/pytest-xdist#1386); install the versions the test extra names: "
            "pip install -e '.[test]'",
            pytrace=False,
        )
    tiers.begin(item)


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    """A test outside the integration tier that started one of its processes fails."""
    tiers.end(item)


def pytest_configure(config: pytest.Config) -> None:
    """Bytecode for the processes the tests start, in a temporary directory.

    Kernels, CLI runs and crash children are new interpreters; where the environment says
    PYTHONDONTWRITEBYTECODE (this machine does), each compiled the package's modules
    from source again. The run (the controller, before its workers start, so they and
    every process a test starts inherit it) points PYTHONPYCACHEPREFIX at a temporary
    directory and lets those processes write there: one compile per module, and nothing
    written beside the sources. A prefix the user set is left alone. The directory is
    filled before any of those processes start, and kept for the next run
    (tests/helpers/pycache_prefix.py): with a prefix, Python finds no bytecode anywhere
    else, not even the standard library's."""
    tiers.watch()
    if "PYTEST_XDIST_WORKER" in os.environ or "PYTHONPYCACHEPREFIX" in os.environ:
        return
    cache = kept_pycache_prefix(config.rootpath)
    if cache is None:  # no directory to trust from run to run: one for this run
        cache = Path(tempfile.mkdtemp(prefix="tiny-agent-nb-pycache-"))
        config.add_cleanup(lambda: shutil.rmtree(cache, ignore_errors=True))
    fill_pycache_prefix(cache, config)
    os.environ["PYTHONPYCACHEPREFIX"] = str(cache)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
