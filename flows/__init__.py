"""The Prefect flows (analyze, nightly), what hosts them (flows/hosting) and how a run is carried out
(flows/engine).

Importing the package applies the product's Prefect settings as environment defaults (a user's own
values win), before Prefect reads them: a flow called bare from Python (`nightly(...)`, `python
flows/nightly.py`) starts Prefect's temporary server, which needs more than Prefect's default 20 s to
start on a 2-core machine.
"""

from opbyop_flows.hosting.settings import apply_defaults

apply_defaults()
