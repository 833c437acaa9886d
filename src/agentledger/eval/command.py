"""``agentledger eval``: run the scenarios against a stack and write the report.

By default it starts a private stack as the benchmarks do (embedded NATS in operator mode and
PostgreSQL, the writer, projector and checkpointer, then the memory-policy and context-builder
as processes) and removes it afterwards; ``--running`` uses the stack ``agentledger up``
started (its URLs and operator credentials), writing into fresh tenants of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from agentledger import logs
from agentledger.bench.common import PROFILES, ServiceProcess, bench_stack
from agentledger.client import Client, connect
from agentledger.config import Settings, from_env
from agentledger.eval.corpus import generate
from agentledger.eval.locomo import LocomoResult, evaluate_file
from agentledger.eval.locomo import markdown as locomo_markdown
from agentledger.eval.model import ModelExecutor
from agentledger.eval.report import write
from agentledger.eval.run import PRESETS, Scenario, ScenarioResult, run_scenario
from agentledger.eval.strategies import NAMES, Env, ensure_known
from agentledger.models.embedding import load_embedder
from agentledger.runtime.state import resolve_urls

EXTRA_SERVICES = (("memory_policy", "agentledger-memory-policy"), ("context_builder", "agentledger-context-builder"))


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", action="append", choices=sorted(PRESETS), default=None,
                   help="scenario to run (repeatable; default: clean, risk and budget)")
    p.add_argument("--out", default="eval-report", metavar="DIR", help="report folder (default ./eval-report)")
    p.add_argument("--seed", type=int, default=None, help="corpus seed (default 19)")
    p.add_argument("--turns", type=int, default=None, help="history turns, 8-72 in the seed (default 48)")
    p.add_argument("--summary-budget", type=int, default=None, help="summary tokens (120-420, default 260)")
    p.add_argument("--k", type=int, default=None, help="vector top-K (2-12, default 6)")
    p.add_argument("--window", type=int, default=None, help="the structured build's window (default 1200)")
    p.add_argument("--strategy", action="append", choices=NAMES, default=None,
                   help="strategies to run (repeatable; Off always runs: the delta needs it)")
    p.add_argument("--repeats", type=int, default=None, help="reads per strategy for the latency (default 3)")
    p.add_argument("--sweep", default=None, metavar="VAR=V1,V2,...",
                   help="re-run each preset once per value of one variable (Off re-runs each time): "
                        f"{', '.join(SWEEPABLE)}")
    p.add_argument("--model", default=None, metavar="NAME",
                   help="also let this chat model act on every context (an OpenAI-compatible endpoint)")
    p.add_argument("--model-url", default=None, metavar="URL", help="its base URL, with the version (.../v1)")
    p.add_argument("--model-key-file", default=None, metavar="PATH", help="a file holding its API key")
    p.add_argument("--running", action="store_true", help="use the stack `agentledger up` started")
    p.add_argument("--locomo", default=None, metavar="FILE",
                   help="instead of the presets: evidence recall per strategy on this LoCoMo-format file")
    p.add_argument("--budget", type=int, default=2000, help="token budget of --locomo (default 2000)")
    p.set_defaults(fn=command)


# What ``--sweep`` may vary: the corpus options and the strategies' knobs of seed 000 §22.
SWEEPABLE = ("turns", "records", "stale", "poison", "interrupted", "summary_budget", "k", "window")
_OPTION_FIELDS = {"turns", "stale", "poison", "interrupted", "seed", "secret", "noise_records"}


def _sweep(spec: str) -> tuple[str, list[Any]]:
    var, _, values = spec.partition("=")
    if var not in SWEEPABLE or not values:
        raise SystemExit(f"--sweep takes VAR=V1,V2,... with VAR one of {', '.join(SWEEPABLE)}, not {spec!r}")
    parsed: list[Any] = []
    for v in values.split(","):
        parsed.append(v.lower() in ("1", "true", "on", "yes") if var in ("stale", "poison", "interrupted")
                      else int(v))
    return var, parsed


def scenarios_of(args: argparse.Namespace) -> list[Scenario]:
    out = []
    sweep = _sweep(args.sweep) if getattr(args, "sweep", None) else None
    for name in args.preset or ["clean", "risk", "budget"]:
        sc = PRESETS[name]
        opts = {k: v for k, v in (("seed", args.seed), ("turns", args.turns)) if v is not None}
        knobs = {k: v for k, v in (("summary_budget", args.summary_budget), ("k", args.k), ("window", args.window),
                                   ("repeats", args.repeats)) if v is not None}
        base = Scenario(sc.name, dataclasses.replace(sc.options, **opts), dataclasses.replace(sc.knobs, **knobs))
        if sweep is None:
            out.append(base)
            continue
        var, values = sweep
        var = "noise_records" if var == "records" else var
        for v in values:
            o = dataclasses.replace(base.options, **{var: v}) if var in _OPTION_FIELDS else base.options
            k = base.knobs if var in _OPTION_FIELDS else dataclasses.replace(base.knobs, **{var: v})
            out.append(Scenario(f"{sc.name} {sweep[0]}={v}", o, k))
    return out


@asynccontextmanager
async def stack_client(settings: Settings, *, running: bool) -> AsyncIterator[tuple[Client, Settings, str]]:
    """A client of a stack with the memory-policy and context-builder, and a word for the report."""
    if running:
        s = resolve_urls(settings)
        shared = await connect(s, timeout=60)
        try:
            yield shared, s, f"running ({s.nats_url})"
        finally:
            await shared.close()
        return
    async with bench_stack(settings, PROFILES["smoke"]) as stack:
        services = []
        client: Client | None = None
        try:
            for module, micro in EXTRA_SERVICES:
                services.append(await ServiceProcess.start(stack, module, micro))
            client = await connect(stack.settings, timeout=60)
            yield client, stack.settings, "private (embedded NATS and PostgreSQL, six services as processes)"
        finally:
            if client is not None:
                await client.close()
            for svc in reversed(services):
                svc.stop()


def _fits_the_quota(settings: Settings, scenarios: Sequence[Scenario]) -> None:
    """Refuse up front a scale scenario whose memory records exceed the tenant's quota: the
    memory-policy would refuse its last proposals after the rest were written, minutes in."""
    for sc in scenarios:
        if sc.options.noise_records and (n := len(generate(sc.options).memory)) > settings.tenant_max_memory_records:
            raise SystemExit(f"{sc.name}: {n} memory records exceed the tenant quota of "
                             f"{settings.tenant_max_memory_records}; raise AGENTLEDGER_TENANT_MAX_MEMORY_RECORDS "
                             "(for --running, on the stack too)")


async def run_eval(settings: Settings, scenarios: Sequence[Scenario], strategies: Sequence[str], *,
                   running: bool = False, out: Path | None = None, quiet: bool = False,
                   model: ModelExecutor | None = None) -> list[ScenarioResult]:
    """Run ``scenarios`` (each in a fresh tenant) and write the report to ``out`` if given."""
    ensure_known(list(strategies))
    _fits_the_quota(settings, scenarios)
    started = time.monotonic()
    total = len(scenarios) * (len([n for n in strategies if n != "off"]) + 2)
    done = [0]

    def progress(line: str) -> None:
        done[0] += 1
        if not quiet:
            filled = int(30 * done[0] / total)
            print(f"[{'#' * filled}{'.' * (30 - filled)}] {done[0]}/{total} {line}", file=sys.stderr, flush=True)

    results = []
    async with stack_client(settings, running=running) as (client, s, stack_word):
        embedder = load_embedder(s)
        run_id = uuid.uuid4().hex[:6]
        for n, sc in enumerate(scenarios):
            env = Env(client, s, embedder, f"eval-{run_id}-{n}")
            results.append(await run_scenario(env, sc, strategies, progress=progress, model=model))
    if out is not None:
        meta: dict[str, Any] = {"seed": scenarios[0].options.seed if scenarios else None,
                                "elapsed_s": time.monotonic() - started, "stack": stack_word,
                                "strategies": list(strategies), "encoding": "cl100k_base"}
        for p in write(out, results, meta):
            if not quiet:
                print(p, flush=True)
    return results


async def run_locomo(settings: Settings, path: Path, budget: int, strategies: Sequence[str], *, running: bool,
                     out: Path) -> LocomoResult:
    """Score the file's questions per strategy; write ``locomo.md`` and ``locomo.json``."""
    async with stack_client(settings, running=running) as (client, s, _):
        res = await evaluate_file(client, s, load_embedder(s), path, budget=budget,
                                  tenant_prefix=f"locomo{uuid.uuid4().hex[:6]}", strategies=strategies)
    _write_locomo(out, res, path.name)
    return res


def _write_locomo(out: Path, res: LocomoResult, source: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "locomo.md").write_text(locomo_markdown(res, source), encoding="utf-8")
    (out / "locomo.json").write_text(json.dumps(dataclasses.asdict(res), indent=1), encoding="utf-8")
    print(out / "locomo.md", flush=True)


def command(args: argparse.Namespace) -> int:
    logs.configure("warning")
    settings = from_env(data_dir=getattr(args, "data_dir", None), nats_creds=getattr(args, "creds", None))
    strategies = ["off", *[n for n in (args.strategy or NAMES) if n != "off"]]
    if args.locomo is not None:
        asyncio.run(run_locomo(settings, Path(args.locomo), args.budget, strategies, running=args.running,
                               out=Path(args.out)))
        return 0
    model = None
    if args.model is not None:
        if not args.model_url:
            raise SystemExit("--model needs --model-url (an OpenAI-compatible base URL, e.g. http://127.0.0.1:8080/v1)")
        model = ModelExecutor.from_files(args.model_url, args.model,
                                         Path(args.model_key_file) if args.model_key_file else None)
    asyncio.run(run_eval(settings, scenarios_of(args), strategies, running=args.running, out=Path(args.out),
                         model=model))
    return 0
