"""A run's plan: what one AnalysisConfig resolves to (target, system descriptor, per-op settings)
and the record the run is stored under."""

from __future__ import annotations

import subprocess
import uuid
from datetime import datetime, timezone
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from opbyop import __version__
from opbyop.compiler.assets import Notices
from opbyop.compiler.builds import Compiler, prepare
from opbyop.compiler.system_desc import SystemDesc, resolve
from opbyop.compiler.targets import Target, target_for
from opbyop.config import AnalysisConfig, AnalysisSettings, load_thresholds
from opbyop.device.ttsim.install import check_target
from opbyop.records import RunInfo
from opbyop.run.verdict_code import verdict_code
from opbyop.worker.process import OpWorker


class RunPlan(BaseModel):
    """Everything a run's steps read, derived once from its AnalysisConfig."""

    model_config = ConfigDict(frozen=True)

    config: AnalysisConfig
    target: Target
    compiler: Compiler  # the build under test (config.compiler_spec, prepared)
    desc: SystemDesc  # the target's descriptor for that build
    settings: AnalysisSettings

    @classmethod
    def from_config(cls, config: AnalysisConfig, notices: Notices | None = None,
                    compiler: Compiler | None = None) -> RunPlan:
        """`notices` is told what preparing the compiler and making the chip's descriptor the first time
        do (opbyop.compiler.builds, opbyop.compiler.system_desc); `compiler`: the build already prepared."""
        target = target_for(config.chip, config.mesh)
        compiler = compiler or prepare(config.compiler_spec, notices)
        settings = AnalysisSettings(options=config.compiler, thresholds=config.thresholds or load_thresholds(),
                                    seed=config.seed, run_device=config.run_device, run_golden=config.run_device,
                                    device=config.device, pass_timing=config.pass_timing,
                                    mesh=target.mesh_text, topology=target.topology.value)
        desc = resolve(config.chip, notices=notices, compiler=compiler)
        if config.device.backend == "ttsim" and config.run_device:  # asked for ttsim: refused before any work
            check_target(desc.path, target.chips)
        return cls(config=config, target=target, compiler=compiler, desc=desc, settings=settings)

    def op_worker(self, home: Path, name: str) -> OpWorker:
        """An op worker of this run (not started): its target's descriptor, its compiler build, a host mesh
        as large as its target for golden runs. Every worker of a run on this machine is made here."""
        return OpWorker(self.desc.path, home, chip=self.desc.chip, name=name, host_devices=self.host_devices,
                        compiler=self.compiler)

    @property
    def host_devices(self) -> int:
        return self.target.chips  # host_devices(config)'s rule, on the target already resolved

    @property
    def whole_timeout(self) -> float:
        """A whole model's time limit: never below ten minutes, whatever the per-op limit; on ttsim,
        with the whole program's own time there on top."""
        device = self.config.device
        on_ttsim = device.whole_ttsim_timeout_s if device.backend == "ttsim" else 0.0
        return max(600.0, self.config.op_timeout_s) + on_ttsim

    def run_info(self, run_id: str, group_id: str = "") -> RunInfo:
        """The run's record in the store (`group_id`: the runs started with it, one per compiler)."""
        config, identity = self.config, self.compiler.identity
        return RunInfo(run_id=run_id, models=config.models, chip=self.desc.chip, compiler=identity, group_id=group_id,
                       system_desc_sha256=self.desc.sha256, plugin_version=identity.version,
                       opbyop_version=__version__, git_sha=git_sha(), options_key=config.options_key(),
                       verdict_code=verdict_code(),
                       config=config.model_dump(mode="json"), mesh=self.target.mesh_text,
                       topology=self.target.topology.value)


def host_devices(config: AnalysisConfig) -> int:
    """XLA:CPU devices a process that runs the config's goldens or upstream values needs: a sharded
    op runs on a host mesh as large as its target (fixed when JAX starts: give it to prepare_jax or
    OpWorker, never through the environment)."""
    return target_for(config.chip, config.mesh).chips


def git_sha() -> str:
    """The checkout's commit, or "" outside a git checkout."""
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                              cwd=Path(__file__).resolve().parent).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def new_run_id() -> str:
    """A fresh run id: when it started (UTC) and a random suffix."""
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6]
