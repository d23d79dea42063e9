"""`ahg.NodeType` carries HIP's enumerator names (`hipGraphNodeType...`) for every value."""

from __future__ import annotations

import ahipgraph as ahg

HIP_ENUMERATORS = {
    "hipGraphNodeTypeKernel": 0,
    "hipGraphNodeTypeMemcpy": 1,
    "hipGraphNodeTypeMemset": 2,
    "hipGraphNodeTypeHost": 3,
    "hipGraphNodeTypeGraph": 4,
    "hipGraphNodeTypeEmpty": 5,
    "hipGraphNodeTypeWaitEvent": 6,
    "hipGraphNodeTypeEventRecord": 7,
    "hipGraphNodeTypeExtSemaphoreSignal": 8,
    "hipGraphNodeTypeExtSemaphoreWait": 9,
    "hipGraphNodeTypeMemAlloc": 10,
    "hipGraphNodeTypeMemFree": 11,
    "hipGraphNodeTypeMemcpyFromSymbol": 12,
    "hipGraphNodeTypeMemcpyToSymbol": 13,
}


def test_every_hip_enumerator_is_a_member_with_hips_value() -> None:
    for hip_name, value in HIP_ENUMERATORS.items():
        member = ahg.NodeType[hip_name.removeprefix("hipGraphNodeType")]
        assert member == value
        assert member.hip_name == hip_name
        assert ahg.NodeType(value) is member


def test_external_semaphore_types_keep_their_earlier_spellings() -> None:
    assert ahg.NodeType.ExtSemasSignal is ahg.NodeType.ExtSemaphoreSignal
    assert ahg.NodeType.ExtSemasWait is ahg.NodeType.ExtSemaphoreWait
    assert ahg.NodeType(8).name == "ExtSemaphoreSignal"
