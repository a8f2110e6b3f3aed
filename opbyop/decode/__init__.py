"""LLM decode on the simulated device: prefill and decode-step programs, the key/value cache kept
on the device between submits (runtime stitching), beside the same loop with a host round trip."""

from opbyop.decode.figures import DecodeReport, DecodeRun, Mode, StepFigures
from opbyop.decode.session import DecodePlan, DecodeSettings, decode_model, plan_decode

__all__ = ["DecodePlan", "DecodeReport", "DecodeRun", "DecodeSettings", "Mode", "StepFigures", "decode_model",
           "plan_decode"]
