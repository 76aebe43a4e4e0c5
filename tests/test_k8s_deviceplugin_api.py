"""Our deviceplugin_v1beta1.proto against the published kubelet device-plugin API
v1beta1 (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1/api.proto), field by
field: the table below is the published API, transcribed; the descriptor is what
protoc generated from our file at build time."""
from __future__ import annotations

from google.protobuf.descriptor import FieldDescriptor as F

from tally.cluster.k8s import deviceplugin_v1beta1_pb2 as pb

S, B, I32, I64, MSG = F.TYPE_STRING, F.TYPE_BOOL, F.TYPE_INT32, F.TYPE_INT64, F.TYPE_MESSAGE
ONE, MANY = "optional", "repeated"

# message -> [(field name, number, type, label, message type or None)]
PUBLISHED = {
    "DevicePluginOptions": [("pre_start_required", 1, B, ONE, None),
                            ("get_preferred_allocation_available", 2, B, ONE, None)],
    "RegisterRequest": [("version", 1, S, ONE, None), ("endpoint", 2, S, ONE, None),
                        ("resource_name", 3, S, ONE, None), ("options", 4, MSG, ONE, "DevicePluginOptions")],
    "Empty": [],
    "ListAndWatchResponse": [("devices", 1, MSG, MANY, "Device")],
    "TopologyInfo": [("nodes", 1, MSG, MANY, "NUMANode")],
    "NUMANode": [("ID", 1, I64, ONE, None)],
    "Device": [("ID", 1, S, ONE, None), ("health", 2, S, ONE, None), ("topology", 3, MSG, ONE, "TopologyInfo")],
    "PreStartContainerRequest": [("devices_ids", 1, S, MANY, None)],
    "PreStartContainerResponse": [],
    "PreferredAllocationRequest": [("container_requests", 1, MSG, MANY, "ContainerPreferredAllocationRequest")],
    "ContainerPreferredAllocationRequest": [("available_deviceIDs", 1, S, MANY, None),
                                            ("must_include_deviceIDs", 2, S, MANY, None),
                                            ("allocation_size", 3, I32, ONE, None)],
    "PreferredAllocationResponse": [("container_responses", 1, MSG, MANY, "ContainerPreferredAllocationResponse")],
    "ContainerPreferredAllocationResponse": [("deviceIDs", 1, S, MANY, None)],
    "AllocateRequest": [("container_requests", 1, MSG, MANY, "ContainerAllocateRequest")],
    "ContainerAllocateRequest": [("devices_ids", 1, S, MANY, None)],
    "CDIDevice": [("name", 1, S, ONE, None)],
    "AllocateResponse": [("container_responses", 1, MSG, MANY, "ContainerAllocateResponse")],
    "ContainerAllocateResponse": [("envs", 1, MSG, MANY, "EnvsEntry"), ("mounts", 2, MSG, MANY, "Mount"),
                                  ("devices", 3, MSG, MANY, "DeviceSpec"),
                                  ("annotations", 4, MSG, MANY, "AnnotationsEntry"),
                                  ("cdi_devices", 5, MSG, MANY, "CDIDevice")],
    "Mount": [("container_path", 1, S, ONE, None), ("host_path", 2, S, ONE, None), ("read_only", 3, B, ONE, None)],
    "DeviceSpec": [("container_path", 1, S, ONE, None), ("host_path", 2, S, ONE, None),
                   ("permissions", 3, S, ONE, None)],
}

SERVICES = {
    "Registration": [("Register", "RegisterRequest", "Empty", False)],
    "DevicePlugin": [("GetDevicePluginOptions", "Empty", "DevicePluginOptions", False),
                     ("ListAndWatch", "Empty", "ListAndWatchResponse", True),
                     ("GetPreferredAllocation", "PreferredAllocationRequest", "PreferredAllocationResponse", False),
                     ("Allocate", "AllocateRequest", "AllocateResponse", False),
                     ("PreStartContainer", "PreStartContainerRequest", "PreStartContainerResponse", False)],
}


def _label(field) -> str:
    return MANY if field.is_repeated else ONE


def test_package_is_v1beta1():
    assert pb.DESCRIPTOR.package == "v1beta1"     # the wire names are /v1beta1.<Service>/<Method>


def test_every_message_field_by_field():
    assert set(pb.DESCRIPTOR.message_types_by_name) == set(PUBLISHED)
    for name, fields in PUBLISHED.items():
        message = pb.DESCRIPTOR.message_types_by_name[name]
        got = [(f.name, f.number, f.type, _label(f), f.message_type.name if f.message_type else None)
               for f in message.fields]
        assert got == fields, name


def test_map_fields_are_string_to_string():
    message = pb.DESCRIPTOR.message_types_by_name["ContainerAllocateResponse"]
    for name in ("envs", "annotations"):
        entry = message.fields_by_name[name].message_type
        assert entry.GetOptions().map_entry
        assert [(f.name, f.number, f.type) for f in entry.fields] == [("key", 1, S), ("value", 2, S)]


def test_services_and_streaming():
    assert set(pb.DESCRIPTOR.services_by_name) == set(SERVICES)
    for service, methods in SERVICES.items():
        got = [(m.name, m.input_type.name, m.output_type.name, m.server_streaming)
               for m in pb.DESCRIPTOR.services_by_name[service].methods]
        assert got == methods
        assert not any(m.client_streaming for m in pb.DESCRIPTOR.services_by_name[service].methods)
