"""tally on Kubernetes: the kubelet device plugin (device_plugin.py), what Allocate gives a
container (allocation.py), the placement controller (controller.py) and their Kubernetes API
access (kube_api.py). The gRPC stubs (deviceplugin_v1beta1_pb2*.py) are generated at build time
from deviceplugin_v1beta1.proto; install the `cluster` extra for grpcio and protobuf."""
