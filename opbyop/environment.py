"""opbyop's environment variables, read and validated in one place (pydantic-settings, prefix OPBYOP_).

Read anew on every call (no module-level state): a test or a deployment that sets a variable sees
it at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Environment(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="OPBYOP_", extra="ignore")

    home: Path = Field(Path(".opbyop"), description="workspace: artifacts, op index, scratch, logs, the store")
    store: Path | str | None = Field(None, description="the Parquet store, a directory or s3://bucket/prefix "
                                     "(default: <home>/store)")
    config_dir: Path | None = Field(None, description="configs/ holding models.yaml, thresholds.yaml ...")
    cache_dir: Path = Field(Path.home() / ".cache" / "opbyop", description="machine-wide cache (descriptors)")
    dask_address: str | None = Field(None, description="an existing Dask scheduler, tcp://host:8786")
    xla_flags: str = Field("--xla_backend_optimization_level=0",
                           description="flags opbyop gives XLA:CPU for golden runs (empty: XLA's defaults)")
    host_devices: int = Field(1, ge=1, description="XLA:CPU devices of a process (a host mesh for golden runs "
                                                 "of sharded modules); set before JAX starts")
    fault_inject: str = Field("", description="tests only: abort:|hang:|raise:<signature prefix>, ';'-separated")
    dask_fault_inject: str = Field("", description="tests only: exit:<signature prefix> kills the Dask worker, slow: delays the op")
    ttsim: Path | None = Field(None, description="Tenstorrent's simulator for --device ttsim: a libttsim .so or a "
                               "ttsim source tree (default: .ttsim/ of the checkout, made by `make ttsim`)")
    ttnn_python: Path | None = Field(None, description="a Python with PyPI's ttnn for --device ttsim (default: "
                                     ".venv-ttnn/ of the checkout)")
    ttsim_kernels: Path | None = Field(None, description="tt-metal's kernel and firmware cache for --device ttsim, "
                                       "shared by every workspace and worker of the machine (default: "
                                       "<cache_dir>/ttsim)")
    worker_memory_limit: int = Field(0, ge=0, description="bytes of address space an op worker may add to what it "
                                     "holds once warm (0: no limit); an op needing more is an infra_error "
                                     "naming memory instead of the kernel's out-of-memory killer ending it")


    @field_validator("store", mode="after")
    @classmethod
    def _store_path_or_url(cls, value: Path | str | None) -> Path | str | None:
        """An object-store URL stays a string (a Path would fold its '//'); anything else is a directory."""
        if isinstance(value, str) and not value.startswith("s3://"):
            return Path(value)
        return value


def environment() -> Environment:
    return Environment()


def workspace_root() -> Path:
    """The workspace's root directory (OPBYOP_HOME, absolute): opbyop.workspace.Workspace.default's."""
    return environment().home.resolve()


def environment_of(variables: Mapping[str, str]) -> Environment:
    """The environment a child process started with `variables` will read."""
    prefix = Environment.model_config["env_prefix"]
    return Environment(**{name.removeprefix(prefix).lower(): value for name, value in variables.items()
                          if name.startswith(prefix) and name.removeprefix(prefix).lower() in Environment.model_fields})
