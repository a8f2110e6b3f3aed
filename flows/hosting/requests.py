"""What carries out a run asked on the command line (an AnalyzeRequest or a NightlyRequest), the
same in the CLI's own process and on `opbyop serve`: the flow on the given cluster, its end told as
an AnalyzeOutcome, never raised (flows/hosting/service.py has the requests and the outcome)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from opbyop_flows.engine.summary import summary_of
from opbyop_flows.hosting.handoff import Handoff, handing_off
from opbyop_flows.hosting.service import AnalyzeOutcome, AnalyzeRequest, NightlyRequest
from opbyop.config import ClusterConfig
from opbyop.run.plan import host_devices

if TYPE_CHECKING:
    from prefect.states import State


def run_request(request: AnalyzeRequest | NightlyRequest, handoff: Handoff, address: str) -> AnalyzeOutcome:
    """The request's flow on the cluster at `address`; never raises."""
    runner = run_nightly if isinstance(request, NightlyRequest) else run_flow
    return runner(request, handoff, address)


def warm_flow(request: AnalyzeRequest | NightlyRequest) -> None:
    """Import the request's flow now (Prefect, Dask, pyarrow: seconds), while what it needs starts."""
    if isinstance(request, NightlyRequest):
        import opbyop_flows.nightly  # noqa: F401  (prefect, pyarrow: loaded only when used)
    else:
        import opbyop_flows.analyze  # noqa: F401  (prefect, pyarrow: loaded only when used)


def run_flow(request: AnalyzeRequest, handoff: Handoff, address: str) -> AnalyzeOutcome:
    """The analyze flow for one request, on the cluster at `address`; never raises."""
    from opbyop_flows.analyze import analyze  # prefect, pyarrow: loaded only when used
    from opbyop_flows.hosting.cluster_exports import ClusterExports  # distributed: loaded only when used
    from opbyop_flows.hosting.run_cluster import standing_address  # distributed: loaded only when used

    config = request.config.model_copy(update={"cluster": request.config.cluster.model_copy(
        update={"address": address})})

    def flow() -> State:
        # the models export on the cluster while the flow starts (a cluster not started yet starts then)
        exports = ClusterExports(lambda: address or standing_address(config.cluster, handoff.cluster) or "")
        try:
            handoff.splits.prefetch(config.models, config.seed, config.export, host_devices(config),
                                    weights=config.keeps_weights, reuse=config.reuse_cached, place=exports)
            return analyze(config=config, run_id=request.run_id, shrink=request.shrink, return_state=True)
        finally:
            exports.close()

    return _outcome(request.run_id, handoff, flow, summarised=True)


def run_nightly(request: NightlyRequest, handoff: Handoff, address: str) -> AnalyzeOutcome:
    """The nightly flow for one request, every target on the cluster at `address`; never raises."""
    from opbyop_flows.nightly import nightly  # prefect, pyarrow: loaded only when used

    def flow() -> State:
        return nightly(config_file=request.config_file, models=request.models,
                       expectations_file=request.expectations_file, cluster=ClusterConfig(address=address),
                       return_state=True)

    return _outcome(request.run_id, handoff, flow, summarised=False)


def _outcome(run_id: str, handoff: Handoff, flow: Callable[[], State], summarised: bool) -> AnalyzeOutcome:
    """`flow()` run with `handoff`, its end told to the CLI: every exception becomes an
    "Error" outcome (with the run id to resume), never raised. `summarised`: the flow's result is
    an analyze run's summary, carried in the outcome (the nightly's state carries none)."""
    try:
        with handing_off(handoff):
            state = flow()
        summary = summary_of(state.result(raise_on_failure=False)) if summarised else None
    except BaseException as e:  # noqa: BLE001  (told to the CLI)
        return AnalyzeOutcome(run_id=run_id, state="Error", completed=False, message=f"{type(e).__name__}: {e}")
    finally:  # the request's split thread ends with it (a service serves many)
        handoff.splits.close()
    return AnalyzeOutcome(run_id=run_id, state=state.name, completed=state.is_completed(),
                          message=state.message or "", summary=summary)
