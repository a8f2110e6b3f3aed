"""Messages between a worker (parent) and its child process, as JSON over a pipe.

The analysis itself takes opbyop.config.AnalysisSettings; these are only the wire format.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, Field, TypeAdapter

from opbyop.config import AnalysisSettings
from opbyop.records import OpResult, UniqueOp, WholeModelResult


class Request(BaseModel):
    kind: Literal["request"] = "request"
    id: str
    op: UniqueOp
    settings: AnalysisSettings


class WholeRequest(BaseModel):
    """Compile a whole model and run it stitched; values (arguments and reference outputs) in an npz."""

    kind: Literal["whole"] = "whole"
    id: str
    model: str
    module_text: str
    values_path: str  # npz: arg0..argN, ref0..refM
    parameters: list[int]  # argument indices that are weights (pushed once)
    iterations: int = 2
    settings: AnalysisSettings


class Ready(BaseModel):
    kind: Literal["ready"] = "ready"
    pid: int
    chip: str
    compiler: str  # the key of the build it loaded (CompilerIdentity.key)


class Progress(BaseModel):
    kind: Literal["progress"] = "progress"
    id: str
    stage: Literal["compile", "device_run", "golden"]


class Reply(BaseModel):
    kind: Literal["reply"] = "reply"
    id: str
    result: OpResult


class WholeReply(BaseModel):
    kind: Literal["whole_reply"] = "whole_reply"
    id: str
    result: WholeModelResult


class Failure(BaseModel):
    """The child could not handle a request (a bug in opbyop, not in the op): reported, not hidden."""

    kind: Literal["failure"] = "failure"
    id: str
    error: str


Message = Annotated[Union[Request, WholeRequest, Ready, Progress, Reply, WholeReply, Failure], Field(discriminator="kind")]
MESSAGE = TypeAdapter(Message)
