"""Op programs parsed one after another in a reused MLIR context: the same programs, a bounded context."""

from __future__ import annotations

from pathlib import Path

from opbyop.device.program import ReusedContext, load_program

DATA = Path(__file__).parent / "data"
DUMPS = sorted(DATA.glob("ttnn_*.mlir"))


def test_a_program_read_in_a_reused_context_is_the_program_read_in_its_own():
    contexts = ReusedContext()
    for dump in DUMPS + DUMPS:  # each program twice: the second parse finds its types already known
        text = dump.read_text()
        assert repr(load_program(text, contexts.get())) == repr(load_program(text)), dump.name


def test_a_reused_context_is_made_anew_after_its_parses():
    contexts = ReusedContext(renew_after=3)
    served = [contexts.get() for _ in range(7)]
    assert served[0] is served[1] is served[2]
    assert served[3] is not served[2] and served[3] is served[5]
    assert served[6] is not served[5]

