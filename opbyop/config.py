"""Configuration as pydantic models, read from the YAML files in configs/.

Every setting a run depends on lives here: the model zoo, the target chip, the compiler options
(part of every cache key), the golden thresholds. Prefect builds its run form from these models.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import psutil
import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator

from opbyop.boards import DEFAULT_CHIP, chip_help, mesh_help
from opbyop.compiler_spec import check_spec
from opbyop.environment import environment
from opbyop.errors import ConfigError, UnknownModelError
from opbyop.sharding_plan import ShardingPlan
from opbyop.golden.compare import DtypeThreshold, Thresholds

__all__ = ["AnalysisConfig", "AnalysisSettings", "ClusterConfig", "ExportBudget", "ShrinkOption", "CompilerOptions", "DtypeThreshold", "InputSpec", "Thresholds", "Zoo",
           "ZooEntry", "config_dir", "load_config", "load_yaml", "load_zoo", "load_thresholds"]


def config_dir() -> Path:
    """configs/ of this checkout, or OPBYOP_CONFIG_DIR."""
    return environment().config_dir or Path(__file__).resolve().parents[1] / "configs"


_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's: 10x faster where it is built in


def load_yaml(path: Path) -> Any:
    if not path.exists():
        raise ConfigError(f"configuration file {path} does not exist",
                          "set OPBYOP_CONFIG_DIR to a directory holding models.yaml and thresholds.yaml")
    try:
        return yaml.load(path.read_text(), Loader=_SAFE_LOADER)
    except yaml.YAMLError as e:
        raise ConfigError(f"{path} is not valid YAML: {e}", "fix the YAML syntax at the line shown") from None


class InputSpec(BaseModel):
    """One example input: shape and dtype; integer inputs are drawn from [low, high)."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    shape: list[int]
    dtype: Literal["float32", "float64", "float16", "bfloat16", "int64", "int32", "bool"] = "float32"
    low: int = 0
    high: int = 2


class ZooEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]*$")
    frontend: Literal["torch", "jax", "stablehlo"]
    factory: str | None = Field(None, description="package.module:callable")
    kwargs: dict[str, Any] = Field(default_factory=dict)
    path: str | None = Field(None, description="StableHLO file, relative to configs/")
    inputs: list[InputSpec] = Field(default_factory=list)
    tags: list[str] = Field(default_factory=list)
    description: str = ""
    sharding: ShardingPlan | None = Field(None, description="tensor/data-parallel plan: the model's mesh and "
                                                            "each input's and parameter's partition spec")

    @field_validator("factory")
    @classmethod
    def _factory_form(cls, v: str | None) -> str | None:
        if v is not None and ":" not in v:
            raise ValueError("factory must look like package.module:callable")
        return v


REAL_SIZE = "real-size"  # the tag of published configurations at full size (benchmarks, not tests)


class Zoo(BaseModel):
    models: list[ZooEntry]

    def names(self) -> list[str]:
        return [m.name for m in self.models]

    def get(self, name: str) -> ZooEntry:
        for m in self.models:
            if m.name == name:
                return m
        raise UnknownModelError(
            f"unknown model '{name}'; the zoo has: {', '.join(self.names())}",
            "pick one of those, pass a .mlir/.mlirbc file, or a package.module:factory",
        )

    def tagged(self, tag: str) -> list[ZooEntry]:
        return [m for m in self.models if tag in m.tags]

    def small(self) -> list[ZooEntry]:
        """The models fast tests and the small-zoo benchmarks run: all but the real-size ones."""
        return [m for m in self.models if REAL_SIZE not in m.tags]


ConfigT = TypeVar("ConfigT", bound=BaseModel)


def load_config(model: type[ConfigT], path: Path, what: str) -> ConfigT:
    """A YAML file validated as `model`; an invalid one names its fields (`what` says what it is)."""
    try:
        return model.model_validate(load_yaml(path))
    except ValidationError as e:
        raise ConfigError(f"{path} is not a valid {what}:\n{e}", "fix the fields named above") from None


def load_zoo(path: Path | None = None) -> Zoo:
    return load_config(Zoo, path or config_dir() / "models.yaml", "model zoo")


def load_thresholds(path: Path | None = None) -> Thresholds:
    return load_config(Thresholds, path or config_dir() / "thresholds.yaml", "set of golden thresholds")


class CompilerOptions(BaseModel):
    """tt-mlir options, passed to the plugin as compile options; part of every cache key."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    optimization_level: int = Field(0, ge=0, le=2, description="tt-mlir optimizer level (>=1 runs op-model checks)")
    math_fidelity: Literal["lofi", "hifi2", "hifi3", "hifi4"] | None = Field(
        None, description="override the compute kernels' math fidelity")
    fp32_dest_acc_en: bool | None = Field(None, description="accumulate in f32 in the destination register")
    weight_dtype: Literal["bfp_bf8", "bfp_bf4"] | None = Field(
        None, description="store parameters in block floating point (experimental_weight_dtype)")

    def plugin_options(self) -> list[tuple[str, str]]:
        """The plugin's own option names and string values."""
        out: list[tuple[str, str]] = []
        if self.optimization_level:
            out.append(("optimization_level", str(self.optimization_level)))
        if self.math_fidelity:
            out.append(("math_fidelity", self.math_fidelity))
        if self.fp32_dest_acc_en is not None:
            out.append(("fp32_dest_acc_en", "true" if self.fp32_dest_acc_en else "false"))
        if self.weight_dtype:
            out.append(("experimental_weight_dtype", self.weight_dtype))
        return out

    def key(self) -> str:
        return hashlib.sha256(self.model_dump_json().encode()).hexdigest()[:16]


class DeviceOptions(BaseModel):
    """How the simulated device is set up: part of every cache key, like the compiler options."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    harvesting_mask: int = Field(0, ge=0, description="rows of Tensix cores harvested, a bit per row "
                                                      "(TT-Buda's harvested_rows; rows 1 and 11 -> 2050)")
    placement_policy: Literal["fewest_cycles", "fewest_cores", "nlp"] = Field(
        "fewest_cycles", description="how each op's core grid is chosen among its legal op models")
    backend: Literal["model", "ttsim"] = Field(
        "model", description="whose device run gives the verdict: opbyop's model of the chip (fast), or "
                             "tt-metal's kernels on Tenstorrent's simulator ttsim, beside the model (`make ttsim`)")
    ttsim_timeout_s: float = Field(120.0, gt=0, description="an op's time on ttsim; past it the model's verdict "
                                                          "stands, marked as not confirmed by ttsim")
    ttsim_report: bool = Field(False, description="with the ttsim backend, keep ttnn's own TT-NN Visualizer report "
                                                  "of each op's run (the program runs twice on ttsim)")

    @property
    def whole_ttsim_timeout_s(self) -> float:
        """A whole model's program's time on ttsim: ten ops' worth."""
        return self.ttsim_timeout_s * 10

    def key(self) -> str:
        # without a report the key is what it was before the option existed: cached results stay valid
        dumped = self.model_dump_json(exclude=None if self.ttsim_report else {"ttsim_report"})
        return hashlib.sha256(dumped.encode()).hexdigest()[:16]


class ExportBudget(BaseModel):
    """What exporting one model may cost: its export (the factory, torch.export, torch-mlir or JAX's
    lowering) runs in a child process killed when it goes past either figure. A model that does is
    an error naming memory (or time) and the budget, or, when the graph can be bisected, one op's
    frontend_failed; the run goes on with the other models."""

    model_config = ConfigDict(extra="forbid")

    memory_bytes: int | None = Field(None, ge=1, description="peak memory of one model's export (its child "
                                     "process and theirs); None: half of the exporting machine's memory")
    timeout_s: float = Field(900.0, gt=0, description="wall time of one model's export, bisection included")
    lowering_timeout_s: float = Field(300.0, gt=0, description="wall time of one torch-mlir lowering attempt")

    def memory_limit(self) -> int:
        """The memory budget in bytes, on this machine."""
        return self.memory_bytes or int(psutil.virtual_memory().total) // 2


class AnalysisSettings(BaseModel):
    """What one op's analysis needs (derived from a run's AnalysisConfig; sent to the workers)."""

    options: CompilerOptions = Field(default_factory=CompilerOptions)
    thresholds: Thresholds = Field(default_factory=Thresholds)
    seed: int = 0
    run_device: bool = True
    run_golden: bool = True
    device: DeviceOptions = Field(default_factory=lambda: DeviceOptions())
    mesh: str = "1x1"  # the target's mesh of chips (ROWSxCOLS), written into every result
    topology: str = "single"  # how the target's chips are linked (opbyop.boards.Topology)
    memory_budget_bytes: int | None = Field(None, ge=1, description="host memory one op's worker may use: an op "
                                            "whose operands and results exceed it is refused (infra_error)")
    # A compile that failed, crashed or hung is compiled again with the compiler's IR printing on
    # (a verbose compile child) to name the pass it stopped in.
    failed_pass: bool = True
    # The share of ops (0..1, chosen by signature) compiled again with MLIR's pass timing on.
    pass_timing: float = Field(0.0, ge=0.0, le=1.0)
    # Compare each op of a whole model on the device with XLA:CPU's value of it: "auto" for models
    # whose intermediate values fit in opbyop.analysis.accuracy_trace's budget, "on" for any, "off".
    accuracy_trace: Literal["auto", "on", "off"] = "auto"


class ClusterConfig(BaseModel):
    """Where per-op work runs: an existing Dask scheduler, or a LocalCluster sized to the machine."""

    model_config = ConfigDict(extra="forbid")

    address: str | None = Field(None, description="tcp://host:8786 of an existing Dask scheduler "
                                                  "(default: OPBYOP_DASK_ADDRESS, else a LocalCluster)")
    workers: int | None = Field(None, ge=1, description="LocalCluster workers (default: one per CPU core)")


class AnalysisConfig(BaseModel):
    """Everything one analysis run depends on (the Prefect run form is built from this)."""

    # Plain defaults, not default_factory: Prefect's run form shows only plain defaults.
    models: list[str] = Field(["mlp"], description="zoo names, .mlir/.mlirbc paths or package.module:factory")
    chip: str = Field(DEFAULT_CHIP, description=chip_help())
    compilers: list[Annotated[str, AfterValidator(check_spec)]] = Field(["installed"], min_length=1, description=(
        "the compiler builds under test, each a run of its own, compared op by op: installed, newest, "
        "jax-tt-plugin==VERSION, a wheel, or a PJRT plugin library (.so) or its package directory"))
    compiler: CompilerOptions = Field(CompilerOptions(), description="tt-mlir compile options")
    device: DeviceOptions = Field(DeviceOptions(), description="the simulated device: harvested rows, placement policy")
    thresholds: Thresholds | None = Field(None, description="golden thresholds; None: configs/thresholds.yaml")
    seed: int = Field(0, description="seed for every op's inputs")
    reuse_cached: bool = Field(True, description="reuse results of ops already analysed with the same "
                                                 "signature, compiler version, chip and options")
    whole_model: bool = Field(True, description="also compile and run each model whole")
    run_device: bool = Field(True, description="run each op on the simulated device and check it against "
                                               "XLA:CPU; off: compile only")
    op_timeout_s: float = Field(120.0, gt=0, description="per-op time limit")
    pass_timing: float = Field(0.0, ge=0.0, le=1.0, description="share of ops (chosen by signature) compiled again "
                                                               "with MLIR pass timing: each pass's time; 1: every op")
    cluster: ClusterConfig = Field(ClusterConfig(), description="where the per-op work runs")
    mesh: str | None = Field(None, description=mesh_help(" or "))
    unshard: bool = Field(False, description="analyse a sharded model on a single chip with its shardings removed "
                                             "(recorded on the model); without it, that is an error")
    export: ExportBudget = Field(ExportBudget(), description="what one model's export may cost "
                                 "(memory, time): past it, that model's error or its op's frontend_failed")

    def per_compiler(self) -> list[AnalysisConfig]:
        """One configuration per compiler build under test (each run has one)."""
        return [self.model_copy(update={"compilers": [spec]}) for spec in dict.fromkeys(self.compilers)]

    @property
    def keeps_weights(self) -> bool:
        """Whether the run's models need their weights' values: only a whole model's run stitches them
        (an op's upstream values come from the inputs and buffers alone)."""
        return self.whole_model

    @property
    def compiler_spec(self) -> str:
        """The compiler build of a one-compiler configuration (per_compiler() makes those)."""
        if len(self.compilers) != 1:
            raise ValueError(f"a run has one compiler, this configuration names {len(self.compilers)}: "
                             "split it with per_compiler()")
        return self.compilers[0]

    def options_key(self) -> str:
        """The options a result depends on besides signature, compiler build and chip (cache key).
        The default device keeps the compiler's key, so results of earlier runs stay reusable; a mesh
        chosen with `mesh` is part of it (its results record that mesh)."""
        if self.device == DeviceOptions() and self.mesh is None and self.run_device:
            return self.compiler.key()
        mesh = f"|mesh={self.mesh}" if self.mesh is not None else ""
        compile_only = "" if self.run_device else "|compile-only"
        return hashlib.sha256(f"{self.compiler.key()}|{self.device.key()}{mesh}{compile_only}".encode()).hexdigest()[:16]


class ShrinkOption(BaseModel):
    """Shrink failing ops after the fan-out: where each starts failing, by dimension and dtype."""

    failing: bool = Field(False, description="search the neighbourhood of every op that failed (compiler or device)")
    seconds_per_op: float = Field(60.0, gt=0, description="time budget of each op's search")
    max_ops: int = Field(20, ge=1, description="shrink at most this many failing ops (most occurrences first)")
