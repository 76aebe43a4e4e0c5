"""tally on Kubernetes. The device plugin: gpu_servers.py (a node's tally-servers and their
health), node_gpus.py (their state over time), allocation.py (units, the pod an Allocate is for,
what the container gets), annotations.py (the pod annotations tally reads), device_plugin.py (the
v1beta1 service), plugin_server.py (sockets, registration, kubelet restarts). The placement
controller: controller.py. Both reach the Kubernetes API through kube_api.py. The gRPC stubs
(deviceplugin_v1beta1_pb2*.py) are generated at build time from deviceplugin_v1beta1.proto.
Needs the `cluster` extra (grpcio, protobuf, kubernetes)."""
