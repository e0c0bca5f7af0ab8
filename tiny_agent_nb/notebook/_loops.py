"""How one kernel makes the loop of a run: the provider (or the offline demo model), the
window the server lists for the model, the tools, the configuration digest, and the
`LoopConfig` from `TinyAgent` and a cell's options."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..agent import (
    AgentLoop,
    ChatProvider,
    ContextProjection,
    LoopConfig,
    LoopObserver,
    notebook_system_prompt,
)
from ..provider import DEMO_MODEL, METADATA_SECONDS, DemoProvider
from ..render import cell_text
from ..session import Approval, RunOptions, SessionStore
from ..tools import ToolContext
from ._config import TinyAgent
from ._mcp import KernelServers
from ._offline import DEMO_ADVICE
from ._opening import NotebookError
from ._provider import KernelProvider
from ._session_model import SessionModel

AskFn = Callable[[str, object], bool]
# The cell's note before the kernel asks the server's metadata for the window.
ASKING = (
    "asking the server for the model's context window (once per kernel, at most "
    f"{METADATA_SECONDS:g} seconds; setting TinyAgent.context_window skips it)"
)
# Ctrl-C while the server's metadata was asked for the window (a server may hold that
# answer up to METADATA_SECONDS, and it is asked again by the next cell).
WINDOW_ASK_INTERRUPTED = (
    "■ Interrupted while asking the server for the model's context window, before the "
    "run started: nothing was sent or recorded. Setting TinyAgent.context_window (tokens) "
    "skips asking."
)


def continuing(
    options: dict[str, Any], demo: bool, recorded: RunOptions | None
) -> tuple[dict[str, Any], bool]:
    """The options of what continues a run (`%agent resume`, the Resume button, `%agent
    compact` after a stop), and whether the demo model answers: the options given, the
    rest as the run recorded them (`recorded`, which `LoopBuilder.build` takes them from;
    None: a run recorded none, and the configuration's apply), never the configuration's
    over the run's. The run's model, or the demo model when it was the demo's."""
    model = options.get("model")
    if recorded is not None and model is None and not demo:
        demo = recorded.model == DEMO_MODEL
        model = None if demo else recorded.model
    return {**options, "model": model, "recorded": recorded}, demo


@dataclass(frozen=True)
class Chosen:
    """The options a run uses: `tools` are names or a server's patterns for the registry
    (None: the configuration's); `inherited`: they are those of the run it continues."""

    approve: Approval
    budget: float | None
    max_steps: int
    tools: list[str] | None
    inherited: bool


def chosen_options(
    config: TinyAgent,
    recorded: RunOptions | None,
    *,
    approve: Approval | None = None,
    budget: float | None = None,
    max_steps: int | None = None,
    tools: list[str] | None = None,
) -> Chosen:
    """Each option as given (the cell's, `%agent resume`'s); else as the run it continues
    recorded it (`recorded`, docs/spec.md §2.3); else as the configuration says. What a run
    builds its loop with and what a cell run again is matched by (`_rerun`)."""
    if budget is None:  # a run's budget recorded as None is no limit, not "unset"
        budget = config.budget if recorded is None else recorded.budget
    return Chosen(
        approve=approve or (config.approve if recorded is None else recorded.approve),
        budget=budget,
        max_steps=max_steps or (config.max_steps if recorded is None else recorded.maxSteps),
        tools=recorded.tools if tools is None and recorded is not None else tools,
        inherited=tools is None and recorded is not None,
    )


class LoopBuilder:
    """Makes a run's `AgentLoop` over a store, as `TinyAgent` and the cell configure it."""

    def __init__(
        self,
        config: TinyAgent,
        namespace: dict[str, object],
        hidden_variables: Mapping[str, object],
        propose_cell: Callable[[str], str] | None,
        *,
        provider: KernelProvider,
        mcp: KernelServers,
        session_model: SessionModel,
    ) -> None:
        self.config = config
        self.namespace = namespace
        self.hidden_variables = hidden_variables
        self.propose_cell = propose_cell
        self.provider = provider
        self.mcp = mcp
        self.session_model = session_model
        self.today = datetime.date.today  # the date the system prompt says

    def workspace(self) -> Path:
        return Path(self.config.workspace or Path.cwd()).resolve()

    def _system_prompt(self, tools: Sequence[str]) -> str:
        return notebook_system_prompt(
            workspace=str(self.workspace()),
            tools=tools,
            today=self.today(),
            user_cells=self.config.user_cells_chars > 0,
        )

    def build(
        self,
        store: SessionStore,
        projection: ContextProjection,
        *,
        stopped_by: Callable[[], str | None] | None,
        observer: LoopObserver | None = None,
        ask: AskFn | None = None,
        model: str | None = None,
        max_steps: int | None = None,
        budget: float | None = None,
        tools: list[str] | None = None,
        approve: Approval | None = None,
        provider: ChatProvider | None = None,
        with_mcp: bool = True,
        demo: bool = False,
        recorded: RunOptions | None = None,
    ) -> AgentLoop:
        """`run`'s options (None: the run's as `recorded`, else the configured value, see
        `continuing`); `provider`: a recovery's, which asks no server; `projection`: the
        context the kernel follows for `store`."""
        chosen = chosen_options(
            self.config,
            recorded,
            approve=approve,
            budget=budget,
            max_steps=max_steps,
            tools=tools,
        )
        tools = chosen.tools
        provider_config = self.session_model.asked(model, demo)
        window = self.config.context_window
        listed: int | None = None
        if self.session_model.uses_demo(model, demo):
            provider = DemoProvider(advice=DEMO_ADVICE)
        elif provider is None:
            provider = self.provider.build(provider_config)
            # Unset, and not learned by this session yet, the window is the one the
            # server's metadata states for this model (asked once per kernel, said in the
            # cell; the loop records it). A recovery's loop (a provider given) asks none.
            if not window and store.learned_window(*provider_config.window_key) is None:
                say = observer.on_notice if observer is not None else None
                try:
                    listed = self.provider.context_window(
                        model, asking=None if say is None else lambda: say(ASKING)
                    )
                except KeyboardInterrupt:  # nothing of the run exists yet: say so
                    raise NotebookError(WINDOW_ASK_INTERRUPTED) from None
        try:
            registry = self.mcp.registry(tools, with_mcp=with_mcp)
        except NotebookError as exc:
            if not chosen.inherited:
                raise
            raise NotebookError(
                f"{exc}. The run this continues was offered {cell_text(', '.join(tools or []))}; "
                "nothing was sent or recorded. `--tools a,b` chooses the tools it is offered."
            ) from None
        config = LoopConfig(
            provider_config,
            mcp_servers=self.mcp.digest_material(registry),
            system_prompt=self.config.system_prompt or self._system_prompt(registry.names),
            max_steps=chosen.max_steps,
            budget=chosen.budget,
            approval=chosen.approve,
            context_window=window,
            listed_window=listed,
            compact_threshold=self.config.compact_threshold,
            keep_tail_tokens=self.config.keep_tail_tokens,
        )
        return AgentLoop(
            store,
            provider,
            registry,
            ToolContext(
                workspace=self.workspace(),
                namespace=self.namespace,
                hidden_variables=self.hidden_variables,
                propose_cell=self.propose_cell,
                secrets=self.config.secrets(),
            ),
            config,
            ask=ask,
            observer=observer,
            projection=projection,
            stopped_by=stopped_by,
        )
